package controller_test

import (
	"testing"

	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestMain runs the tests in the world of one plan (plantest), as the
// manager's role.
func TestMain(m *testing.M) { plantest.Main(m, plantest.ReconcilerSuite) }

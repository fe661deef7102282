package plantest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// TestSuitesCoverTheManagerRole: the suites of the plan's world together
// answer for every package whose markers make up the manager's role, once
// each, so that no permission of the role goes unchecked.
func TestSuitesCoverTheManagerRole(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^MANAGER_PKGS := (.*)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no MANAGER_PKGS")
	}
	var want []string
	for _, p := range strings.Fields(string(m[1])) {
		want = append(want, strings.TrimPrefix(p, "./"))
	}
	got := slices.Concat(ReconcilerSuite, PhaseSuite)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the suites answer for %v, the manager's role is made of %v", got, want)
	}
}

package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// forbiddenDep matches the packages the product binary must not link: the
// simulator and its world (they live in upgrade-toolkit-sim), envtest and
// every test helper package (internal/<anything>test).
var forbiddenDep = regexp.MustCompile(`^(github\.com/harvester/upgrade-toolkit/internal/(sim|simrun|demo|testenv)` +
	`|github\.com/harvester/upgrade-toolkit/internal/(.+/)?[a-z]*test` +
	`|sigs\.k8s\.io/controller-runtime/pkg/envtest)(/.*)?$`)

// TestProductLinksNoTestCode keeps the simulator, envtest and the test
// helpers out of the image that runs next to every Harvester.
func TestProductLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var found []string
	for _, pkg := range strings.Fields(string(out)) {
		if forbiddenDep.MatchString(pkg) {
			found = append(found, pkg)
		}
	}
	if len(found) > 0 {
		t.Errorf("upgrade-toolkit links test code; move what imports it to cmd/upgrade-toolkit-sim:\n  %s", strings.Join(found, "\n  "))
	}
}

func TestForbiddenDep(t *testing.T) {
	for pkg, want := range map[string]bool{
		"github.com/harvester/upgrade-toolkit/internal/sim":                 true,
		"github.com/harvester/upgrade-toolkit/internal/simrun":              true,
		"github.com/harvester/upgrade-toolkit/internal/demo":                true,
		"github.com/harvester/upgrade-toolkit/internal/testenv":             true,
		"github.com/harvester/upgrade-toolkit/internal/jobtest":             true,
		"github.com/harvester/upgrade-toolkit/internal/host/hosttest":       true,
		"github.com/harvester/upgrade-toolkit/internal/release/releasetest": true,
		"sigs.k8s.io/controller-runtime/pkg/envtest":                        true,
		"sigs.k8s.io/controller-runtime/pkg/envtest/komega":                 true,
		"github.com/harvester/upgrade-toolkit/internal/simulation":          false,
		"github.com/harvester/upgrade-toolkit/internal/host":                false,
		"github.com/harvester/upgrade-toolkit/internal/status":              false,
		"sigs.k8s.io/controller-runtime/pkg/manager":                        false,
	} {
		if got := forbiddenDep.MatchString(pkg); got != want {
			t.Errorf("forbiddenDep(%s) = %v, want %v", pkg, got, want)
		}
	}
}

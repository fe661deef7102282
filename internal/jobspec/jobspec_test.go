package jobspec_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/internal/jobspec"
)

// TestTheContractAsItShips pins what a Job's pod sees: the command lines, the
// variables and the exit codes the pod failure policy fails a Job on at once.
// The Jobs a running upgrade made, and an image of another version, rely on
// them as they are.
func TestTheContractAsItShips(t *testing.T) {
	for _, tc := range []struct {
		got  []string
		want string
	}{
		{jobspec.NodeCommand(jobspec.Prepare), "upgrade-toolkit node prepare"},
		{jobspec.NodeCommand(jobspec.PreDrain), "upgrade-toolkit node pre-drain"},
		{jobspec.NodeCommand(jobspec.PostDrain), "upgrade-toolkit node post-drain"},
		{jobspec.NodeCommand(jobspec.SingleNodeUpgrade), "upgrade-toolkit node single-node-upgrade"},
		{jobspec.NodeCommand(jobspec.ImageCleanup), "upgrade-toolkit node image-cleanup"},
		{jobspec.ClusterUpgradeCommand(), "upgrade-toolkit cluster-upgrade"},
		{jobspec.RestoreVMCommand("node-1", "hvst-upgrade-x"), "upgrade-toolkit restore-vm --node node-1 --upgrade hvst-upgrade-x"},
	} {
		if got := strings.Join(tc.got, " "); got != tc.want {
			t.Errorf("command line %q, want %q", got, tc.want)
		}
	}
	env := []string{jobspec.PlanEnv("p").Name}
	for _, e := range jobspec.NodeEnv("n") {
		env = append(env, e.Name)
	}
	if want := []string{"HARVESTER_UPGRADEPLAN_NAME", "HARVESTER_UPGRADE_NODE_NAME", "HARVESTER_UPGRADE_POD_NAME"}; !slices.Equal(env, want) {
		t.Errorf("variables %v, want %v", env, want)
	}
	if pod := jobspec.NodeEnv("n")[1]; pod.ValueFrom == nil || pod.ValueFrom.FieldRef == nil || pod.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("%s is not the pod's name: %+v", pod.Name, pod)
	}
	if got, want := jobspec.PermanentExitCodes(), []int32{2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14}; !slices.Equal(got, want) {
		t.Errorf("permanent exit codes %v, want %v", got, want)
	}
}

// TestExitCodesAreDistinct: each error has a code of its own, none of them
// success, the generic failure or a bad command line.
func TestExitCodesAreDistinct(t *testing.T) {
	seen := map[int]bool{0: true, jobspec.ExitFailure: true, jobspec.ExitUsage: true}
	for _, c := range jobspec.ExitCodes {
		if seen[c.Code] {
			t.Errorf("exit code %d (%s) is used twice", c.Code, c.Meaning)
		}
		seen[c.Code] = true
		if got := jobspec.ExitCodeOf(c.Err); got != c.Code {
			t.Errorf("ExitCodeOf(%v) = %d, want %d", c.Err, got, c.Code)
		}
	}
}

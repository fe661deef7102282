package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// TestExitCodes ends the commands people run once with each code of the
// table; TestCommandsTakeKubectlFlags checks them on every command.
func TestExitCodes(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kc := kubeconfig(t, env)
	ended := func(phase v1beta1.UpgradePlanPhase, message string) string {
		return jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) {
			p.Status.CurrentPhase = phase
			p.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionFalse,
				Reason: string(phase), Message: message, LastTransitionTime: metav1.Now()}}
		}).Name
	}
	succeeded := ended(v1beta1.PhaseSucceeded, "")
	failed := ended(v1beta1.PhaseFailed, "upgrading node node-2 failed in PostDrainFailed: Job harvester-system/x failed")
	aborted := ended(v1beta1.PhaseAborted, "aborted (spec.abort) before ClusterUpgrade: nothing of the release reached the cluster")

	tested := map[int]bool{}
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"status", succeeded, "--watch"}, 0, "Succeeded"},
		{[]string{"logs", "no-such-plan"}, exitFailure, "there is no UpgradePlan no-such-plan"},
		{[]string{"status", "--watch=maybe"}, usageExitCode, `invalid argument "maybe" for "-w, --watch"`},
		{[]string{"status", "a", "b"}, usageExitCode, "accepts at most 1 arg(s)"},
		{[]string{"preflight", "--version", "v1.8.0"}, exitCheckFailed, "WOULD NOT RUN"},
		{[]string{"status", failed, "--watch"}, exitPlanFailed, "the upgrade " + failed + " failed"},
		{[]string{"status", "--context", "nowhere"}, exitUnreachable, `context "nowhere" does not exist`},
		{[]string{"status", aborted, "--watch"}, exitPlanAborted, "the upgrade " + aborted + " was aborted"},
	} {
		code, out := runCLI(t, append(tc.args, "--kubeconfig", kc)...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("%v: exit code %d, output:\n%s\nwant exit code %d and %q", tc.args, code, out, tc.code, tc.out)
		}
		tested[tc.code] = true
	}
	for _, c := range exitCodes {
		if !tested[c.code] {
			t.Errorf("exit code %d (%s) is tested nowhere here", c.code, c.meaning)
		}
	}
}

// TestREADMEListsTheExitCodes: the README's table is the code's.
func TestREADMEListsTheExitCodes(t *testing.T) {
	readme, err := os.ReadFile(testenv.RepoRoot() + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(\\d+)` \\| (.+) \\|$")
	got := map[int]string{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		code, _ := strconv.Atoi(m[1])
		got[code] = m[2]
	}
	for _, c := range exitCodes {
		if got[c.code] != c.meaning {
			t.Errorf("README: exit code %d says %q, want the row | `%d` | %s |", c.code, got[c.code], c.code, c.meaning)
		}
		delete(got, c.code)
	}
	for code, meaning := range got {
		t.Errorf("README lists exit code %d (%s), which no command has", code, meaning)
	}
}

package main

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
	"github.com/harvester/upgrade-toolkit/internal/status"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// TestKubectlPluginRunsStatus: called as kubectl-upgrade_status (kubectl
// upgrade-status), the binary runs its status subcommand.
func TestKubectlPluginRunsStatus(t *testing.T) {
	tests := []struct {
		argv, want []string
	}{
		{[]string{"/usr/local/bin/kubectl-upgrade_status", "plan-a", "-w"}, []string{"status", "plan-a", "-w"}},
		{[]string{"kubectl-upgrade_status"}, []string{"status"}},
		{[]string{"/usr/local/bin/upgrade-toolkit", "status", "-o", "json"}, []string{"status", "-o", "json"}},
	}
	for _, tt := range tests {
		if got := pluginArgs(tt.argv); !slices.Equal(got, tt.want) {
			t.Errorf("%v: got %v, want %v", tt.argv, got, tt.want)
		}
	}
	cmd := newRootCommand()
	cmd.SetArgs(pluginArgs([]string{"kubectl-upgrade_status", "-o", "table"}))
	if err := cmd.Execute(); err == nil || !strings.HasPrefix(err.Error(), `-o "table": use one of json, yaml, name, go-template`) {
		t.Errorf("a bad --output: %v", err)
	}
}

// syncBuffer is a buffer one goroutine writes while another reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStatusWatchFollowsTheWatch runs the loop of status --watch against a
// real API server: it shows each change of the plan as the watch brings it,
// reads nothing while the plan does not change (no poll), and ends when the
// plan succeeds.
func TestStatusWatchFollowsTheWatch(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	waiting := func(p *v1beta1.UpgradePlan, phase v1beta1.UpgradePlanPhase, msg string) {
		p.Status.CurrentPhase = phase
		p.Status.Conditions = []metav1.Condition{{Type: v1beta1.ConditionProgressing, Status: metav1.ConditionTrue,
			Reason: "Waiting", Message: msg, LastTransitionTime: metav1.Now()}}
	}
	plan := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) { waiting(p, v1beta1.PhaseNodeUpgrading, "waiting for node-1 to drain") })
	change := func(phase v1beta1.UpgradePlanPhase, msg string) {
		t.Helper()
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(plan), plan); err != nil {
			t.Fatal(err)
		}
		waiting(plan, phase, msg)
		if err := env.Client.Status().Update(t.Context(), plan); err != nil {
			t.Fatal(err)
		}
	}
	counter := apicount.New()
	c, err := client.NewWithWatch(counter.Wrap(env.Config), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- followStatus(t.Context(), &status.View{Out: &out}, c, nil, plan.Name) }()
	shows := func(what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("status --watch does not show %q within 10s:\n%s", what, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	lists := func() int { return counter.Snapshot()[apicount.Key{Verb: "list", Resource: "upgradeplans"}] }

	shows("waiting for node-1 to drain")
	time.Sleep(time.Second) // the loop is in its watch by now
	before := lists()
	time.Sleep(3 * time.Second)
	if n := lists(); n != before {
		t.Errorf("the plan did not change, yet --watch listed plans %d times in 3s: a poll", n-before)
	}
	change(v1beta1.PhaseNodeUpgrading, "waiting for node-2 to reboot")
	shows("waiting for node-2 to reboot")
	change(v1beta1.PhaseSucceeded, "")
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the plan succeeded, yet --watch ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("--watch did not end within 10s of the plan's success:\n%s", out.String())
	}
	if counter.Snapshot()[apicount.Key{Verb: "watch", Resource: "upgradeplans"}] < 2 {
		t.Errorf("--watch followed no watch: %v", counter.Snapshot())
	}
}

package e2e

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
)

// abortPlan sets spec.abort on the running plan.
func abortPlan(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
	t.Helper()
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"abort":true}}`))
	if err := run.Client.Patch(ctx, p.DeepCopy(), patch); err != nil {
		t.Fatalf("aborting the plan: %v", err)
	}
}

// TestAbortBeforeClusterUpgrade: a plan aborted while it preloads images
// ends Aborted at once; nothing of the release reached the cluster, and
// everything it made is gone and every setting restored (the scenario's
// invariants and settings check).
func TestAbortBeforeClusterUpgrade(t *testing.T) {
	var plan string
	aborted := false
	scenario{sim: sim.Config{Nodes: 2}, want: v1beta1.PhaseAborted, failure: "before the release reached the cluster",
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			plan = p.Name
			if !aborted && p.Status.CurrentPhase == v1beta1.PhaseImagePreloading {
				aborted = true
				abortPlan(t, ctx, run, p)
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			p := &v1beta1.UpgradePlan{}
			if err := run.Client.Get(ctx, client.ObjectKey{Name: plan}, p); err != nil {
				t.Fatal(err)
			}
			for _, ph := range p.Status.PhaseTransitionTimestamps {
				if ph.Phase == v1beta1.PhaseClusterUpgrading {
					t.Errorf("the aborted plan began its cluster upgrade")
				}
			}
			checkEvent(t, ctx, run, v1beta1.EventUpgradeAborted, "before the release reached the cluster")
		}}.run(t)
	if !aborted {
		t.Fatal("the plan was never seen preloading images")
	}
}

// TestAbortDuringNodeUpgrade: a plan aborted while its first node reboots
// lets that node finish, starts no other, ends Aborted naming the nodes
// upgraded and those not and how to finish, and cleans up.
func TestAbortDuringNodeUpgrade(t *testing.T) {
	var order []string
	var plan string
	aborted := false
	scenario{sim: sim.Config{Nodes: 3, Timing: halfDemoTiming()}, want: v1beta1.PhaseAborted, failure: "create a new plan",
		beforePlan: func(t *testing.T, ctx context.Context, run *simrun.Run) { order = rolloutOrder(t, ctx, run) },
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			plan = p.Name
			if !aborted && p.Status.NodeUpgradeStatuses[order[0]].State == v1beta1.NodeStateWaitingReboot {
				aborted = true
				abortPlan(t, ctx, run, p)
			}
			if aborted {
				for _, n := range order[1:] {
					if st := p.Status.NodeUpgradeStatuses[n].State; !nodestate.NotStarted(st) {
						t.Errorf("%s began its upgrade (%s) after the abort", n, st)
					}
				}
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			p := &v1beta1.UpgradePlan{}
			if err := run.Client.Get(ctx, client.ObjectKey{Name: plan}, p); err != nil {
				t.Fatal(err)
			}
			if st := p.Status.NodeUpgradeStatuses[order[0]].State; !nodestate.Upgraded(st) {
				t.Errorf("%s, under way at the abort, ends %s: it should have finished", order[0], st)
			}
			c := p.Condition(v1beta1.ConditionProgressing)
			left := []string{order[1], order[2]}
			if left[0] > left[1] {
				left[0], left[1] = left[1], left[0]
			}
			if c == nil || c.Reason != v1beta1.ReasonAborted || !strings.Contains(c.Message, "nodes upgraded: "+order[0]) ||
				!strings.Contains(c.Message, "nodes not upgraded: "+strings.Join(left, ", ")) {
				t.Errorf("Progressing %+v: want reason Aborted naming %s upgraded and %v not", c, order[0], left)
			}
			checkEvent(t, ctx, run, v1beta1.EventUpgradeAborted, "nodes upgraded: "+order[0])
		}}.run(t)
	if !aborted {
		t.Fatal("the first node was never seen waiting for its reboot")
	}
}

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
)

// TestLostNodeExcluded: the second node Rancher upgrades never comes back
// from its reboot (FaultSet.NeverReturn). Once it is down while it waits
// for its reboot, the operator lists it in excludeNodes: it is recorded
// Excluded, Rancher's post-drain hook of it is answered, and the upgrade
// goes on with the last node (Rancher moves on, the breaker no longer
// counts the lost node; the health gate names the volumes the lost node
// leaves degraded and how to go on, which the operator takes: Relaxed),
// skips it in the image cleanup and the final checks, and ends Succeeded
// with the NodesExcluded condition naming it.
func TestLostNodeExcluded(t *testing.T) {
	var order []string
	var plan string
	var down, excludedAt time.Time
	relaxed := false
	scenario{sim: sim.Config{Nodes: 3, Timing: halfDemoTiming()}, want: v1beta1.PhaseSucceeded,
		beforePlan: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			order = rolloutOrder(t, ctx, run)
			run.Sim.SetFaults(sim.FaultSet{NeverReturn: []string{order[1]}})
		},
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			plan = p.Name
			lost := order[1]
			if st := p.Status.NodeUpgradeStatuses[order[2]]; !relaxed && strings.Contains(st.Message, "excluded from the upgrade, is down") {
				// The operator reads why the gate holds the last node and
				// accepts the named risk.
				relaxed = true
				t.Logf("%s held: %s", order[2], st.Message)
				patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"nodeUpgradeOption":{"healthGate":"Relaxed"}}}`))
				if err := run.Client.Patch(ctx, p.DeepCopy(), patch); err != nil {
					t.Fatalf("relaxing the health gate: %v", err)
				}
			}
			if p.Status.NodeUpgradeStatuses[lost].State != v1beta1.NodeStateWaitingReboot || !down.IsZero() {
				if st := p.Status.NodeUpgradeStatuses[lost]; st.State == v1beta1.NodeStateExcluded && excludedAt.IsZero() {
					excludedAt = time.Now()
					t.Logf("%s excluded %s after the request: %s", lost, excludedAt.Sub(down).Round(time.Millisecond), st.Message)
				}
				return
			}
			n := &corev1.Node{}
			if err := run.Client.Get(ctx, client.ObjectKey{Name: lost}, n); err != nil {
				t.Fatal(err)
			}
			if cluster.NodeReady(n) {
				return
			}
			down = time.Now()
			patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"nodeUpgradeOption":{"excludeNodes":["`+lost+`"]}}}`))
			if err := run.Client.Patch(ctx, p.DeepCopy(), patch); err != nil {
				t.Fatalf("excluding %s: %v", lost, err)
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			p := &v1beta1.UpgradePlan{}
			if err := run.Client.Get(ctx, client.ObjectKey{Name: plan}, p); err != nil {
				t.Fatal(err)
			}
			lost, last := order[1], order[2]
			if st := p.Status.NodeUpgradeStatuses[lost]; st.State != v1beta1.NodeStateExcluded || st.Reason != v1beta1.ReasonExcludedByOperator {
				t.Errorf("%s ends %s (%s), want Excluded", lost, st.State, st.Reason)
			}
			if st := p.Status.NodeUpgradeStatuses[last].State; !nodestate.Upgraded(st) {
				t.Errorf("%s, after the lost node, ends %s: the upgrade did not go on without it", last, st)
			}
			c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionNodesExcluded)
			if c == nil || c.Status != "True" || !strings.Contains(c.Message, lost) || !strings.Contains(c.Message, "Remove each from the cluster") {
				t.Errorf("condition NodesExcluded %+v: want True, naming %s and what to do", c, lost)
			}
			final := ""
			for _, ch := range p.Status.Checks {
				if strings.HasSuffix(ch.Name, "/NodesUpgraded") {
					final = ch.Message
				}
			}
			if !strings.Contains(final, "not checked, excluded from the upgrade: "+lost) {
				t.Errorf("the final check of the nodes says %q: want it to name %s as excluded", final, lost)
			}
			checkEvent(t, ctx, run, v1beta1.EventNodeExcluded, lost)
			checkEvent(t, ctx, run, v1beta1.EventUpgradeSucceeded, "every node but "+lost)
		}}.run(t)
	if down.IsZero() || excludedAt.IsZero() {
		t.Fatalf("the lost node was never seen down while waiting for its reboot (%v), or never excluded (%v)", down, excludedAt)
	}
}

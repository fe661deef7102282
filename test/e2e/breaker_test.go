package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
)

// TestCircuitBreaker: the node Rancher upgrades last loses its power while
// the first one reboots for its upgrade (FaultSet.Outages). The toolkit
// names the open circuit breaker within a minute, drains no other node
// while it is down (the next one is held, saying why), and, once it is back,
// goes on by itself to Succeeded.
func TestCircuitBreaker(t *testing.T) {
	var found *named
	var down time.Time
	var order []string
	held, released := false, false
	scenario{sim: sim.Config{Nodes: 3, Timing: halfDemoTiming()}, want: v1beta1.PhaseSucceeded,
		beforePlan: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			order = rolloutOrder(t, ctx, run)
			run.Sim.SetFaults(sim.FaultSet{Outages: []sim.Outage{{Node: order[2], During: order[0]}}})
		},
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			next, last := order[1], order[2]
			if down.IsZero() {
				n := &corev1.Node{}
				if err := run.Client.Get(ctx, client.ObjectKey{Name: last}, n); err != nil {
					t.Fatal(err)
				}
				if c := cluster.ReadyCondition(n); c != nil && c.Status != corev1.ConditionTrue {
					down = c.LastTransitionTime.Time
				}
			}
			if in, ok := findInsight(p, v1beta1.InsightCircuitBreakerOpen, "Node/"+last); ok && found == nil {
				found = &named{in, time.Now()}
				statusShows(t, ctx, run, p.Name, in)
			}
			st := p.Status.NodeUpgradeStatuses[next]
			if !released && !down.IsZero() && !nodestate.NotStarted(st.State) {
				t.Errorf("%s began its upgrade (%s) while %s was down", next, st.State, last)
			}
			if !held && strings.HasPrefix(st.Message, nodestate.BreakerPrefix) && strings.Contains(st.Message, last) {
				held = true
				t.Logf("%s held: %s", next, st.Message)
				if c := p.Condition(v1beta1.ConditionProgressing); c == nil || !strings.Contains(c.Message, "held by the circuit breaker") {
					t.Errorf("the Progressing condition does not say the breaker holds %s: %+v", next, c)
				}
			}
			if held && found != nil && !released {
				run.Sim.SetFaults(sim.FaultSet{})
				released = true
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			checkEvent(t, ctx, run, v1beta1.EventInsight, v1beta1.InsightCircuitBreakerOpen)
		}}.run(t)
	checkNamed(t, "a second node down", down, found, "Node/"+order[2])
	if !held {
		t.Errorf("%s was never held by the breaker while %s was down", order[1], order[2])
	}
}

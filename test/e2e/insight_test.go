package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/status"
)

// nameWithin is the most the toolkit may take to name a problem once its
// cause exists (issue "Within a minute, why").
const nameWithin = time.Minute

// named is an insight seen in the plan's status, and when.
type named struct {
	in v1beta1.Insight
	at time.Time
}

// findInsight returns the plan's insight of the type whose objects include
// object, if any.
func findInsight(p *v1beta1.UpgradePlan, insightType, object string) (v1beta1.Insight, bool) {
	for _, in := range p.Status.Insights {
		if in.Type == insightType && slices.Contains(in.Objects, object) {
			return in, true
		}
	}
	return v1beta1.Insight{}, false
}

// statusShows checks that `upgrade-toolkit status` shows the insight, and
// first, before the phase.
func statusShows(t *testing.T, ctx context.Context, run *simrun.Run, plan string, in v1beta1.Insight) {
	t.Helper()
	s, err := status.Compute(ctx, run.Client, nil, plan, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	text := status.Text(s)
	i, phase := strings.Index(text, in.Type), strings.Index(text, "\nphase ")
	if i < 0 || phase < 0 || i > phase || !strings.Contains(text, in.Message) {
		t.Errorf("upgrade-toolkit status does not show insight %s first:\n%s", in.Type, text)
	}
}

// checkNamed checks an insight was named within nameWithin of its cause,
// with the objects involved, and logs the time it took.
func checkNamed(t *testing.T, what string, cause time.Time, n *named, objects ...string) {
	t.Helper()
	if n == nil {
		t.Fatalf("%s: never named", what)
	}
	took := n.at.Sub(cause)
	t.Logf("%s: named %s after its cause: %s %s [%s]: %s", what, took.Round(100*time.Millisecond), n.in.Level, n.in.Type, n.in.Impact, n.in.Message)
	if took > nameWithin {
		t.Errorf("%s: named %s after its cause, want within %s", what, took, nameWithin)
	}
	for _, o := range objects {
		if !slices.Contains(n.in.Objects, o) {
			t.Errorf("%s: the insight names %v, not %s", what, n.in.Objects, o)
		}
	}
	if n.in.Doc == "" || n.in.Since.IsZero() || n.in.Impact == "" || n.in.Level == "" {
		t.Errorf("%s: incomplete insight %+v", what, n.in)
	}
}

// TestInsightPDBBlocksDrain: a PodDisruptionBudget at its limit guards a
// pod on the first node Rancher drains, whose drain timeout is Rancher's
// default (600 s). The toolkit names the budget, the pod and the node
// itself, within a minute of the drain starting and before any drain error
// of Rancher's exists.
func TestInsightPDBBlocksDrain(t *testing.T) {
	timing := halfDemoTiming()
	timing.DrainTimeout = 600 * time.Second
	var found *named
	var drainStarted time.Time
	var guard client.Object
	const guarded = "Pod/default/guarded"
	scenario{sim: sim.Config{Nodes: 2, Timing: timing, NodeImages: []string{sim.GuardedImage}}, want: v1beta1.PhaseSucceeded,
		beforePlan: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			_, pdb, err := run.Sim.ProtectPod(ctx, "default", "guarded", "node-1")
			if err != nil {
				t.Fatal(err)
			}
			guard = pdb
		},
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if st := p.Status.NodeUpgradeStatuses["node-1"]; st.State == v1beta1.NodeStatePreDrained && drainStarted.IsZero() {
				drainStarted = st.LastTransitionTime.Time
			}
			in, ok := findInsight(p, v1beta1.InsightDrainBlockedByPDB, guarded)
			if !ok || found != nil {
				return
			}
			found = &named{in, time.Now()}
			if e := rancherDrainError(t, ctx, run); e != "" {
				t.Errorf("Rancher had reported the drain error before the toolkit named it: %s", e)
			}
			statusShows(t, ctx, run, p.Name, in)
			if err := run.Client.Delete(ctx, guard); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			checkEvent(t, ctx, run, v1beta1.EventInsight, v1beta1.InsightDrainBlockedByPDB)
		}}.run(t)
	checkNamed(t, "a PodDisruptionBudget at its limit", drainStarted, found, "Node/node-1", guarded, "PodDisruptionBudget/default/guarded-guard")
}

// TestInsightDrainTaintRemoved: while Rancher drains node-1, another
// controller removes its kubevirt.io/drain taint (harvester/harvester#10714).
// The toolkit names it, and who did it, within a minute.
func TestInsightDrainTaintRemoved(t *testing.T) {
	timing := halfDemoTiming()
	// Rancher's drain takes a while, as on a real cluster.
	timing.DrainStep = 5 * time.Second
	var found *named
	var removed time.Time
	scenario{sim: sim.Config{Nodes: 2, Timing: timing}, want: v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if st := p.Status.NodeUpgradeStatuses["node-1"]; st.State == v1beta1.NodeStatePreDrained && removed.IsZero() {
				if err := run.Sim.RemoveDrainTaint(ctx, "node-1", "rogue-controller"); err != nil {
					t.Fatal(err)
				}
				removed = time.Now()
			}
			in, ok := findInsight(p, v1beta1.InsightDrainTaintRemoved, "Node/node-1")
			if !ok || found != nil {
				return
			}
			found = &named{in, time.Now()}
			if !strings.Contains(in.Message, "rogue-controller") || in.Level != v1beta1.InsightError {
				t.Errorf("the insight does not say who removed the taint, or is not an Error: %+v", in)
			}
			statusShows(t, ctx, run, p.Name, in)
		}}.run(t)
	checkNamed(t, "the drain taint removed", removed, found, "Node/node-1")
}

// TestInsightSecondNodeCordoned: while the first node is upgraded someone
// cordons the node Rancher will upgrade last. The toolkit names it and who
// cordoned it within a minute, and drains no other node until it is back
// (Rancher's drain of the next node waits at the health gate); uncordoned,
// the upgrade goes on.
func TestInsightSecondNodeCordoned(t *testing.T) {
	var found *named
	var cordoned time.Time
	var order []string
	held, released := false, false
	scenario{sim: sim.Config{Nodes: 3, Timing: halfDemoTiming()}, want: v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if order == nil {
				order = rolloutOrder(t, ctx, run)
			}
			first, next, last := order[0], order[1], order[2]
			if st := p.Status.NodeUpgradeStatuses[first]; st.State == v1beta1.NodeStatePreDraining && cordoned.IsZero() {
				if err := run.Sim.Cordon(ctx, last, "kubectl-cordon", true); err != nil {
					t.Fatal(err)
				}
				cordoned = time.Now()
			}
			if in, ok := findInsight(p, v1beta1.InsightNodeUnavailable, "Node/"+last); ok && found == nil {
				found = &named{in, time.Now()}
				if !strings.Contains(in.Message, "kubectl-cordon") {
					t.Errorf("the insight does not say who cordoned %s: %s", last, in.Message)
				}
				statusShows(t, ctx, run, p.Name, in)
			}
			st := p.Status.NodeUpgradeStatuses[next]
			if !released && !cordoned.IsZero() && !nodestate.NotStarted(st.State) {
				t.Errorf("%s began its upgrade (%s) while %s was cordoned", next, st.State, last)
			}
			if !held && strings.Contains(st.Message, last+" cordoned") {
				held = true
				t.Logf("%s held: %s", next, st.Message)
			}
			// Released once held and named: the watchdog looks every 5 s,
			// and the hold can come first.
			if held && found != nil && !released {
				if err := run.Sim.Cordon(ctx, last, "kubectl-cordon", false); err != nil {
					t.Fatal(err)
				}
				released = true
			}
		}}.run(t)
	checkNamed(t, "a second node cordoned", cordoned, found, "Node/"+order[2])
	if !held {
		t.Errorf("%s was never held for %s", order[1], order[2])
	}
}

// rolloutOrder is the order in which Rancher upgrades the nodes.
func rolloutOrder(t *testing.T, ctx context.Context, run *simrun.Run) []string {
	t.Helper()
	var machines capiv1beta1.MachineList
	if err := run.Client.List(ctx, &machines, client.InNamespace(cluster.FleetLocalNamespace)); err != nil {
		t.Fatal(err)
	}
	ms := make([]*capiv1beta1.Machine, 0, len(machines.Items))
	for i := range machines.Items {
		if machines.Items[i].Status.NodeRef != nil {
			ms = append(ms, &machines.Items[i])
		}
	}
	slices.SortFunc(ms, cluster.CompareRolloutOrder)
	var out []string
	for _, m := range ms {
		out = append(out, m.Status.NodeRef.Name)
	}
	if len(out) < 3 {
		t.Fatalf("rollout order of %d machines: %v", len(out), out)
	}
	return out
}

// TestInsightV1Upgrade: Harvester's built-in upgrade is started while the
// plan runs. The toolkit names it within a minute; once it is deleted the
// insight goes.
func TestInsightV1Upgrade(t *testing.T) {
	var found *named
	var started time.Time
	var v1 client.Object
	gone := false
	scenario{sim: sim.Config{Nodes: 2, Timing: halfDemoTiming()}, want: v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if started.IsZero() && p.Status.CurrentPhase != "" {
				u, err := run.Sim.StartV1Upgrade(ctx, "hvst-upgrade-x", "v1.8.0")
				if err != nil {
					t.Fatal(err)
				}
				started, v1 = time.Now(), u
			}
			in, ok := findInsight(p, v1beta1.InsightConcurrentV1Upgrade, "Upgrade/harvester-system/hvst-upgrade-x")
			if ok && found == nil {
				found = &named{in, time.Now()}
				statusShows(t, ctx, run, p.Name, in)
				if err := run.Client.Delete(ctx, v1); err != nil {
					t.Error(err)
				}
			}
			if !ok && found != nil {
				gone = true
			}
		}}.run(t)
	checkNamed(t, "Harvester's V1 upgrade", started, found, "Upgrade/harvester-system/hvst-upgrade-x")
	if !gone {
		t.Error("the insight stayed after the V1 upgrade was deleted")
	}
}

// TestInsightStalled: node-3's post-drain Job runs far longer than the
// nodes before it took. Once it overruns its estimate by the margin the
// plan says Stalled (condition, insight, status), with what it waits for;
// when the Job ends the condition goes False again.
func TestInsightStalled(t *testing.T) {
	faults := sim.FaultSet{SlowJobs: []sim.JobFault{{Type: sim.JobPostDrain, Node: "node-3", Delay: 75 * time.Second}}}
	var found *named
	var overran time.Time
	scenario{sim: sim.Config{Nodes: 3, Timing: halfDemoTiming(), Faults: faults}, want: v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			s := status.FromPlan(p, nil, time.Now())
			if overran.IsZero() {
				for _, n := range s.Nodes {
					if n.Name == "node-3" && n.Upgrading {
						if mean, ok := meanUpgrade(s); ok {
							overran = time.Now().Add(-n.Upgrade.Duration).Add(mean)
						}
					}
				}
			}
			in, ok := findInsight(p, v1beta1.InsightStalled, "Node/node-3")
			if !ok || found != nil {
				return
			}
			found = &named{in, time.Now()}
			if c := p.Condition(v1beta1.ConditionStalled); c == nil || c.Status != "True" || !strings.Contains(c.Message, "node node-3, begun at") {
				t.Errorf("the Stalled condition: %+v", c)
			}
			statusShows(t, ctx, run, p.Name, in)
		}}.run(t)
	checkNamed(t, "a node past its estimate", overran, found, "Node/node-3")
}

// meanUpgrade is the mean time of the node upgrades that finished.
func meanUpgrade(s *status.Status) (time.Duration, bool) {
	var sum time.Duration
	n := 0
	for _, node := range s.Nodes {
		if node.Upgrade != nil && !node.Upgrading {
			sum += node.Upgrade.Duration
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / time.Duration(n), true
}

// rancherDrainError is the drain errors Rancher reported on the machine-plan
// Secrets, "" when none.
func rancherDrainError(t *testing.T, ctx context.Context, run *simrun.Run) string {
	t.Helper()
	var secrets corev1.SecretList
	if err := run.Client.List(ctx, &secrets, client.InNamespace(cluster.FleetLocalNamespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range secrets.Items {
		if e := s.Annotations[cluster.AnnotationRancherDrainError]; e != "" {
			out = append(out, e)
		}
	}
	return strings.Join(out, "; ")
}

// checkEvent checks that the plan has an event of the reason whose message
// says want.
func checkEvent(t *testing.T, ctx context.Context, run *simrun.Run, reason, want string) {
	t.Helper()
	var events corev1.EventList
	if err := run.Client.List(ctx, &events); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == reason && strings.Contains(e.Message, want) {
			return
		}
	}
	t.Errorf("no %s event says %q", reason, want)
}

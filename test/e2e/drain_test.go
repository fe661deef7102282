package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
)

// TestPDBBlocksDrain: a PodDisruptionBudget that allows no disruption
// protects a pod on the first node Rancher drains. The real API server
// refuses the pod's eviction; Rancher's drain reports it; the plan names the
// budget and the pod, once in a DrainBlocked event. Once the budget is
// deleted the drain goes on and the upgrade succeeds.
func TestPDBBlocksDrain(t *testing.T) {
	const want = "drain of node node-1 blocked: PodDisruptionBudget default/guard (minAvailable 1, 0 disruptions allowed) protects pod default/guarded"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "guarded", Labels: map[string]string{"app": "guarded"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "registry.suse.com/bci/bci-base:15.6"}}},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}
	var created, blocked bool
	var message string
	scenario{sim: sim.Config{Nodes: 2, Timing: halfDemoTiming()}, want: v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if !created {
				for _, o := range []client.Object{pod, pdb} {
					if err := run.Client.Create(ctx, o); err != nil {
						t.Fatal(err)
					}
				}
				created = true
			}
			st := p.Status.NodeUpgradeStatuses["node-1"]
			if blocked || !strings.Contains(st.Message, want) {
				return
			}
			blocked, message = true, st.Message
			if st.Reason != v1beta1.ReasonDrainBlocked {
				t.Errorf("node-1's reason is %q, want %s", st.Reason, v1beta1.ReasonDrainBlocked)
			}
			if c := p.Condition(v1beta1.ConditionProgressing); c == nil || !strings.Contains(c.Message, want) {
				t.Errorf("the Progressing condition does not name the blocker: %+v", c)
			}
			if err := run.Client.Delete(ctx, pdb); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			var events corev1.EventList
			if err := run.Client.List(ctx, &events); err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for _, e := range events.Items {
				if e.Reason == v1beta1.EventDrainBlocked {
					seen[e.Message] += int(max(e.Count, 1))
				}
			}
			if len(seen) == 0 {
				t.Error("no DrainBlocked event")
			}
			for msg, n := range seen {
				if n > 1 {
					t.Errorf("DrainBlocked event %q recorded %d times, want once", msg, n)
				}
			}
		}}.run(t)
	if !blocked {
		t.Fatal("the plan never named the PodDisruptionBudget that blocked node-1's drain")
	}
	t.Logf("node-1's message while blocked: %s", message)
}

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/nodejob"
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
	// The operator's own workload: its image is on its node.
	scenario{sim: sim.Config{Nodes: 2, Timing: halfDemoTiming(), NodeImages: []string{pod.Spec.Containers[0].Image}}, want: v1beta1.PhaseSucceeded,
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

// TestPausedVMFailsAtOnce: a paused VM pinned to its node can neither
// live-migrate nor be stopped by the upgrade (its guest cannot shut down
// while paused). The node's pre-drain fails at once naming the VM and what
// to do, instead of waiting out the 45-minute evacuation deadline.
func TestPausedVMFailsAtOnce(t *testing.T) {
	vms := []sim.VM{
		{Namespace: "default", Name: "paused-1", Node: "node-1", Pinned: true, Paused: true},
		{Namespace: "default", Name: "paused-2", Node: "node-2", Pinned: true, Paused: true},
		{Namespace: "default", Name: "movable", Node: "node-1"},
	}
	var drainStarted time.Time
	final := scenario{sim: sim.Config{Nodes: 2, VMs: vms, Timing: halfDemoTiming()}, want: v1beta1.PhaseFailed,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			for _, st := range p.Status.NodeUpgradeStatuses {
				if st.State == v1beta1.NodeStatePreDraining && drainStarted.IsZero() {
					drainStarted = time.Now()
				}
			}
		},
		failure: "is paused and cannot live-migrate (pinned by nodeSelector kubernetes.io/hostname=node-",
	}.run(t)
	c := final.Condition(v1beta1.ConditionProgressing)
	if !strings.Contains(c.Message, "virtctl unpause vm paused-") {
		t.Errorf("the failure does not say how to unpause the VM: %s", c.Message)
	}
	// Exit code 7 is permanent: the Job fails without a retry.
	if !strings.Contains(c.Message, "(PodFailurePolicy: ") {
		t.Errorf("the pre-drain Job was not failed at once by its pod failure policy: %s", c.Message)
	}
	failedAt, _ := lastTransition(final, v1beta1.PhaseFailed)
	took := failedAt.Sub(drainStarted)
	evacuation := nodejob.DefaultTimeouts().Evacuation
	t.Logf("pre-drain began at %s, the plan failed %s later (evacuation deadline %s): %s", drainStarted, took, evacuation, c.Message)
	if drainStarted.IsZero() || took > evacuation/10 {
		t.Errorf("the plan failed %s after the drain began, want far below the evacuation deadline %s", took, evacuation)
	}
}

// TestEvictionStrategyNoneIsShutDown: KubeVirt does not live-migrate a VM
// whose evictionStrategy is None off a draining node, so the upgrade shuts
// it down, records it and starts it again once its node is upgraded,
// instead of waiting out the evacuation deadline for it.
func TestEvictionStrategyNoneIsShutDown(t *testing.T) {
	vms := []sim.VM{
		{Namespace: "default", Name: "no-evict", Node: "node-1", EvictionStrategy: "None"},
		{Namespace: "default", Name: "movable", Node: "node-2"},
	}
	scenario{sim: sim.Config{Nodes: 2, VMs: vms, Timing: halfDemoTiming()}, spec: v1beta1.UpgradePlanSpec{RestoreVM: ptr.To(true)},
		want: v1beta1.PhaseSucceeded,
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			var cms corev1.ConfigMapList
			if err := run.Client.List(ctx, &cms, client.InNamespace(cluster.HarvesterNamespace)); err != nil {
				t.Fatal(err)
			}
			recorded := ""
			for _, cm := range cms.Items {
				if strings.HasSuffix(cm.Name, "-restore-vm") {
					recorded = cm.Data["node-1"]
				}
			}
			if recorded != "default/no-evict" {
				t.Errorf("node-1's restore record is %q, want default/no-evict", recorded)
			}
			vm := &kubevirtv1.VirtualMachine{}
			if err := run.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "no-evict"}, vm); err != nil {
				t.Fatal(err)
			}
			if s := ptr.Deref(vm.Spec.RunStrategy, ""); s == "Halted" {
				t.Errorf("VM default/no-evict was not started again (runStrategy %s)", s)
			}
		}}.run(t)
}

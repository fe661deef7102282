package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/kept"
)

func update(o, n client.Object) event.UpdateEvent {
	return event.UpdateEvent{ObjectOld: o, ObjectNew: n}
}

// TestPodChangeMatters: the plan wakes for the scheduler's verdict on a pod,
// how its containers end and its deletion, not for where it runs, its phase,
// its finalizers or the kubelet's other reports.
func TestPodChangeMatters(t *testing.T) {
	base := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "c"}}}}
	for name, tc := range map[string]struct {
		change func(*corev1.Pod)
		want   bool
	}{
		"a finalizer removed": {func(p *corev1.Pod) { p.Finalizers = nil; p.ResourceVersion = "3" }, false},
		"an IP":               {func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.1" }, false},
		"a container started": {func(p *corev1.Pod) { p.Status.ContainerStatuses[0].Started = ptr.To(true) }, false},
		"scheduled":           {func(p *corev1.Pod) { p.Spec.NodeName = "n1" }, false},
		"running":             {func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }, false},
		"ready": {func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}, false},
		"unschedulable": {func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		}, true},
		"unschedulable for another reason": {func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available"}}
		}, true},
		"a container exited": {func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 3}
		}, true},
		"restarted":     {func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 1 }, true},
		"being deleted": {func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }, true},
	} {
		n := base.DeepCopy()
		tc.change(n)
		if got := podChangeMatters(update(base, n)); got != tc.want {
			t.Errorf("%s: matters %v, want %v", name, got, tc.want)
		}
	}
}

// TestChangingMarksEveryEvent: every event of a machine-plan Secret marks
// the kind changed, the ones the drain predicate drops included, and only
// the kept ones ask for a pass.
func TestChangingMarksEveryEvent(t *testing.T) {
	lists := kept.New()
	h := lists.Marking(kept.KindMachinePlans, handler.EnqueueRequestsFromMapFunc(planOfLabel), predicate.Funcs{UpdateFunc: drainStateChanged})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{v1beta1.LabelUpgradePlan: "p"}}}
	acked := old.DeepCopy()
	acked.Annotations = map[string]string{v1beta1.AnnotationPreHook: "1"}
	h.Update(context.Background(), update(old, acked), q)
	if got := lists.Changes(kept.KindMachinePlans); got != 1 || q.Len() != 0 {
		t.Errorf("an acknowledgement: %d changes marked and %d passes asked for, want 1 and 0", got, q.Len())
	}
	requested := acked.DeepCopy()
	requested.Annotations[cluster.AnnotationRancherPreDrain] = "1"
	h.Update(context.Background(), update(acked, requested), q)
	if got := lists.Changes(kept.KindMachinePlans); got != 2 || q.Len() != 1 {
		t.Errorf("a drain request: %d changes marked and %d passes asked for, want 2 and 1", got, q.Len())
	}
	if lists.Changes(kept.KindNodes) != 0 {
		t.Error("a Secret's change marked the nodes changed")
	}
}

// TestNodeReachedAck: the drain-hook reconciler looks at the machine plans
// when a node enters a state whose hook it acknowledges, or the phase
// changes; not on the plan's other writes.
func TestNodeReachedAck(t *testing.T) {
	plan := func(phase v1beta1.UpgradePlanPhase, states map[string]v1beta1.NodeUpgradeState, msg string) *v1beta1.UpgradePlan {
		p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
		p.Status.CurrentPhase = phase
		p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
		for n, s := range states {
			p.Status.NodeUpgradeStatuses[n] = v1beta1.NodeUpgradeStatus{State: s, Message: msg}
		}
		return p
	}
	nodes := v1beta1.PhaseNodeUpgrading
	was := map[string]v1beta1.NodeUpgradeState{"n1": v1beta1.NodeStatePreDraining, "n2": v1beta1.NodeStateImagePreloaded}
	for name, tc := range map[string]struct {
		old, new *v1beta1.UpgradePlan
		want     bool
	}{
		"a message":           {plan(nodes, was, ""), plan(nodes, was, "evacuating"), false},
		"a node pre-draining": {plan(nodes, was, ""), plan(nodes, map[string]v1beta1.NodeUpgradeState{"n1": v1beta1.NodeStatePreDraining, "n2": v1beta1.NodeStatePreDraining}, ""), false},
		"a node pre-drained":  {plan(nodes, was, ""), plan(nodes, map[string]v1beta1.NodeUpgradeState{"n1": v1beta1.NodeStatePreDrained, "n2": v1beta1.NodeStateImagePreloaded}, ""), true},
		"a node post-drained": {plan(nodes, was, ""), plan(nodes, map[string]v1beta1.NodeUpgradeState{"n1": v1beta1.NodeStatePostDrained, "n2": v1beta1.NodeStateImagePreloaded}, ""), true},
		"the phase":           {plan(v1beta1.PhaseImagePreloaded, was, ""), plan(nodes, was, ""), true},
	} {
		if got := nodeReachedAck(update(tc.old, tc.new)); got != tc.want {
			t.Errorf("%s: nodeReachedAck = %v, want %v", name, got, tc.want)
		}
	}
}

// TestPodGoneMatters: a pod that leaves the cache because the capture let it
// go (the API server tells it with the pod as it was: held, not deleting)
// wakes no plan; a pod deleted, held or not, does: the cleanup waits for it.
func TestPodGoneMatters(t *testing.T) {
	held := []string{v1beta1.FinalizerLogCapture}
	deleting := ptr.To(metav1.Now())
	for name, tc := range map[string]struct {
		finalizers []string
		deleted    *metav1.Time
		want       bool
	}{
		"let go by the capture":          {held, nil, false},
		"deleted, never held":            {nil, deleting, true},
		"let go while being deleted":     {held, deleting, true},
		"left the selection, never held": {nil, nil, true},
		"held by another finalizer only": {[]string{"other"}, nil, true},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Finalizers: tc.finalizers, DeletionTimestamp: tc.deleted}}
		if got := podGoneMatters(event.DeleteEvent{Object: pod}); got != tc.want {
			t.Errorf("%s: matters %v, want %v", name, got, tc.want)
		}
	}
}

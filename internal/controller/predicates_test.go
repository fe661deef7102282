package controller

import (
	"context"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/phase"
)

func update(o, n client.Object) event.UpdateEvent {
	return event.UpdateEvent{ObjectOld: o, ObjectNew: n}
}

// TestJobChangeMatters: the plan wakes for a Job's outcome, not for the Job
// controller's bookkeeping.
func TestJobChangeMatters(t *testing.T) {
	base := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Labels: map[string]string{"a": "b"}},
		Status: batchv1.JobStatus{Active: 1, Ready: ptr.To[int32](0), StartTime: &metav1.Time{}}}
	for name, tc := range map[string]struct {
		change func(*batchv1.Job)
		want   bool
	}{
		"resource version only": {func(j *batchv1.Job) { j.ResourceVersion = "2" }, false},
		"a finalizer":           {func(j *batchv1.Job) { j.Finalizers = []string{"x"} }, false},
		"pods not yet counted": {func(j *batchv1.Job) {
			j.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"u"}}
		}, false},
		"terminating":  {func(j *batchv1.Job) { j.Status.Terminating = ptr.To[int32](1) }, false},
		"ready":        {func(j *batchv1.Job) { j.Status.Ready = ptr.To[int32](1) }, true},
		"succeeded":    {func(j *batchv1.Job) { j.Status.Succeeded = 1 }, true},
		"failed":       {func(j *batchv1.Job) { j.Status.Failed = 1 }, true},
		"completed at": {func(j *batchv1.Job) { j.Status.CompletionTime = &metav1.Time{} }, true},
		"a condition": {func(j *batchv1.Job) {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}, true},
		"resumed":       {func(j *batchv1.Job) { j.Spec.Suspend = ptr.To(false) }, true},
		"being deleted": {func(j *batchv1.Job) { j.DeletionTimestamp = ptr.To(metav1.Now()) }, true},
		"a label":       {func(j *batchv1.Job) { j.Labels = map[string]string{"a": "c"} }, true},
	} {
		n := base.DeepCopy()
		tc.change(n)
		if got := jobChangeMatters(update(base, n)); got != tc.want {
			t.Errorf("%s: matters %v, want %v", name, got, tc.want)
		}
	}
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

// TestChangingMarksEveryEvent: every event of a kind marks it changed, the
// ones the predicates drop included, and only the kept ones ask for a pass.
func TestChangingMarksEveryEvent(t *testing.T) {
	reuse := phase.NewReuse()
	h := changing(reuse, phase.KindMachinePlans, handler.EnqueueRequestsFromMapFunc(planOfLabel), predicate.Funcs{UpdateFunc: drainStateChanged})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Labels: map[string]string{v1beta1.LabelUpgradePlan: "p"}}}
	acked := old.DeepCopy()
	acked.Annotations = map[string]string{v1beta1.AnnotationPreHook: "1"}
	h.Update(context.Background(), update(old, acked), q)
	if got := reuse.Changes(phase.KindMachinePlans); got != 1 || q.Len() != 0 {
		t.Errorf("an acknowledgement: %d changes marked and %d passes asked for, want 1 and 0", got, q.Len())
	}
	requested := acked.DeepCopy()
	requested.Annotations[cluster.AnnotationRancherPreDrain] = "1"
	h.Update(context.Background(), update(acked, requested), q)
	if got := reuse.Changes(phase.KindMachinePlans); got != 2 || q.Len() != 1 {
		t.Errorf("a drain request: %d changes marked and %d passes asked for, want 2 and 1", got, q.Len())
	}
	if reuse.Changes(phase.KindNodes) != 0 {
		t.Error("a Secret's change marked the nodes changed")
	}
}

// TestNodeHeartbeatsChangeNothing: a node's heartbeat or cordon neither asks
// for a pass nor makes the next pass list the nodes again; a reboot does
// both.
func TestNodeHeartbeatsChangeNothing(t *testing.T) {
	reuse := phase.NewReuse()
	h := changingWhenKept(reuse, phase.KindNodes, handler.EnqueueRequestsFromMapFunc(planOfLabel), predicate.Funcs{UpdateFunc: nodeChangeMatters})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{v1beta1.LabelUpgradePlan: "p"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}, NodeInfo: corev1.NodeSystemInfo{BootID: "1"}}}
	beat := old.DeepCopy()
	beat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	beat.Spec.Unschedulable = true
	h.Update(context.Background(), update(old, beat), q)
	if got := reuse.Changes(phase.KindNodes); got != 0 || q.Len() != 0 {
		t.Errorf("a heartbeat and a cordon: %d changes marked and %d passes asked for, want 0 and 0", got, q.Len())
	}
	rebooted := beat.DeepCopy()
	rebooted.Status.NodeInfo.BootID = "2"
	h.Update(context.Background(), update(beat, rebooted), q)
	if got := reuse.Changes(phase.KindNodes); got != 1 || q.Len() != 1 {
		t.Errorf("a reboot: %d changes marked and %d passes asked for, want 1 and 1", got, q.Len())
	}
	h.Delete(context.Background(), event.DeleteEvent{Object: rebooted}, q)
	if got := reuse.Changes(phase.KindNodes); got != 2 {
		t.Errorf("a deleted node: %d changes marked, want 2", got)
	}
}

// TestJobBookkeepingChangesNothing: the Job controller's bookkeeping
// neither asks for a pass nor makes the next pass list the node Jobs again;
// a Job's success does both.
func TestJobBookkeepingChangesNothing(t *testing.T) {
	reuse := phase.NewReuse()
	h := changingWhenKept(reuse, phase.KindJobs, handler.EnqueueRequestsFromMapFunc(planOfLabel), predicate.Funcs{UpdateFunc: jobChangeMatters})
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	old := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j", Labels: map[string]string{v1beta1.LabelUpgradePlan: "p"}},
		Status: batchv1.JobStatus{Active: 1}}
	counted := old.DeepCopy()
	counted.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"pod"}}
	counted.Finalizers = []string{"batch.kubernetes.io/job-tracking"}
	h.Update(context.Background(), update(old, counted), q)
	if got := reuse.Changes(phase.KindJobs); got != 0 || q.Len() != 0 {
		t.Errorf("bookkeeping: %d changes marked and %d passes asked for, want 0 and 0", got, q.Len())
	}
	done := counted.DeepCopy()
	done.Status.Active, done.Status.Succeeded = 0, 1
	done.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	h.Update(context.Background(), update(counted, done), q)
	if got := reuse.Changes(phase.KindJobs); got != 1 || q.Len() != 1 {
		t.Errorf("a success: %d changes marked and %d passes asked for, want 1 and 1", got, q.Len())
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

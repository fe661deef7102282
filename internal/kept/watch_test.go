package kept_test

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
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/kept"
)

func update(o, n client.Object) event.UpdateEvent {
	return event.UpdateEvent{ObjectOld: o, ObjectNew: n}
}

// byName asks for a pass of the object's own name.
var byName = handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
})

func newQueue(t *testing.T) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	return q
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
		if got := kept.JobUpdates.Update(update(base, n)); got != tc.want {
			t.Errorf("%s: matters %v, want %v", name, got, tc.want)
		}
	}
}

// TestNodeHeartbeatsChangeNothing: a node's heartbeat or cordon neither asks
// for a pass nor makes the next pass list the nodes again; a reboot does
// both.
func TestNodeHeartbeatsChangeNothing(t *testing.T) {
	lists := kept.New()
	h := lists.MarkingKept(kept.KindNodes, byName, kept.NodeUpdates)
	q := newQueue(t)
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}, NodeInfo: corev1.NodeSystemInfo{BootID: "1"}}}
	beat := old.DeepCopy()
	beat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	beat.Spec.Unschedulable = true
	h.Update(context.Background(), update(old, beat), q)
	if got := lists.Changes(kept.KindNodes); got != 0 || q.Len() != 0 {
		t.Errorf("a heartbeat and a cordon: %d changes marked and %d passes asked for, want 0 and 0", got, q.Len())
	}
	rebooted := beat.DeepCopy()
	rebooted.Status.NodeInfo.BootID = "2"
	h.Update(context.Background(), update(beat, rebooted), q)
	if got := lists.Changes(kept.KindNodes); got != 1 || q.Len() != 1 {
		t.Errorf("a reboot: %d changes marked and %d passes asked for, want 1 and 1", got, q.Len())
	}
	h.Delete(context.Background(), event.DeleteEvent{Object: rebooted}, q)
	if got := lists.Changes(kept.KindNodes); got != 2 {
		t.Errorf("a deleted node: %d changes marked, want 2", got)
	}
}

// TestJobBookkeepingChangesNothing: the Job controller's bookkeeping
// neither asks for a pass nor makes the next pass list the node Jobs again;
// a Job's success does both.
func TestJobBookkeepingChangesNothing(t *testing.T) {
	lists := kept.New()
	h := lists.MarkingKept(kept.KindJobs, byName, kept.JobUpdates)
	q := newQueue(t)
	old := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j"},
		Status: batchv1.JobStatus{Active: 1}}
	counted := old.DeepCopy()
	counted.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"pod"}}
	counted.Finalizers = []string{"batch.kubernetes.io/job-tracking"}
	h.Update(context.Background(), update(old, counted), q)
	if got := lists.Changes(kept.KindJobs); got != 0 || q.Len() != 0 {
		t.Errorf("bookkeeping: %d changes marked and %d passes asked for, want 0 and 0", got, q.Len())
	}
	done := counted.DeepCopy()
	done.Status.Active, done.Status.Succeeded = 0, 1
	done.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	h.Update(context.Background(), update(counted, done), q)
	if got := lists.Changes(kept.KindJobs); got != 1 || q.Len() != 1 {
		t.Errorf("a success: %d changes marked and %d passes asked for, want 1 and 1", got, q.Len())
	}
}

package testenv_test

import (
	"context"
	"os"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Isolated(m.Run)) }

// TestWorld runs a Job through the real Job controller and scheduler on a
// kwok node: the pod is placed, runs, and its exit code becomes the Job's
// outcome; a pod that fits no node stays Pending with the scheduler's reason.
func TestWorld(t *testing.T) {
	env, err := testenv.StartWith(testenv.Options{Controllers: true, Kwok: &testenv.KwokOptions{ManageNodes: "world-test=true"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := env.Client

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"world-test": "true", "kubernetes.io/hostname": "n1"}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "node n1 Ready with a Lease", func() bool {
		n := &corev1.Node{}
		lease := &coordinationv1.Lease{}
		return c.Get(ctx, client.ObjectKey{Name: "n1"}, n) == nil && ready(n) &&
			c.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: "n1"}, lease) == nil
	})

	job := func(name string, selector map[string]string) *batchv1.Job {
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, NodeSelector: selector,
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
			}}},
		}
	}
	ok := job("ok", map[string]string{"kubernetes.io/hostname": "n1"})
	if err := c.Create(ctx, ok); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	eventually(t, ctx, "the Job's pod runs on n1", func() bool {
		var pods corev1.PodList
		if c.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{batchv1.JobNameLabel: "ok"}) != nil || len(pods.Items) != 1 {
			return false
		}
		pod = pods.Items[0]
		return pod.Spec.NodeName == "n1" && pod.Status.Phase == corev1.PodRunning
	})
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Annotations = map[string]string{testenv.AnnotationExitCode: "0"}
	if err := c.Patch(ctx, &pod, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the Job completes", func() bool {
		j := &batchv1.Job{}
		return c.Get(ctx, client.ObjectKeyFromObject(ok), j) == nil && condition(j, batchv1.JobComplete)
	})

	// The node-lifecycle controller marks the pods of an unreachable node
	// not ready; once kwok runs the node again the pod is ready again, as a
	// kubelet reports it.
	server := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "server"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main", Image: "nginx"}}}}
	if err := c.Create(ctx, server); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the pod runs ready", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(server), server) == nil && podReady(server) == corev1.ConditionTrue
	})
	for i := range server.Status.Conditions {
		if server.Status.Conditions[i].Type == corev1.PodReady {
			server.Status.Conditions[i].Status, server.Status.Conditions[i].Reason = corev1.ConditionFalse, "NodeNotReady"
		}
	}
	if err := c.Status().Update(ctx, server); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the pod marked not ready is ready again", func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(server), server) == nil && podReady(server) == corev1.ConditionTrue
	})

	stuck := job("stuck", map[string]string{"kubernetes.io/hostname": "nowhere"})
	if err := c.Create(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the scheduler reports the pod unschedulable", func() bool {
		var pods corev1.PodList
		if c.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{batchv1.JobNameLabel: "stuck"}) != nil || len(pods.Items) != 1 {
			return false
		}
		for _, cond := range pods.Items[0].Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable {
				t.Logf("scheduler: %s", cond.Message)
				return true
			}
		}
		return false
	})
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

func condition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func eventually(t *testing.T, ctx context.Context, what string, f func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return f(), nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

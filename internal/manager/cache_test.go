package manager

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/planstatus"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
	"github.com/harvester/upgrade-toolkit/internal/upgradelog"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, &env)) }

// TestCacheLeavesOutPodsTheCaptureLetGo, on a real API server: the
// manager's cache holds an upgrade's pod while the log capture holds it, and
// drops it once the capture lets it go, which the pod itself still shows
// (marked done, without the finalizer).
func TestCacheLeavesOutPodsTheCaptureLetGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plans, err := planstatus.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(env.Config, cacheOptions(true, plans))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "upgrade-job-pod",
			Labels:     map[string]string{v1beta1.LabelUpgradePlan: "plan", "batch.kubernetes.io/job-name": "upgrade-job"},
			Finalizers: []string{v1beta1.FinalizerLogCapture}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "toolkit"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	cached := func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(cluster.HarvesterNamespace)); err != nil {
			return false, err
		}
		return slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.Name == pod.Name }), nil
	}
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, cached); err != nil {
		t.Fatalf("the cache never held the held pod: %v", err)
	}

	if err := upgradelog.Release(ctx, env.Client, pod.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		in, err := cached(ctx)
		return !in, err
	}); err != nil {
		t.Fatalf("the cache still holds the pod the capture let go: %v", err)
	}
	got := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatalf("the pod let go is no longer there: %v", err)
	}
	if got.Labels[v1beta1.LabelLogCaptureDone] != "true" || slices.Contains(got.Finalizers, v1beta1.FinalizerLogCapture) ||
		got.Labels[v1beta1.LabelUpgradePlan] != "plan" {
		t.Errorf("the pod let go has labels %v and finalizers %v, want it marked done, still the plan's, and not held", got.Labels, got.Finalizers)
	}
}

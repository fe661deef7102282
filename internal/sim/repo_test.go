package sim

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// repoObjects creates a repo Deployment and Service the way the toolkit
// does, without the ISO volume.
func repoObjects(t *testing.T, plan string) (*appsv1.Deployment, *corev1.Service) {
	t.Helper()
	labels := map[string]string{v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: v1beta1.ComponentRepo}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: plan + "-repo", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "repo", Image: "rancher/harvester-upgrade-toolkit:v1.7.1",
					Command: []string{"upgrade-toolkit", "repo", "serve", "--listen", ":8080"},
				}}},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: plan + "-repo", Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	for _, o := range []client.Object{d, svc} {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	return d, svc
}

// TestRepoServesOnceItsServiceHasEndpoints: the simulated repo answers 503
// until the real Deployment, ReplicaSet and EndpointSlice controllers, the
// scheduler and kwok made the repo Service's endpoints ready.
func TestRepoServesOnceItsServiceHasEndpoints(t *testing.T) {
	s := start(t, Config{Nodes: 2})
	url := s.RepoURL(cluster.HarvesterNamespace, "up1-repo") + "harvester-release.yaml"
	get := func() int {
		resp, err := http.Get(url) //nolint:gosec,noctx // the simulator's loopback server
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("before the repo exists: %d, want 503", code)
	}
	d, _ := repoObjects(t, "up1")
	eventually(t, 30*time.Second, "the repo to serve", func() (bool, string) {
		got := &appsv1.Deployment{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(d), got); err != nil {
			return false, err.Error()
		}
		code := get()
		return code == http.StatusOK, fmt.Sprintf("%s, %d replicas available", http.StatusText(code), got.Status.AvailableReplicas)
	})
}

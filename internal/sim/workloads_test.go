package sim

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// repoObjects creates the repo Deployment and Service as the RepoCreate phase
// does.
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
					Name: "repo", Image: "rancher/harvester-upgrade-toolkit:v1.8.0",
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

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec,noctx // a test URL on loopback
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestRepoDeploymentEndpointsAndContent(t *testing.T) {
	s := start(t, Config{Nodes: 1, Timing: Timing{DeploymentReady: 500 * time.Millisecond}})
	d, svc := repoObjects(t, "up1")
	base := s.RepoURL(svc.Namespace, svc.Name)

	// Before the Deployment is available the repo does not answer.
	if code, _ := httpGet(t, base+release.ReleaseFile); code != http.StatusServiceUnavailable {
		t.Errorf("repo answered %d before its Deployment was available, want 503", code)
	}
	got := &appsv1.Deployment{}
	eventually(t, 10*time.Second, "the Deployment to progress", func() (bool, string) {
		get(t, client.ObjectKeyFromObject(d), got)
		return got.Status.ObservedGeneration == got.Generation && got.Status.UnavailableReplicas == 2, ""
	})
	eventually(t, 10*time.Second, "the Deployment to be available", func() (bool, string) {
		get(t, client.ObjectKeyFromObject(d), got)
		return got.Status.AvailableReplicas == 2, ""
	})
	if got.Status.ReadyReplicas != 2 || got.Status.UpdatedReplicas != 2 || got.Status.Conditions[0].Type != appsv1.DeploymentAvailable || got.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Errorf("deployment status %+v", got.Status)
	}
	var slices discoveryv1.EndpointSliceList
	eventually(t, 10*time.Second, "ready endpoints", func() (bool, string) {
		if err := env.Client.List(context.Background(), &slices, client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil || len(slices.Items) != 1 {
			return false, ""
		}
		return len(slices.Items[0].Endpoints) == 2 && *slices.Items[0].Endpoints[0].Conditions.Ready, ""
	})
	if p := slices.Items[0].Ports; len(p) != 1 || *p[0].Port != 8080 {
		t.Errorf("endpoint ports %+v, want the target port 8080", p)
	}

	// The toolkit's repo client reads the simulated repo.
	rc, err := release.NewClient(base)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := rc.Release(context.Background())
	if err != nil {
		t.Fatalf("reading the release through the repo client: %v", err)
	}
	if rm.Harvester != "v1.8.0" || rm.OS != "Harvester v1.8.0" || rm.Kubernetes != "v1.35.2+rke2r1" || rm.MinUpgradableVersion != "v1.7.0" {
		t.Errorf("release metadata %+v", rm)
	}
	for _, path := range []string{release.BundleMetadataFile, release.RootfsFile, release.ImageListPath("v1.7.1"), release.ImageListPath(release.CurrentImageList)} {
		if code, _ := httpGet(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s: %d", path, code)
		}
	}
	_, list := httpGet(t, base+release.ImageListPath("v1.7.1"))
	if !strings.Contains(list, "rancher/harvester:v1.7.1") {
		t.Errorf("previous image list: %s", list)
	}
	if code, _ := httpGet(t, s.RepoURL(svc.Namespace, "other-repo")+release.ReleaseFile); code != http.StatusServiceUnavailable {
		t.Errorf("a repo without a Service answered %d, want 503", code)
	}

	// Deleting the Service deletes its slices, as the garbage collector would.
	if err := env.Client.Delete(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the slices to go", func() (bool, string) {
		err := env.Client.List(context.Background(), &slices, client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name})
		return err == nil && len(slices.Items) == 0, ""
	})
}

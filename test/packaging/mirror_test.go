package packaging_test

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// TestChartImageMirror: with imageMirror, the chart pulls the manager's own
// image from the mirror under the path the manager gives the workloads'
// images (images.Mirror.Rewrite), and passes the mirror to the manager.
func TestChartImageMirror(t *testing.T) {
	const registry = "registry.example.test:5000/harvester"
	mirror, err := images.ParseMirror(registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, repository := range []string{
		"rancher/harvester-upgrade-toolkit", "docker.io/rancher/harvester-upgrade-toolkit", "upgrade-toolkit",
		"registry.example.com/harvester-upgrade-toolkit", "localhost:5000/team/upgrade-toolkit",
	} {
		c := managerContainer(t, "image.repository="+repository, "image.tag="+imageTag, "imageMirror="+registry)
		want := mirror.Rewrite(repository + ":" + imageTag)
		if c["image"] != want {
			t.Errorf("repository %s: the manager runs %v, want %s (as the manager rewrites it)", repository, c["image"], want)
		}
		args := fmt.Sprint(c["args"])
		if !slices.ContainsFunc(c["args"].([]any), func(a any) bool { return a == "--image-mirror="+registry }) {
			t.Errorf("the manager's args %s do not pass --image-mirror=%s", args, registry)
		}
	}
}

// TestChartAlertmanager: risks.alertmanagerURL reaches the manager as
// --alertmanager-url; a value that is no http(s) address is refused by the
// chart's schema.
func TestChartAlertmanager(t *testing.T) {
	const url = "http://rancher-monitoring-alertmanager.cattle-monitoring-system:9093"
	if args := managerContainer(t, "risks.alertmanagerURL="+url)["args"].([]any); !slices.Contains(args, any("--alertmanager-url="+url)) {
		t.Errorf("the manager's args %v do not pass --alertmanager-url=%s", args, url)
	}
	if _, err := run(t, tool(t, "HELM"), "template", release, chartDir, "--set", "risks.alertmanagerURL=alertmanager:9093"); err == nil {
		t.Error("an Alertmanager address without a scheme was rendered; the schema should refuse it")
	}
}

// managerContainer renders the chart with the given --set values and returns
// the manager Deployment's container.
func managerContainer(t *testing.T, sets ...string) map[string]any {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", cluster.HarvesterNamespace, "--kube-version", testenv.K8sVersion}
	for _, v := range sets {
		args = append(args, "--set", v)
	}
	out, err := run(t, tool(t, "HELM"), args...)
	if err != nil {
		t.Fatal(err)
	}
	dep := find(decode(t, out), "Deployment", cluster.HarvesterNamespace, "upgrade-toolkit-manager")
	if dep == nil {
		t.Fatal("no manager Deployment rendered")
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	return containers[0].(map[string]any)
}

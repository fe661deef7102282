package packaging_test

import (
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// TestChartUpgradeLog: by default the manager captures the upgrade's logs
// and is bound to the upgrade-log role; with upgradeLog.enabled false it
// runs with --upgrade-log=false and gets no such role.
func TestChartUpgradeLog(t *testing.T) {
	for _, tc := range []struct {
		values string
		on     bool
	}{
		{"", true},
		{filepath.Join(testenv.RepoRoot(), "test/packaging/testdata/values-mirror-without-webhook.yaml"), false},
	} {
		out, err := helmTemplate(t, cluster.HarvesterNamespace, tc.values)
		if err != nil {
			t.Fatal(err)
		}
		objs := decode(t, out)
		roles := 0
		for _, u := range objs {
			if u.GetName() == "upgrade-toolkit-upgrade-log" {
				roles++
			}
		}
		if on := roles > 0; on != tc.on || (tc.on && roles != 6) {
			t.Errorf("values %q: %d upgrade-log roles and bindings, want them: %v (a ClusterRole and two Roles, each bound)", tc.values, roles, tc.on)
		}
		d := find(objs, "Deployment", cluster.HarvesterNamespace, "upgrade-toolkit-manager")
		if d == nil {
			t.Fatal("no manager Deployment")
		}
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		if off := slices.Contains(args, "--upgrade-log=false"); off == tc.on {
			t.Errorf("values %q: manager args %v, want --upgrade-log=false: %v", tc.values, args, !tc.on)
		}
	}
}

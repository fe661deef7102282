package phase

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
)

// TestClusterUpgradeChecksReadTheAPIServer: the checks that fail the plan
// at once judge what the API server holds, not a cache that has not caught
// up with the Job's changes yet (chaos seed 51: a watch broken a moment
// before left the monitoring Addon at its old version in the cache, and
// the plan failed although the Job had upgraded it).
func TestClusterUpgradeChecksReadTheAPIServer(t *testing.T) {
	rm := &v1beta1.ReleaseMetadata{Harvester: "v1.8.0", HarvesterChart: "1.8.0", Rancher: "v2.14.0", MonitoringChart: "108.0.2"}
	addon := func(version string) *harvesterv1beta1.Addon {
		return &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon},
			Spec: harvesterv1beta1.AddonSpec{Version: version}}
	}
	chart := func(version string) *managementv3.ManagedChart {
		return &managementv3.ManagedChart{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart},
			Spec: managementv3.ManagedChartSpec{Version: version}}
	}
	scheme := cluster.Scheme()
	world := func(objs ...client.Object) client.Client {
		return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	}
	stale := world(addon("107.0.0"), chart("1.7.1"))
	fresh := world(addon(rm.MonitoringChart), chart(rm.HarvesterChart))
	s := &Scope{Plan: &v1beta1.UpgradePlan{Status: v1beta1.UpgradePlanStatus{ReleaseMetadata: rm}}, Client: stale, APIReader: fresh}
	checks, err := clusterUpgradeChecks(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if c.Result == v1beta1.CheckFailed {
			t.Errorf("check %s failed on what the cache showed: %s", c.Reason, c.Message)
		}
	}
	// And what the API server holds is judged: an Addon left behind fails.
	s.APIReader = world(addon("107.0.0"), chart(rm.HarvesterChart))
	checks, err = clusterUpgradeChecks(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	failed := false
	for _, c := range checks {
		failed = failed || (c.Reason == checkAddons && c.Result == v1beta1.CheckFailed)
	}
	if !failed {
		t.Errorf("an Addon the API server shows at its old version did not fail: %+v", checks)
	}
}

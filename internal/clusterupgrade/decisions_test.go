package clusterupgrade_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
)

// The pure decisions of the cluster upgrade, table by table.

func jsonEqual(t *testing.T, got, want any) {
	t.Helper()
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("got %s, want %s", gb, wb)
	}
}

func TestLonghornDefaults(t *testing.T) {
	for _, tc := range []struct {
		name          string
		values        map[string]any
		drain, detach string
		want          map[string]any
	}{
		{"Longhorn's defaults", nil, cluster.LonghornNodeDrainPolicyDefault, "false",
			map[string]any{"nodeDrainPolicy": cluster.LonghornNodeDrainPolicyHarvester, "detachManuallyAttachedVolumesWhenCordoned": true}},
		{"the operator chose", nil, "always-allow", "true", map[string]any{}},
		{"the chart sets them", map[string]any{"longhorn": map[string]any{"defaultSettings": map[string]any{
			"nodeDrainPolicy": "block-for-eviction", "detachManuallyAttachedVolumesWhenCordoned": false}}},
			cluster.LonghornNodeDrainPolicyDefault, "false", map[string]any{}},
		{"no Longhorn settings", nil, "", "", map[string]any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jsonEqual(t, clusterupgrade.LonghornDefaults(tc.values, tc.drain, tc.detach), tc.want)
		})
	}
}

func TestHarvesterValues(t *testing.T) {
	limit := map[string]any{"longhorn": map[string]any{"defaultSettings": map[string]any{"concurrentAutomaticEngineUpgradePerNodeLimit": 3, "nodeDrainPolicy": "always-allow"}}}
	jsonEqual(t, clusterupgrade.HarvesterValues(limit, true, "always-allow", "true"), map[string]any{
		"longhorn":     map[string]any{"defaultSettings": map[string]any{"concurrentAutomaticEngineUpgradePerNodeLimit": "3"}},
		"storageClass": map[string]any{"defaultStorageClass": false},
	})
	asString := map[string]any{"longhorn": map[string]any{"defaultSettings": map[string]any{"concurrentAutomaticEngineUpgradePerNodeLimit": "3"}}}
	jsonEqual(t, clusterupgrade.HarvesterValues(asString, false, "always-allow", "true"), map[string]any{})
}

func TestNextTimeout(t *testing.T) {
	for current, want := range map[int]int{0: 599, 600: 601, 799: 800, 800: 600, 900: 600} {
		if got := clusterupgrade.NextTimeout(current); got != want || got == current {
			t.Errorf("NextTimeout(%d) = %d, want %d (and never the same)", current, got, want)
		}
	}
}

func TestChartDeployed(t *testing.T) {
	mc := func(version string, paused bool, observed int64, ready, desired, unavailable int) *managementv3.ManagedChart {
		m := &managementv3.ManagedChart{Spec: managementv3.ManagedChartSpec{Version: version, Paused: paused}}
		m.Status = fleetv1alpha1.BundleStatus{ObservedGeneration: observed, Unavailable: unavailable,
			Summary: fleetv1alpha1.BundleSummary{Ready: ready, DesiredReady: desired}}
		return m
	}
	bundle := func(version string, gen, observed int64) *fleetv1alpha1.Bundle {
		return &fleetv1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Name: "mcc-harvester", Generation: gen},
			Spec: fleetv1alpha1.BundleSpec{Helm: &fleetv1alpha1.HelmOptions{Version: version}}, Status: fleetv1alpha1.BundleStatus{ObservedGeneration: observed}}
	}
	for _, tc := range []struct {
		name   string
		mc     *managementv3.ManagedChart
		bundle *fleetv1alpha1.Bundle
		want   bool
		says   string
	}{
		{"deployed", mc("1.8.0", false, 7, 1, 1, 0), bundle("1.8.0", 7, 7), true, "7 (before the change: 5)"},
		{"the old status still says ready", mc("1.8.0", false, 5, 1, 1, 0), bundle("1.8.0", 7, 5), false, "not processed generation 7"},
		{"Fleet processed it, not deployed yet", mc("1.8.0", false, 7, 0, 1, 0), bundle("1.8.0", 7, 7), false, "0 of 1 ready"},
		{"unavailable", mc("1.8.0", false, 7, 1, 1, 1), bundle("1.8.0", 7, 7), false, "1 unavailable"},
		{"Rancher has not passed it on", mc("1.8.0", false, 7, 1, 1, 0), bundle("1.7.1", 6, 6), false, "has not passed the change on"},
		{"paused", mc("1.8.0", true, 7, 1, 1, 0), bundle("1.8.0", 7, 7), false, "paused"},
		{"another version", mc("1.7.1", false, 7, 1, 1, 0), nil, false, "version 1.7.1"},
		{"no Bundle to look at", mc("1.8.0", false, 6, 1, 1, 0), nil, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, says := clusterupgrade.ChartDeployed(tc.mc, tc.bundle, "1.8.0", 5)
			if got != tc.want || !strings.Contains(says, tc.says) {
				t.Errorf("ChartDeployed = %v, %q; want %v, saying %q", got, says, tc.want, tc.says)
			}
		})
	}
}

func TestAddonRedeployed(t *testing.T) {
	since := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return since.Add(d).Format(time.RFC3339) }
	addon := func(status string, conds ...common.Condition) *harvesterv1beta1.Addon {
		return &harvesterv1beta1.Addon{Status: harvesterv1beta1.AddonStatus{Status: status, Conditions: conds}}
	}
	for _, tc := range []struct {
		name         string
		a            *harvesterv1beta1.Addon
		done, failed bool
	}{
		{"the old status, not reacted yet", addon(cluster.AddonStateDeployed, common.Condition{Type: "Completed", Status: "True", LastUpdateTime: at(-time.Hour)}), false, false},
		{"in progress, status still deployed", addon(cluster.AddonStateDeployed, common.Condition{Type: "InProgress", Status: "True", LastUpdateTime: at(time.Second)},
			common.Condition{Type: "Completed", Status: "False"}), false, false},
		{"updating", addon(cluster.AddonStateUpdating, common.Condition{Type: "InProgress", Status: "True", LastUpdateTime: at(time.Second)}), false, false},
		{"redeployed", addon(cluster.AddonStateDeployed, common.Condition{Type: "InProgress", Status: "False"},
			common.Condition{Type: "Completed", Status: "True", LastUpdateTime: at(2 * time.Second)}), true, false},
		{"redeployed within the second of the change", addon(cluster.AddonStateDeployed, common.Condition{Type: "Completed", Status: "True", LastUpdateTime: at(0)}), true, false},
		{"failed", addon(cluster.AddonStateUpdating, common.Condition{Type: "OperationFailed", Status: "True", LastUpdateTime: at(time.Second), Message: "job failed"}), false, true},
		{"an old failure", addon(cluster.AddonStateUpdating, common.Condition{Type: "OperationFailed", Status: "True", LastUpdateTime: at(-time.Hour)}), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done, failed, status := clusterupgrade.AddonRedeployed(tc.a, since)
			if done != tc.done || failed != tc.failed {
				t.Errorf("AddonRedeployed = %v, %v (%s); want %v, %v", done, failed, status, tc.done, tc.failed)
			}
		})
	}
}

func TestMonitoringValues(t *testing.T) {
	got, err := clusterupgrade.MonitoringValues("grafana:\n  persistence:\n    size: 2Gi\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"size: 2Gi", "rancherMonitoring:\n  enabled: false", "metricLabelsAllowlist:\n  - nodes=[*]"} {
		if !strings.Contains(got, want) {
			t.Errorf("values %q lack %q", got, want)
		}
	}
	set := "kube-state-metrics:\n  metricLabelsAllowlist: ['pods=[*]']\nrancherMonitoring:\n  enabled: true\n"
	if got, _ := clusterupgrade.MonitoringValues(set); got != set {
		t.Errorf("values that have both keys changed: %q", got)
	}
	if _, err := clusterupgrade.MonitoringValues("a: [b"); err == nil {
		t.Error("unreadable values accepted")
	}
}

func TestLoggingValues(t *testing.T) {
	with := "eventTailer:\n  workloadOverrides:\n    containers:\n    - image: rancher/harvester-eventrouter:v1.7.1\n"
	if got, _ := clusterupgrade.LoggingValues(with, "rancher/harvester-eventrouter:v1.8.0"); !strings.Contains(got, "image: rancher/harvester-eventrouter:v1.8.0") {
		t.Errorf("eventrouter not moved: %q", got)
	}
	without := "fluentbit:\n  enabled: true\n"
	if got, _ := clusterupgrade.LoggingValues(without, "x"); got != without {
		t.Errorf("values without an eventrouter changed: %q", got)
	}
}

func TestKeepDriverLocation(t *testing.T) {
	manifest := "driverLocation: HTTPENDPOINT/NVIDIA-Linux-x86_64-vgpu-kvm.run\n"
	if got := clusterupgrade.KeepDriverLocation(manifest, "driverLocation: http://10.0.0.5/d.run\n"); got != "driverLocation: http://10.0.0.5/d.run\n" {
		t.Errorf("got %q", got)
	}
	if got := clusterupgrade.KeepDriverLocation(manifest, ""); got != manifest {
		t.Errorf("no location to keep: %q", got)
	}
}

func TestDefaultIngressClass(t *testing.T) {
	class := func(name string, age time.Duration, def bool) networkingv1.IngressClass {
		c := networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))}}
		if def {
			c.Annotations = map[string]string{cluster.AnnotationDefaultIngressClass: "false"}
		}
		return c
	}
	for _, tc := range []struct {
		classes []networkingv1.IngressClass
		want    string
	}{
		{nil, "nginx"},
		{[]networkingv1.IngressClass{class("traefik", time.Hour, false)}, "nginx"},
		{[]networkingv1.IngressClass{class("new", time.Minute, true), class("old", time.Hour, true), class("oldest", 2*time.Hour, false)}, "old"},
	} {
		if got := clusterupgrade.DefaultIngressClass(tc.classes); got != tc.want {
			t.Errorf("DefaultIngressClass = %s, want %s", got, tc.want)
		}
	}
}

func TestCAPIClusterSettled(t *testing.T) {
	c := &capiv1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: capiv1beta1.ClusterStatus{Phase: "Provisioned", ObservedGeneration: 3}}
	if ok, _ := clusterupgrade.CAPIClusterSettled(c); !ok {
		t.Error("a provisioned, reconciled cluster is not settled")
	}
	c.Generation = 4
	if ok, says := clusterupgrade.CAPIClusterSettled(c); ok || !strings.Contains(says, "generation 4, observed 3") {
		t.Errorf("a cluster whose generation is not reconciled: %v %q", ok, says)
	}
	c.Status = capiv1beta1.ClusterStatus{Phase: "Provisioning", ObservedGeneration: 4}
	if ok, _ := clusterupgrade.CAPIClusterSettled(c); ok {
		t.Error("a provisioning cluster is settled")
	}
}

func TestRancherReplicas(t *testing.T) {
	node := func(witness bool) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
		if witness {
			n.Labels[cluster.LabelWitnessNode] = "true"
		}
		return n
	}
	if got := clusterupgrade.RancherReplicas([]corev1.Node{node(false), node(false), node(true)}); ptr.Deref(got, 0) != -2 {
		t.Errorf("three nodes with a witness: %v", got)
	}
	for _, nodes := range [][]corev1.Node{{node(false), node(false), node(false)}, {node(false), node(false), node(false), node(true)}, {node(false)}} {
		if got := clusterupgrade.RancherReplicas(nodes); got != nil {
			t.Errorf("%d nodes: replicas %d, want the release's", len(nodes), *got)
		}
	}
}

func TestLonghornImages(t *testing.T) {
	values := map[string]any{"longhorn": map[string]any{"image": map[string]any{"longhorn": map[string]any{
		"manager":         map[string]any{"repository": "longhornio/longhorn-manager", "tag": "v1.11.0", "registry": "docker.io"},
		"instanceManager": map[string]any{"repository": "longhornio/longhorn-instance-manager", "tag": "v1.11.0"},
	}}}}
	m, im, ok := clusterupgrade.LonghornImages(values)
	if !ok || m != "docker.io/longhornio/longhorn-manager:v1.11.0" || im != "longhornio/longhorn-instance-manager:v1.11.0" {
		t.Errorf("got %q %q %v", m, im, ok)
	}
	values["longhorn"].(map[string]any)["global"] = map[string]any{"imageRegistry": "mirror.example/"}
	if m, im, _ := clusterupgrade.LonghornImages(values); m != "mirror.example/longhornio/longhorn-manager:v1.11.0" || !strings.HasPrefix(im, "mirror.example/") {
		t.Errorf("with a global registry: %q %q", m, im)
	}
	if _, _, ok := clusterupgrade.LonghornImages(map[string]any{}); ok {
		t.Error("values without images name them")
	}
}

func TestInstanceManagerImageLabel(t *testing.T) {
	// Longhorn hashes the image with every ':' and '/' made '-'.
	a := clusterupgrade.InstanceManagerImageLabel("registry.example/longhornio/longhorn-instance-manager:v1.11.0")
	b := clusterupgrade.InstanceManagerImageLabel("registry.example-longhornio-longhorn-instance-manager-v1.11.0")
	if a != b || len(a) != len("imi-")+8 || !strings.HasPrefix(a, "imi-") {
		t.Errorf("labels %q and %q", a, b)
	}
	if a == clusterupgrade.InstanceManagerImageLabel("longhornio/longhorn-instance-manager:v1.10.1") {
		t.Error("two images with one label")
	}
}

func TestHelmReleaseAt(t *testing.T) {
	rel := &cluster.HelmRelease{Revision: 3, Info: cluster.HelmReleaseInfo{Status: "pending-upgrade"},
		Chart: cluster.HelmChart{Metadata: cluster.HelmChartMetadata{Name: "fleet", Version: "108.0.0+up0.14.0", AppVersion: "0.14.0"}}}
	if ok, says := clusterupgrade.HelmReleaseAt(rel, "fleet-108.0.0+up0.14.0", "0.14.0"); ok || !strings.Contains(says, "revision 3 is fleet-108.0.0+up0.14.0 (app 0.14.0), pending-upgrade") {
		t.Errorf("a pending release: %v %q", ok, says)
	}
	rel.Info.Status = cluster.HelmStatusDeployed
	if ok, _ := clusterupgrade.HelmReleaseAt(rel, "fleet-108.0.0+up0.14.0", "0.14.0"); !ok {
		t.Error("a deployed release is not")
	}
	if ok, _ := clusterupgrade.HelmReleaseAt(rel, "fleet-107.0.0+up0.13.0", "0.13.0"); ok {
		t.Error("another version matches")
	}
	if ok, says := clusterupgrade.HelmReleaseAt(nil, "x", "y"); ok || says != "the release does not exist" {
		t.Errorf("no release: %v %q", ok, says)
	}
}

func TestVersionSteps(t *testing.T) {
	for _, tc := range []struct {
		step, previous, target string
		want                   bool
	}{
		{clusterupgrade.StepPreserveOvercommit, "v1.7.1", "v1.8.0", true},
		{clusterupgrade.StepPreserveOvercommit, "v1.7.0-rc2", "v1.8.0", true},
		{clusterupgrade.StepPreserveOvercommit, "v1.7-head", "v1.8-head", true},
		{clusterupgrade.StepPreserveOvercommit, "v1.8.0", "v1.8.1", false},
		{clusterupgrade.StepTLSInternalCN, "v1.8.1", "v1.9.0", true},
		{clusterupgrade.StepTLSInternalCN, "v1.7.1", "v1.8.0", false},
		{clusterupgrade.StepTraefikConfig, "master-head", "master-head", false},
		{clusterupgrade.StepPauseCharts, "v1.7.1", "v1.8.0", true},
	} {
		if got, why := clusterupgrade.AppliesTo(tc.step, tc.previous, tc.target); got != tc.want || (!got && !strings.Contains(why, "need")) {
			t.Errorf("%s from %s to %s: %v (%s), want %v", tc.step, tc.previous, tc.target, got, why, tc.want)
		}
	}
	for _, vs := range clusterupgrade.VersionSteps {
		if vs.Why == "" || (vs.From == "" && vs.To == "") {
			t.Errorf("version step %+v says neither which path nor why", vs)
		}
	}
}

func TestForceUpdateTime(t *testing.T) {
	base := time.Date(2026, 1, 1, 10, 0, 0, 500, time.UTC)
	if got := clusterupgrade.ForceUpdateTime(base, base.Add(time.Hour)); !got.Equal(base.Add(time.Hour).Truncate(time.Second)) {
		t.Errorf("long after the download: %v", got)
	}
	if got := clusterupgrade.ForceUpdateTime(base, base); !got.Equal(base.Truncate(time.Second).Add(time.Second)) {
		t.Errorf("right after the download: %v, want a second later", got)
	}
}

func TestRollout(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 2, AvailableReplicas: 2}}
	if ok, status := clusterupgrade.DeploymentRolledOut(d); ok || !strings.Contains(status, "3 in all") {
		t.Errorf("an old replica left: %v %q", ok, status)
	}
	d.Status.Replicas = 2
	if ok, _ := clusterupgrade.DeploymentRolledOut(d); !ok {
		t.Error("a rolled out Deployment is not")
	}
	d.Generation = 3
	if ok, _ := clusterupgrade.DeploymentRolledOut(d); ok {
		t.Error("a Deployment whose new spec is not observed is rolled out")
	}
}

func TestLonghornManagerReady(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Spec:   appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "m:new"}}}}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, UpdatedNumberScheduled: 2, NumberReady: 3}}
	if ok, says := clusterupgrade.LonghornManagerReady(ds, "m:new", 3); ok || says != "image m:new, 2 of 3 nodes updated, 3 ready" {
		t.Errorf("two of three nodes updated: %v %q", ok, says)
	}
	ds.Status.UpdatedNumberScheduled = 3
	if ok, _ := clusterupgrade.LonghornManagerReady(ds, "m:old", 3); ok {
		t.Error("the old image is ready")
	}
	if ok, _ := clusterupgrade.LonghornManagerReady(ds, "m:new", 3); !ok {
		t.Error("the new image on every node is not ready")
	}
	ds.Generation = 3
	if ok, says := clusterupgrade.LonghornManagerReady(ds, "m:new", 3); ok || !strings.Contains(says, "not seen the latest spec") {
		t.Errorf("a spec the controller has not seen: %v %q", ok, says)
	}
}

package clusterupgrade_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	os.Exit(testenv.RunMain(m, &env))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fakeRancher plays the helm upgrade of Rancher: the new Rancher reports
// its version.
type fakeRancher struct{ calls atomic.Int32 }

func (f *fakeRancher) Upgrade(ctx context.Context, rel *release.Release) error {
	f.calls.Add(1)
	s := &managementv3.Setting{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: cluster.RancherServerVersionSetting}, s); err != nil {
		return err
	}
	s.Value = rel.Rancher
	return env.Client.Update(ctx, s)
}

// world is a Harvester cluster on the test API server, with background
// actors for the Deployment and DaemonSet controllers, Rancher's catalog,
// Fleet and KubeVirt.
type world struct {
	rel *release.Release
	// blocked charts are not deployed by the fake Fleet.
	mu      sync.Mutex
	blocked map[string]bool
}

func (w *world) block(chart string, b bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.blocked[chart] = b
}

func (w *world) isBlocked(chart string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.blocked[chart]
}

func create(t *testing.T, obj client.Object, status func()) {
	t.Helper()
	ctx := context.Background()
	must(t, env.Client.Create(ctx, obj))
	if status != nil {
		status()
		must(t, env.Client.Status().Update(ctx, obj))
	}
}

func chart(name, version string, paused bool, values map[string]any) *managementv3.ManagedChart {
	mc := &managementv3.ManagedChart{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: name},
		Spec: managementv3.ManagedChartSpec{Chart: name, Version: version, Paused: paused, TimeoutSeconds: 300}}
	if values != nil {
		raw, _ := json.Marshal(values)
		mc.Spec.Values = &runtime.RawExtension{Raw: raw}
	}
	return mc
}

// newWorld resets the cluster-wide objects and starts the actors.
func newWorld(t *testing.T) (*world, string, *releasetest.Repo) {
	ctx := context.Background()
	repo := releasetest.New()
	srv := httptest.NewServer(releasetest.Handler(repo.Files()))
	t.Cleanup(srv.Close)
	for _, del := range []struct {
		obj client.Object
		ns  string
	}{
		{&managementv3.ManagedChart{}, cluster.FleetLocalNamespace}, {&appsv1.Deployment{}, cluster.CattleNamespace},
		{&appsv1.DaemonSet{}, cluster.LonghornNamespace}, {&longhornv1beta2.Setting{}, cluster.LonghornNamespace},
		{&kubevirtv1.KubeVirt{}, cluster.HarvesterNamespace}, {&harvesterv1beta1.Addon{}, cluster.MonitoringNamespace},
		{&harvesterv1beta1.Addon{}, cluster.HarvesterNamespace}, {&catalogv1.ClusterRepo{}, ""}, {&managementv3.Setting{}, ""},
	} {
		opts := []client.DeleteAllOfOption{}
		if del.ns != "" {
			opts = append(opts, client.InNamespace(del.ns))
		}
		must(t, client.IgnoreNotFound(env.Client.DeleteAllOf(ctx, del.obj, opts...)))
	}
	for _, ns := range []string{cluster.MonitoringNamespace, cluster.LoggingNamespace} {
		must(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})))
	}
	harvesterValues := map[string]any{"kubevirt": map[string]any{"spec": map[string]any{"workloadUpdateStrategy": map[string]any{"workloadUpdateMethods": []string{}}}}}
	for _, mc := range []*managementv3.ManagedChart{
		chart(cluster.HarvesterManagedChart, "1.7.1", false, harvesterValues),
		chart(cluster.HarvesterCRDManagedChart, "1.7.1", false, nil),
		chart(cluster.MonitoringCRDManagedChart, "107.0.0+up69.8.2", false, nil),
		chart(cluster.LoggingCRDManagedChart, "107.0.0+up4.10.0", false, nil),
		// An operator paused this one: it stays paused.
		chart(cluster.MonitoringManagedChart, "100.0.0", true, nil),
	} {
		create(t, mc, func() {
			mc.Status = managementv3.ManagedChartStatus{ObservedGeneration: mc.Generation, Conditions: []common.Condition{{Type: "Ready", Status: "True"}}}
		})
	}
	create(t, &managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherServerVersionSetting}, Value: "v2.12.3"}, nil)
	deployment := func(name, container, image string) *appsv1.Deployment {
		labels := map[string]string{"app": name}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: image}}}}}}
	}
	create(t, deployment(cluster.RancherDeployment, "rancher", "rancher/rancher:v2.12.3"), nil)
	create(t, deployment(cluster.HarvesterClusterRepoDeployment, cluster.HarvesterClusterRepoContainer, "rancher/harvester-cluster-repo:v1.7.1"), nil)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornManagerDaemonSet},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "lm"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "lm"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "longhornio/longhorn-manager:v1.10.1"}}}}}}
	create(t, ds, nil)
	create(t, &catalogv1.ClusterRepo{ObjectMeta: metav1.ObjectMeta{Name: cluster.HarvesterChartsRepo}}, nil)
	repoObj := &catalogv1.ClusterRepo{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: cluster.HarvesterChartsRepo}, repoObj))
	repoObj.Status.DownloadTime = metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	must(t, env.Client.Status().Update(ctx, repoObj))
	kv := &kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}}
	create(t, kv, func() {
		kv.Status = kubevirtv1.KubeVirtStatus{Phase: "Deployed", ObservedKubeVirtVersion: "1.6.2-150700.3.5.1"}
	})
	for name, value := range map[string]string{cluster.LonghornNodeDrainPolicy: cluster.LonghornNodeDrainPolicyDefault, cluster.LonghornDetachWhenCordoned: "false"} {
		create(t, &longhornv1beta2.Setting{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: name}, Value: value}, nil)
	}
	mon := &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon},
		Spec: harvesterv1beta1.AddonSpec{Chart: "rancher-monitoring", Version: "107.0.0+up69.8.2", Enabled: true, ValuesContent: "grafana: {}\n"}}
	create(t, mon, func() { mon.Status.Status = cluster.AddonStateDeployed })
	pci := &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "pcidevices-controller"},
		Spec: harvesterv1beta1.AddonSpec{Chart: "harvester-pcidevices-controller", Version: "0.6.0"}}
	create(t, pci, nil)

	w := &world{rel: &repo.Release, blocked: map[string]bool{}}
	background(t, w.actors)
	return w, srv.URL + release.RepoRoot, repo
}

// actors is one pass of every fake controller.
func (w *world) actors(ctx context.Context) {
	c := env.Client
	var deps appsv1.DeploymentList
	if c.List(ctx, &deps, client.InNamespace(cluster.CattleNamespace)) == nil {
		for i := range deps.Items {
			d := &deps.Items[i]
			if d.Status.ObservedGeneration < d.Generation {
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1}
				_ = c.Status().Update(ctx, d)
			}
		}
	}
	ds := &appsv1.DaemonSet{}
	if c.Get(ctx, client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornManagerDaemonSet}, ds) == nil && ds.Status.ObservedGeneration < ds.Generation {
		ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3, NumberReady: 3}
		_ = c.Status().Update(ctx, ds)
	}
	// Rancher's catalog downloads the index when asked.
	repo := &catalogv1.ClusterRepo{}
	if c.Get(ctx, client.ObjectKey{Name: cluster.HarvesterChartsRepo}, repo) == nil {
		if f := repo.Spec.ForceUpdate; f != nil && f.After(repo.Status.DownloadTime.Time) && !f.After(time.Now()) {
			repo.Status.DownloadTime = metav1.NewTime(time.Now().Truncate(time.Second).Add(time.Second))
			_ = c.Status().Update(ctx, repo)
		}
	}
	// Fleet deploys every unpaused chart; the Harvester chart brings KubeVirt.
	var charts managementv3.ManagedChartList
	if c.List(ctx, &charts, client.InNamespace(cluster.FleetLocalNamespace)) == nil {
		for i := range charts.Items {
			mc := &charts.Items[i]
			if mc.Spec.Paused || w.isBlocked(mc.Name) || mc.Status.ObservedGeneration >= mc.Generation {
				continue
			}
			mc.Status.ObservedGeneration = mc.Generation
			_ = c.Status().Update(ctx, mc)
			if mc.Name == cluster.HarvesterManagedChart && mc.Spec.Version == w.rel.HarvesterChart {
				kv := &kubevirtv1.KubeVirt{}
				if c.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}, kv) == nil {
					kv.Status.ObservedKubeVirtVersion = w.rel.KubeVirt
					_ = c.Status().Update(ctx, kv)
				}
			}
		}
	}
}

// background runs fn every few milliseconds until the test ends.
func background(t *testing.T, fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fn(ctx)
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

func timeouts() clusterupgrade.Timeouts {
	d := 10 * time.Second
	return clusterupgrade.Timeouts{Repo: d, Rancher: d, ClusterRepo: d, Charts: d, KubeVirt: d, Longhorn: d, Addon: time.Second, Interval: 20 * time.Millisecond}
}

var addons = fstest.MapFS{
	"vm-import-controller.yaml": {Data: []byte(`apiVersion: harvesterhci.io/v1beta1
kind: Addon
metadata:
  name: vm-import-controller
  namespace: harvester-system
spec:
  repo: http://harvester-cluster-repo.cattle-system.svc/charts
  chart: harvester-vm-import-controller
  version: 1.8.0
  enabled: false
`)},
	"pcidevices-controller.yaml": {Data: []byte(`apiVersion: harvesterhci.io/v1beta1
kind: Addon
metadata:
  name: pcidevices-controller
  namespace: harvester-system
spec:
  chart: harvester-pcidevices-controller
  version: 0.7.0
  enabled: false
  valuesContent: "image:\n  tag: v0.7.0\n"
`)},
}

func progress(t *testing.T, plan string) []string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeProgress(plan)}, cm))
	if cm.Data["done"] == "" {
		return nil
	}
	return strings.Split(cm.Data["done"], ",")
}

func getChart(t *testing.T, name string) *managementv3.ManagedChart {
	t.Helper()
	mc := &managementv3.ManagedChart{}
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc))
	return mc
}

func TestClusterUpgrade(t *testing.T) {
	ctx := t.Context()
	_, url, repo := newWorld(t)
	plan := jobtest.Plan(t, env.Client, nil)
	rancher := &fakeRancher{}
	u := &clusterupgrade.Upgrade{Client: env.Client, Plan: plan.Name, RepoURL: url, Rancher: rancher, Addons: addons, Timeouts: timeouts()}
	if err := u.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := progress(t, plan.Name); !slices.Equal(got, clusterupgrade.StepIDs()) {
		t.Errorf("done %v, want %v", got, clusterupgrade.StepIDs())
	}
	if n := rancher.calls.Load(); n != 1 {
		t.Errorf("Rancher upgraded %d times", n)
	}
	d := &appsv1.Deployment{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.HarvesterClusterRepoDeployment}, d))
	if img := d.Spec.Template.Spec.Containers[0].Image; img != "rancher/harvester-cluster-repo:v1.8.0" {
		t.Errorf("cluster repo image %s", img)
	}
	cr := &catalogv1.ClusterRepo{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: cluster.HarvesterChartsRepo}, cr))
	if cr.Spec.ForceUpdate == nil || cr.Status.DownloadTime.Before(cr.Spec.ForceUpdate) {
		t.Errorf("ClusterRepo %+v: the index was not re-read", cr)
	}
	h := getChart(t, cluster.HarvesterManagedChart)
	var values map[string]any
	must(t, json.Unmarshal(h.Spec.Values.Raw, &values))
	ds, _ := values["longhorn"].(map[string]any)["defaultSettings"].(map[string]any)
	if h.Spec.Version != repo.Release.HarvesterChart || h.Spec.Paused || h.Spec.TimeoutSeconds != 600 ||
		ds["nodeDrainPolicy"] != cluster.LonghornNodeDrainPolicyHarvester || ds["detachManuallyAttachedVolumesWhenCordoned"] != true || values["kubevirt"] == nil {
		t.Errorf("harvester chart: version %s, paused %v, timeout %d, values %s", h.Spec.Version, h.Spec.Paused, h.Spec.TimeoutSeconds, h.Spec.Values.Raw)
	}
	for name, version := range map[string]string{
		cluster.HarvesterCRDManagedChart: repo.Release.HarvesterChart, cluster.MonitoringCRDManagedChart: repo.Release.MonitoringChart,
		cluster.LoggingCRDManagedChart: repo.Release.LoggingChart,
	} {
		if mc := getChart(t, name); mc.Spec.Version != version || mc.Spec.Paused {
			t.Errorf("chart %s: version %s, paused %v; want %s, running", name, mc.Spec.Version, mc.Spec.Paused, version)
		}
	}
	if !getChart(t, cluster.MonitoringManagedChart).Spec.Paused {
		t.Error("the chart an operator paused was resumed")
	}
	for key, want := range map[client.ObjectKey][2]string{
		{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon}: {repo.Release.MonitoringChart, "grafana: {}\n"},
		{Namespace: cluster.HarvesterNamespace, Name: "vm-import-controller"}:   {"1.8.0", ""},
		{Namespace: cluster.HarvesterNamespace, Name: "pcidevices-controller"}:  {"0.7.0", "image:\n  tag: v0.7.0\n"},
	} {
		a := &harvesterv1beta1.Addon{}
		must(t, env.Client.Get(ctx, key, a))
		if a.Spec.Version != want[0] || a.Spec.ValuesContent != want[1] {
			t.Errorf("Addon %s: version %s, values %q; want %s, %q", key, a.Spec.Version, a.Spec.ValuesContent, want[0], want[1])
		}
	}

	// A finished upgrade run again does nothing but read.
	if err := u.Run(ctx); err != nil || rancher.calls.Load() != 1 {
		t.Errorf("a second run: %v, Rancher upgraded %d times", err, rancher.calls.Load())
	}
}

// TestClusterUpgradeResumesAfterBeingKilled stops the upgrade while Fleet
// deploys the Harvester chart, then runs it again as a restarted pod would:
// it skips the finished steps (Rancher is upgraded once) and completes.
func TestClusterUpgradeResumesAfterBeingKilled(t *testing.T) {
	w, url, repo := newWorld(t)
	plan := jobtest.Plan(t, env.Client, nil)
	rancher := &fakeRancher{}
	w.block(cluster.HarvesterManagedChart, true)
	u := &clusterupgrade.Upgrade{Client: env.Client, Plan: plan.Name, RepoURL: url, Rancher: rancher, Timeouts: timeouts()}

	ctx, kill := context.WithCancel(t.Context())
	go func() {
		jobtest.Eventually(t, 10*time.Second, "the harvester chart to be upgraded", func() bool {
			return getChart(t, cluster.HarvesterManagedChart).Spec.Version == repo.Release.HarvesterChart
		})
		kill()
	}()
	err := u.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the killed run to stop", err)
	}
	if !strings.Contains(err.Error(), clusterupgrade.StepHarvesterCharts) {
		t.Errorf("message %q does not name the step", err)
	}
	want := []string{clusterupgrade.StepPauseCharts, clusterupgrade.StepRancher, clusterupgrade.StepClusterRepo}
	if got := progress(t, plan.Name); !slices.Equal(got, want) {
		t.Fatalf("done %v after the kill, want %v", got, want)
	}
	if !getChart(t, cluster.LoggingCRDManagedChart).Spec.Paused {
		t.Fatal("the logging CRD chart is not paused while the upgrade is under way")
	}

	w.block(cluster.HarvesterManagedChart, false)
	if err := u.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := progress(t, plan.Name); !slices.Equal(got, clusterupgrade.StepIDs()) {
		t.Errorf("done %v, want %v", got, clusterupgrade.StepIDs())
	}
	if n := rancher.calls.Load(); n != 1 {
		t.Errorf("Rancher upgraded %d times, want once", n)
	}
	for _, name := range []string{cluster.HarvesterManagedChart, cluster.HarvesterCRDManagedChart, cluster.LoggingCRDManagedChart} {
		if getChart(t, name).Spec.Paused {
			t.Errorf("chart %s is still paused", name)
		}
	}
}

func TestClusterUpgradeGivesUpOnFleet(t *testing.T) {
	w, url, _ := newWorld(t)
	plan := jobtest.Plan(t, env.Client, nil)
	w.block(cluster.HarvesterCRDManagedChart, true)
	to := timeouts()
	to.Charts = 300 * time.Millisecond
	u := &clusterupgrade.Upgrade{Client: env.Client, Plan: plan.Name, RepoURL: url, Rancher: &fakeRancher{}, Timeouts: to}
	err := u.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "Fleet to deploy ManagedChart fleet-local/harvester-crd") ||
		!strings.Contains(err.Error(), "kubectl -n fleet-local get managedchart harvester-crd") {
		t.Errorf("err = %v, want a timeout that names the chart and where to look", err)
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
			got := clusterupgrade.LonghornDefaults(tc.values, tc.drain, tc.detach)
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tc.want)
			if string(gb) != string(wb) {
				t.Errorf("LonghornDefaults = %s, want %s", gb, wb)
			}
		})
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

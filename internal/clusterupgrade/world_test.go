package clusterupgrade_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/helmv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
)

// The world is a Harvester cluster on the test API server with background
// actors that react to the cluster upgrade as the real components do, in a
// few lines each: the Deployment and DaemonSet controllers, Rancher (its
// chart, as the fake RancherUpgrader, its catalog and its ManagedChart
// controller), Fleet (Bundles, its agent), the CAPI Cluster, KubeVirt,
// Longhorn and Harvester's add-on controller. It also notes what it saw when
// it matters whether a step ran before the next one (see observations).
//
// internal/sim models the same components in full for the end-to-end tests;
// this world stays beside it on purpose. Its tests judge the order of the
// cluster upgrade's steps (what the new Rancher found paused, which charts
// were blocked when a wait ran), which the simulator, made to play a whole
// upgrade, neither records nor lets a test hold back; and they run on the
// bare API server in seconds, where the simulator needs the whole test world
// (kube-controller-manager, the scheduler, kwok). The cluster-upgrade Job's
// end-to-end runs are the simulator's (test/e2e).

// Lags after the harvester chart is deployed: KubeVirt rolls before
// Longhorn, so that a skipped wait of either shows; long enough that an
// upgrade without the wait has gone on before the roll even on a loaded
// machine (at 100 ms it had not, and TestStepsFailWhenSkipped missed it).
const (
	kubeVirtLag = time.Second
	longhornLag = 2 * time.Second
	// bundleLag: a Bundle that was unpaused is ready only after it.
	bundleLag = 50 * time.Millisecond
)

// Longhorn's images before and after the upgrade.
const (
	oldManager          = "longhornio/longhorn-manager:v1.10.1"
	oldInstanceManager  = "longhornio/longhorn-instance-manager:v1.10.1"
	newManager          = "longhornio/longhorn-manager:v1.11.0"
	nextInstanceManager = "longhornio/longhorn-instance-manager:v1.11.0"
)

// lhNodes are the nodes of the world.
var lhNodes = []string{"node-1", "node-2", "node-3"}

// world is the simulated cluster and what its actors observed.
type world struct {
	rel      *release.Release
	previous string

	mu      sync.Mutex
	blocked map[string]bool
	// rancherCalls counts Rancher upgrades; pausedAtRancher and
	// staleAtRancher are what the new Rancher found.
	rancherCalls    int
	rancherUpgraded bool
	pausedAtRancher []string
	staleAtRancher  []string
	// chartDeployed is when Fleet deployed the harvester chart's new version.
	chartDeployed time.Time
	// bundlesReadyAt is when every bundle is ready (after the last unpause).
	bundlesReadyAt time.Time
	// Observations of the order of things (nil: not seen yet).
	kubeVirtAtRegistrySync *bool
	longhornAtMonitoring   *bool
	// The etcd revisions at which KubeVirt and Longhorn had rolled to the
	// release (0: not yet); only the world's loop uses them.
	kubeVirtRolledAt, longhornRolledAt int64
	// addons tracks Harvester's add-on controller per Addon: the spec it
	// deployed, its phase in a redeployment, how many it did.
	addonSpec     map[string]string
	addonPhase    map[string]int
	addonRedeploy map[string]int
	addonSlow     map[string]int
	addonPending  map[string]bool
	addonOverlap  []string
	// agentRedeploys counts the fleet agents the world's Fleet deployed.
	agentRedeploys int
}

func (w *world) lock() func() { w.mu.Lock(); return w.mu.Unlock }

func (w *world) block(chart string, b bool) {
	defer w.lock()()
	w.blocked[chart] = b
}

func (w *world) observe(p **bool, v bool) {
	defer w.lock()()
	if *p == nil {
		*p = &v
	}
}

// fakeRancher is the new Rancher's chart: its release reports the new
// version, its Deployments roll, it brings Fleet and its webhook at the
// release's versions (whose Fleet drops fleet-controller's API server URL),
// and it recreates the chart repositories and setting the upgrade deleted.
type fakeRancher struct{ w *world }

func (f *fakeRancher) Upgrade(ctx context.Context, rel *release.Release, _ clusterupgrade.RancherOptions) error {
	c := env.Client
	w := f.w
	var charts managementv3.ManagedChartList
	if err := c.List(ctx, &charts, client.InNamespace(cluster.FleetLocalNamespace)); err != nil {
		return err
	}
	var paused, stale []string
	for _, mc := range charts.Items {
		if mc.Spec.Paused {
			paused = append(paused, mc.Name)
		}
	}
	for _, obj := range rancherRecreated() {
		if c.Get(ctx, client.ObjectKeyFromObject(obj), obj) == nil {
			stale = append(stale, obj.GetName())
		}
	}
	unlock := w.lock()
	w.rancherCalls++
	w.rancherUpgraded = true
	w.pausedAtRancher, w.staleAtRancher = paused, stale
	unlock()
	s := &managementv3.Setting{}
	if err := c.Get(ctx, client.ObjectKey{Name: cluster.RancherServerVersionSetting}, s); err != nil {
		return err
	}
	s.Value = rel.Rancher
	if err := c.Update(ctx, s); err != nil {
		return err
	}
	for _, d := range []client.ObjectKey{
		{Namespace: cluster.CattleNamespace, Name: cluster.RancherDeployment},
		{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerDeployment},
		{Namespace: cluster.CattleNamespace, Name: cluster.RancherWebhookDeployment},
	} {
		dep := &appsv1.Deployment{}
		if err := c.Get(ctx, d, dep); err != nil {
			return err
		}
		dep.Spec.Template.Spec.Containers[0].Image = "rancher/rancher:" + rel.Rancher
		if err := c.Update(ctx, dep); err != nil {
			return err
		}
	}
	deps := rel.RancherDependencies
	for _, r := range []struct {
		ns, name string
		v        release.ChartVersion
	}{
		{cluster.FleetSystemNamespace, cluster.FleetRelease, deps.Fleet},
		{cluster.FleetSystemNamespace, cluster.FleetCRDRelease, deps.FleetCRD},
		{cluster.CattleNamespace, cluster.RancherWebhookRelease, deps.RancherWebhook},
	} {
		if err := helmRelease(ctx, r.ns, r.name, 2, r.v.Chart, r.v.App, nil); err != nil {
			return err
		}
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerConfigMap}, cm); err != nil {
		return err
	}
	cm.Data[cluster.FleetControllerConfigKey] = "agentTLSMode: strict\napiServerCA: the-ca\n"
	return c.Update(ctx, cm)
}

func rancherRecreated() []client.Object {
	return []client.Object{
		&catalogv1.ClusterRepo{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherChartsRepo}},
		&catalogv1.ClusterRepo{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherRKE2ChartsRepo}},
		&catalogv1.ClusterRepo{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherPartnerChartsRepo}},
		&managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ChartDefaultBranchSetting}},
	}
}

// helmRelease writes revision rev of a Helm release, deployed.
func helmRelease(ctx context.Context, ns, name string, rev int, chart, app string, values map[string]any) error {
	s, err := cluster.HelmReleaseSecret(&cluster.HelmRelease{Name: name, Namespace: ns, Revision: rev,
		Info:  cluster.HelmReleaseInfo{Status: cluster.HelmStatusDeployed, LastDeployed: time.Now()},
		Chart: cluster.HelmChart{Metadata: cluster.HelmChartMetadata{Name: name, Version: chart, AppVersion: app}, Values: values}})
	if err != nil {
		return err
	}
	return client.IgnoreAlreadyExists(env.Client.Create(ctx, s))
}

// harvesterValues are the harvester chart's default values of a Longhorn.
func harvesterValues(manager, instanceManager string) map[string]any {
	split := func(image string) map[string]any {
		for i := len(image) - 1; i >= 0; i-- {
			if image[i] == ':' {
				return map[string]any{"repository": image[:i], "tag": image[i+1:]}
			}
		}
		return nil
	}
	return map[string]any{"longhorn": map[string]any{"image": map[string]any{"longhorn": map[string]any{
		"manager": split(manager), "instanceManager": split(instanceManager),
	}}}}
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
		Spec: managementv3.ManagedChartSpec{Chart: name, Version: version, Paused: paused, TimeoutSeconds: 600}}
	if values != nil {
		raw, _ := json.Marshal(values)
		mc.Spec.Values = &runtime.RawExtension{Raw: raw}
	}
	return mc
}

func deployment(ns, name, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}}}
}

// worldObjects are the kinds the world creates, emptied before each test.
var worldObjects = []struct {
	obj client.Object
	ns  string
}{
	{&managementv3.ManagedChart{}, cluster.FleetLocalNamespace}, {&fleetv1alpha1.Bundle{}, cluster.FleetLocalNamespace},
	{&appsv1.Deployment{}, cluster.CattleNamespace}, {&appsv1.Deployment{}, cluster.FleetSystemNamespace},
	{&appsv1.Deployment{}, cluster.FleetLocalSystemNamespace}, {&appsv1.DaemonSet{}, cluster.LonghornNamespace},
	{&longhornv1beta2.Setting{}, cluster.LonghornNamespace}, {&longhornv1beta2.Node{}, cluster.LonghornNamespace},
	{&longhornv1beta2.InstanceManager{}, cluster.LonghornNamespace},
	{&kubevirtv1.KubeVirt{}, cluster.HarvesterNamespace}, {&harvesterv1beta1.Addon{}, cluster.MonitoringNamespace},
	{&harvesterv1beta1.Addon{}, cluster.LoggingNamespace}, {&harvesterv1beta1.Addon{}, cluster.HarvesterNamespace},
	{&harvesterv1beta1.Addon{}, cluster.KubeSystemNamespace}, {&catalogv1.ClusterRepo{}, ""}, {&managementv3.Setting{}, ""},
	{&harvesterv1beta1.Setting{}, ""}, {&managementv3.Cluster{}, ""}, {&capiv1beta1.Cluster{}, cluster.FleetLocalNamespace},
	{&fleetv1alpha1.Cluster{}, cluster.FleetLocalNamespace}, {&provisioningv1.Cluster{}, cluster.FleetLocalNamespace},
	{&helmv1.HelmChartConfig{}, cluster.KubeSystemNamespace}, {&networkingv1.Ingress{}, cluster.CattleNamespace},
	{&networkingv1.IngressClass{}, ""}, {&corev1.Secret{}, cluster.CattleNamespace}, {&corev1.Secret{}, cluster.FleetSystemNamespace},
	{&corev1.Secret{}, cluster.HarvesterNamespace}, {&corev1.Secret{}, cluster.FleetLocalNamespace},
	{&corev1.ConfigMap{}, cluster.FleetSystemNamespace}, {&corev1.ConfigMap{}, cluster.KubeSystemNamespace},
	{&corev1.Node{}, ""}, {&admissionregistrationv1.MutatingWebhookConfiguration{}, ""},
	{&admissionregistrationv1.ValidatingWebhookConfiguration{}, ""},
}

// newWorld resets the cluster-wide objects, builds a cluster that runs
// previous, starts the actors, and returns the repo's URL.
func newWorld(t *testing.T, previous string) (*world, string) {
	ctx := context.Background()
	repo := releasetest.New()
	srv := httptest.NewServer(releasetest.Handler(repo.Files()))
	t.Cleanup(srv.Close)
	for _, ns := range []string{cluster.MonitoringNamespace, cluster.LoggingNamespace, cluster.FleetSystemNamespace, cluster.FleetLocalSystemNamespace,
		cluster.CattleNamespace, cluster.FleetLocalNamespace, cluster.LonghornNamespace, cluster.KubeSystemNamespace, cluster.HarvesterNamespace} {
		must(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})))
	}
	for _, del := range worldObjects {
		opts := []client.DeleteAllOfOption{}
		if del.ns != "" {
			opts = append(opts, client.InNamespace(del.ns))
		}
		must(t, client.IgnoreNotFound(env.Client.DeleteAllOf(ctx, del.obj, opts...)))
	}
	for _, n := range lhNodes {
		create(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{cluster.LabelManagedNode: "true"}}}, nil)
		create(t, &longhornv1beta2.Node{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: n}}, nil)
		createInstanceManager(t, n, oldInstanceManager)
	}
	harvester := map[string]any{"kubevirt": map[string]any{"spec": map[string]any{"workloadUpdateStrategy": map[string]any{"workloadUpdateMethods": []string{}}}}}
	for _, mc := range []*managementv3.ManagedChart{
		chart(cluster.HarvesterManagedChart, "1.7.1", false, harvester),
		chart(cluster.HarvesterCRDManagedChart, "1.7.1", false, nil),
		chart(cluster.MonitoringCRDManagedChart, "107.0.0+up69.8.2", false, nil),
		chart(cluster.LoggingCRDManagedChart, "107.0.0+up4.10.0", false, nil),
		// A chart of an older cluster, which the upgrade pauses and resumes.
		chart(cluster.LoggingManagedChart, "100.0.0", false, nil),
		// An operator paused this one: it stays paused.
		chart(cluster.MonitoringManagedChart, "100.0.0", true, nil),
	} {
		create(t, mc, nil)
	}
	create(t, &managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherServerVersionSetting}, Value: "v2.12.3"}, nil)
	create(t, &managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ChartDefaultBranchSetting}, Value: "release-v2.12"}, nil)
	create(t, &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.OvercommitConfigSetting}, Default: `{"cpu":1600,"memory":150,"storage":200}`}, nil)
	create(t, &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ContainerdRegistrySetting}}, nil)
	create(t, &managementv3.Cluster{ObjectMeta: metav1.ObjectMeta{Name: cluster.LocalClusterName}}, nil)
	local := &provisioningv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
		Spec: provisioningv1.ClusterSpec{KubernetesVersion: "v1.34.4+rke2r1", RKEConfig: &provisioningv1.RKEConfig{}}}
	create(t, local, nil)
	capi := &capiv1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}}
	create(t, capi, func() {
		capi.Status = capiv1beta1.ClusterStatus{Phase: cluster.CAPIClusterPhaseProvisioned, ObservedGeneration: capi.Generation}
	})
	fc := &fleetv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
		Spec: fleetv1alpha1.ClusterSpec{RedeployAgentGeneration: 4}}
	create(t, fc, func() {
		fc.Status = fleetv1alpha1.ClusterStatus{AgentDeployedGeneration: ptr.To[int64](4), Conditions: []common.Condition{
			{Type: cluster.ConditionImported, Status: "True"}, {Type: cluster.ConditionReady, Status: "True"}}}
	})
	create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerConfigMap},
		Data: map[string]string{cluster.FleetControllerConfigKey: "apiServerURL: https://10.0.0.10:6443\napiServerCA: the-ca\n"}}, nil)
	for _, d := range []*appsv1.Deployment{
		deployment(cluster.CattleNamespace, cluster.RancherDeployment, "rancher/rancher:v2.12.3"),
		deployment(cluster.CattleNamespace, cluster.RancherWebhookDeployment, "rancher/rancher-webhook:v0.8.0"),
		deployment(cluster.CattleNamespace, cluster.HarvesterClusterRepoDeployment, "rancher/harvester-cluster-repo:v1.7.1"),
		deployment(cluster.FleetSystemNamespace, cluster.FleetControllerDeployment, "rancher/fleet:v0.13.0"),
		deployment(cluster.FleetLocalSystemNamespace, cluster.FleetAgentDeployment, "rancher/fleet-agent:v0.13.0"),
	} {
		if d.Name == cluster.HarvesterClusterRepoDeployment {
			d.Spec.Template.Spec.Containers[0].Name = cluster.HarvesterClusterRepoContainer
		}
		create(t, d, nil)
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornManagerDaemonSet},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "lm"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "lm"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: oldManager}}}}}}
	create(t, ds, nil)
	must(t, helmRelease(ctx, cluster.HarvesterNamespace, cluster.HarvesterRelease, 1, "1.7.1", "v1.7.1", harvesterValues(oldManager, oldInstanceManager)))
	for _, name := range []string{cluster.HarvesterChartsRepo, cluster.RancherChartsRepo, cluster.RancherRKE2ChartsRepo, cluster.RancherPartnerChartsRepo} {
		createRepo(t, name)
	}
	kv := &kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}}
	create(t, kv, func() {
		kv.Status = kubevirtv1.KubeVirtStatus{Phase: "Deployed", ObservedKubeVirtVersion: "1.6.2-150700.3.5.1"}
	})
	for name, value := range map[string]string{cluster.LonghornNodeDrainPolicy: cluster.LonghornNodeDrainPolicyDefault, cluster.LonghornDetachWhenCordoned: "false"} {
		create(t, &longhornv1beta2.Setting{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: name}, Value: value}, nil)
	}
	mon := &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon},
		Spec: harvesterv1beta1.AddonSpec{Chart: "rancher-monitoring", Version: "107.0.0+up69.8.2", Enabled: true, ValuesContent: "grafana:\n  persistence:\n    size: 2Gi\n"}}
	create(t, mon, func() { mon.Status.Status = cluster.AddonStateDeployed })
	logging := &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LoggingNamespace, Name: cluster.LoggingAddon},
		Spec: harvesterv1beta1.AddonSpec{Chart: "rancher-logging", Version: "107.0.0+up4.10.0",
			ValuesContent: "eventTailer:\n  workloadOverrides:\n    containers:\n    - image: rancher/harvester-eventrouter:v1.7.1\n"}}
	create(t, logging, nil)
	pci := &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "pcidevices-controller"},
		Spec: harvesterv1beta1.AddonSpec{Chart: "harvester-pcidevices-controller", Version: "0.6.0", Enabled: true}}
	create(t, pci, func() { pci.Status.Status = cluster.AddonStateDeployed })
	nvidia := &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: cluster.NvidiaDriverToolkitAddon},
		Spec: harvesterv1beta1.AddonSpec{Chart: "nvidia-driver-runtime", Version: "0.1.0", ValuesContent: "driverLocation: http://10.0.0.5/NVIDIA.run\n"}}
	create(t, nvidia, nil)
	create(t, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: cluster.RancherExposeIngress},
		Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "rancher", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}, nil)
	create(t, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "traefik"}, Spec: networkingv1.IngressClassSpec{Controller: "traefik.io/ingress-controller"}}, nil)
	create(t, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{cluster.AnnotationDefaultIngressClass: "true"}},
		Spec: networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}}, nil)
	create(t, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cluster.LegacyCAPIMutatingWebhook}}, nil)
	create(t, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cluster.LegacyCAPIValidatingWebhook}}, nil)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalRKEStateSecret},
		Type: cluster.LocalRKEStateSecretType, Data: map[string][]byte{"state": []byte("{}")}}, nil)

	w := &world{rel: &repo.Release, previous: previous, blocked: map[string]bool{},
		addonSpec: map[string]string{}, addonPhase: map[string]int{}, addonRedeploy: map[string]int{}, addonSlow: map[string]int{}}
	for _, actor := range []func(context.Context){w.deployments, w.catalog, w.fleet, w.harvester, w.addons, w.fleetAgent} {
		background(t, actor)
	}
	return w, srv.URL + release.RepoRoot
}

func createRepo(t *testing.T, name string) {
	t.Helper()
	create(t, &catalogv1.ClusterRepo{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil)
	repo := &catalogv1.ClusterRepo{}
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Name: name}, repo))
	repo.Status.DownloadTime = metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	must(t, env.Client.Status().Update(context.Background(), repo))
}

func createInstanceManager(t *testing.T, node, image string) {
	t.Helper()
	must(t, newInstanceManager(context.Background(), node, image))
}

func newInstanceManager(ctx context.Context, node, image string) error {
	label := clusterupgrade.InstanceManagerImageLabel(image)
	im := &longhornv1beta2.InstanceManager{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: "instance-manager-" + node + "-" + label,
		Labels: map[string]string{cluster.LabelLonghornNode: node, cluster.LabelInstanceManagerType: cluster.InstanceManagerTypeAIO,
			cluster.LabelInstanceManagerDataEngine: cluster.LonghornDataEngineV1, cluster.LabelInstanceManagerImage: label}},
		Spec: longhornv1beta2.InstanceManagerSpec{Image: image, NodeID: node}}
	if err := env.Client.Create(ctx, im); err != nil {
		return client.IgnoreAlreadyExists(err)
	}
	im.Status.CurrentState = cluster.InstanceManagerStateRunning
	return env.Client.Status().Update(ctx, im)
}

// background runs an actor every few milliseconds until the test ends.
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

// deployments: the Deployment controller rolls every new spec out.
func (w *world) deployments(ctx context.Context) {
	c := env.Client
	for _, ns := range []string{cluster.CattleNamespace, cluster.FleetSystemNamespace, cluster.FleetLocalSystemNamespace} {
		var deps appsv1.DeploymentList
		if c.List(ctx, &deps, client.InNamespace(ns)) != nil {
			continue
		}
		for i := range deps.Items {
			d := &deps.Items[i]
			if d.Status.ObservedGeneration < d.Generation {
				now := metav1.Now()
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1,
					Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", LastUpdateTime: now, LastTransitionTime: now}}}
				_ = c.Status().Update(ctx, d)
			}
		}
	}
}

// catalog: Rancher downloads an index when asked, and the new Rancher
// recreates its own repositories and setting.
func (w *world) catalog(ctx context.Context) {
	c := env.Client
	var repos catalogv1.ClusterRepoList
	if c.List(ctx, &repos) == nil {
		for i := range repos.Items {
			repo := &repos.Items[i]
			if f := repo.Spec.ForceUpdate; f != nil && f.After(repo.Status.DownloadTime.Time) && !f.After(time.Now()) {
				repo.Status.DownloadTime = metav1.NewTime(time.Now().Truncate(time.Second).Add(time.Second))
				_ = c.Status().Update(ctx, repo)
			}
		}
	}
	unlock := w.lock()
	upgraded := w.rancherUpgraded
	unlock()
	if !upgraded {
		return
	}
	for _, obj := range rancherRecreated() {
		if c.Get(ctx, client.ObjectKeyFromObject(obj), obj) == nil {
			continue
		}
		if repo, ok := obj.(*catalogv1.ClusterRepo); ok {
			if c.Create(ctx, repo) == nil {
				repo.Status.DownloadTime = metav1.NewTime(time.Now().Truncate(time.Second))
				_ = c.Status().Update(ctx, repo)
			}
			continue
		}
		_ = c.Create(ctx, obj)
	}
}

// specHash identifies an object's spec or status as data.
func specHash(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// fleet: Rancher writes a Bundle per ManagedChart; Fleet processes each new
// generation (its deployment not ready at first), deploys it unless it is
// paused or blocked, and Rancher copies the Bundle's status to the chart.
func (w *world) fleet(ctx context.Context) {
	c := env.Client
	var charts managementv3.ManagedChartList
	if c.List(ctx, &charts, client.InNamespace(cluster.FleetLocalNamespace)) != nil {
		return
	}
	for i := range charts.Items {
		mc := &charts.Items[i]
		b := &fleetv1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: cluster.ManagedChartBundlePrefix + mc.Name}}
		spec := cluster.ManagedChartBundleSpec(mc)
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			b.Spec = spec
			if c.Create(ctx, b) != nil {
				continue
			}
		} else if !cluster.SameBundleSpec(b.Spec, spec) {
			wasPaused := b.Spec.Paused
			b.Spec = spec
			if c.Update(ctx, b) != nil {
				continue
			}
			if wasPaused && !spec.Paused {
				unlock := w.lock()
				w.bundlesReadyAt = time.Now().Add(bundleLag)
				unlock()
			}
		}
		unlock := w.lock()
		blocked, readyAt := w.blocked[mc.Name], w.bundlesReadyAt
		unlock()
		st := b.Status
		switch {
		case st.ObservedGeneration < b.Generation && b.Spec.Paused:
			// A paused bundle keeps what it deployed before.
			st.ObservedGeneration = b.Generation
			if st.Summary.DesiredReady == 0 {
				st.Summary = fleetv1alpha1.BundleSummary{DesiredReady: 1, Ready: 1}
				st.Conditions = []common.Condition{{Type: cluster.ConditionReady, Status: "True"}}
			}
		case st.ObservedGeneration < b.Generation:
			st.ObservedGeneration = b.Generation
			st.Summary = fleetv1alpha1.BundleSummary{DesiredReady: 1, WaitApplied: 1}
			st.Display = fleetv1alpha1.BundleDisplay{ReadyClusters: "0/1", State: "WaitApplied"}
			st.Conditions = []common.Condition{{Type: cluster.ConditionReady, Status: "False", Message: "WaitApplied(1)"}}
		case !b.Spec.Paused && !blocked && st.Summary.Ready == 0 && time.Now().After(readyAt):
			st.Summary = fleetv1alpha1.BundleSummary{DesiredReady: 1, Ready: 1}
			st.Display = fleetv1alpha1.BundleDisplay{ReadyClusters: "1/1"}
			st.Conditions = []common.Condition{{Type: cluster.ConditionReady, Status: "True"}}
			if mc.Name == cluster.HarvesterManagedChart && mc.Spec.Version == w.rel.HarvesterChart {
				unlock := w.lock()
				w.chartDeployed = time.Now()
				unlock()
				_ = helmRelease(ctx, cluster.HarvesterNamespace, cluster.HarvesterRelease, 2, w.rel.HarvesterChart, w.rel.Harvester, harvesterValues(newManager, nextInstanceManager))
			}
		}
		if specHash(st) != specHash(b.Status) {
			b.Status = st
			if c.Status().Update(ctx, b) != nil {
				continue
			}
		}
		if specHash(mc.Status) != specHash(b.Status) {
			mc.Status = b.Status
			_ = c.Status().Update(ctx, mc)
		}
	}
}

// harvester: after the harvester chart's deployment KubeVirt and then
// Longhorn roll to the release; the world notes whether they had when the
// steps after their waits began, by the objects' etcd revisions: the
// upgrade may react to a roll before the world's loop looks again.
func (w *world) harvester(ctx context.Context) {
	c := env.Client
	unlock := w.lock()
	deployed := w.chartDeployed
	unlock()
	kv := &kubevirtv1.KubeVirt{}
	if c.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}, kv) == nil {
		switch {
		case kv.Status.ObservedKubeVirtVersion == w.rel.KubeVirt:
			if w.kubeVirtRolledAt == 0 { // rolled before this world's loop began
				w.kubeVirtRolledAt = revision(kv)
			}
		case !deployed.IsZero() && time.Since(deployed) > kubeVirtLag:
			kv.Status.ObservedKubeVirtVersion = w.rel.KubeVirt
			if c.Status().Update(ctx, kv) == nil {
				w.kubeVirtRolledAt = revision(kv)
			}
		}
	}
	ds := &appsv1.DaemonSet{}
	if c.Get(ctx, client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornManagerDaemonSet}, ds) == nil {
		rolled := ds.Spec.Template.Spec.Containers[0].Image == newManager && ds.Status.ObservedGeneration == ds.Generation && ds.Status.NumberReady == 3
		switch {
		case rolled:
			if w.longhornRolledAt == 0 { // rolled before this world's loop began
				w.longhornRolledAt = revision(ds)
			}
		case ds.Spec.Template.Spec.Containers[0].Image != newManager && !deployed.IsZero() && time.Since(deployed) > longhornLag:
			ds.Spec.Template.Spec.Containers[0].Image = newManager
			_ = c.Update(ctx, ds)
			for _, n := range lhNodes {
				_ = newInstanceManager(ctx, n, nextInstanceManager)
			}
		case ds.Status.ObservedGeneration < ds.Generation:
			ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3, NumberReady: 3}
			if c.Status().Update(ctx, ds) == nil && ds.Spec.Template.Spec.Containers[0].Image == newManager {
				w.longhornRolledAt = revision(ds)
			}
		}
	}
	s := &harvesterv1beta1.Setting{}
	if c.Get(ctx, client.ObjectKey{Name: cluster.ContainerdRegistrySetting}, s) == nil && s.Annotations[cluster.AnnotationUpgradePatched] != "" {
		w.observe(&w.kubeVirtAtRegistrySync, after(s, w.kubeVirtRolledAt))
	}
	mc := &managementv3.ManagedChart{}
	if c.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.MonitoringCRDManagedChart}, mc) == nil && mc.Spec.Version == w.rel.MonitoringChart {
		w.observe(&w.longhornAtMonitoring, after(mc, w.longhornRolledAt))
	}
}

// revision is the etcd revision of an object's last write: the test world's
// API server is backed by etcd, whose resourceVersions are its revisions.
func revision(o client.Object) int64 {
	r, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return r
}

// after says whether o was last written after the revision at (0: the
// thing at has not happened yet).
func after(o client.Object, at int64) bool {
	return at != 0 && revision(o) > at
}

// addons: Harvester's add-on controller redeploys an enabled, deployed
// add-on whose spec changed: InProgress, then AddonUpdating, then
// AddonDeploySuccessful with Completed, one pass each (after addonSlow
// passes of not reacting at all). The world notes an add-on changed while
// another one was still being redeployed: the upgrade did not wait.
func (w *world) addons(ctx context.Context) {
	c := env.Client
	var addons harvesterv1beta1.AddonList
	if c.List(ctx, &addons) != nil {
		return
	}
	now := time.Now().UTC().Format(time.RFC3339)
	defer w.lock()()
	pending := map[string]bool{}
	for i := range addons.Items {
		a := &addons.Items[i]
		key := a.Namespace + "/" + a.Name
		spec := specHash(a.Spec)
		if _, known := w.addonSpec[key]; !known {
			w.addonSpec[key] = spec
		}
		if a.Spec.Enabled && (w.addonSpec[key] != spec || w.addonPhase[key] > 0) {
			pending[key] = true
		}
	}
	for key := range pending {
		if w.addonPending[key] {
			continue
		}
		for other := range w.addonPending {
			w.addonOverlap = append(w.addonOverlap, fmt.Sprintf("%s changed while %s was being redeployed", key, other))
		}
	}
	w.addonPending = pending
	for i := range addons.Items {
		a := &addons.Items[i]
		key := a.Namespace + "/" + a.Name
		if !pending[key] {
			continue
		}
		if w.addonSlow[key] > 0 {
			w.addonSlow[key]--
			continue
		}
		phase := w.addonPhase[key]
		switch phase {
		case 0:
			common.SetCondition(&a.Status.Conditions, common.Condition{Type: cluster.AddonConditionInProgress, Status: "True", LastUpdateTime: now})
			common.SetCondition(&a.Status.Conditions, common.Condition{Type: cluster.AddonConditionCompleted, Status: "False"})
		case 1:
			a.Status.Status = cluster.AddonStateUpdating
		default:
			a.Status.Status = cluster.AddonStateDeployed
			common.SetCondition(&a.Status.Conditions, common.Condition{Type: cluster.AddonConditionInProgress, Status: "False"})
			common.SetCondition(&a.Status.Conditions, common.Condition{Type: cluster.AddonConditionCompleted, Status: "True", LastUpdateTime: now})
		}
		if c.Status().Update(ctx, a) != nil {
			continue
		}
		if phase < 2 {
			w.addonPhase[key] = phase + 1
		} else {
			w.addonPhase[key], w.addonSpec[key] = 0, specHash(a.Spec)
			w.addonRedeploy[key]++
			delete(w.addonPending, key)
		}
	}
}

// fleetAgent: Fleet deploys a new agent when asked for a new generation.
func (w *world) fleetAgent(ctx context.Context) {
	c := env.Client
	fc := &fleetv1alpha1.Cluster{}
	if c.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, fc) != nil {
		return
	}
	if ptr.Deref(fc.Status.AgentDeployedGeneration, 0) >= fc.Spec.RedeployAgentGeneration {
		return
	}
	key := client.ObjectKey{Namespace: cluster.FleetLocalSystemNamespace, Name: cluster.FleetAgentDeployment}
	old := &appsv1.Deployment{}
	if c.Get(ctx, key, old) == nil {
		if err := c.Delete(ctx, old); err != nil {
			return
		}
	}
	if err := c.Create(ctx, deployment(key.Namespace, key.Name, "rancher/fleet-agent:v0.14.0")); client.IgnoreAlreadyExists(err) != nil {
		return
	}
	fc.Status.AgentDeployedGeneration = ptr.To(fc.Spec.RedeployAgentGeneration)
	if c.Status().Update(ctx, fc) == nil {
		unlock := w.lock()
		w.agentRedeploys++
		unlock()
	}
}

// String summarizes the world's observations for failure messages.
func (w *world) String() string {
	defer w.lock()()
	return fmt.Sprintf("rancher calls %d, paused at Rancher %v, stale at Rancher %v, addon redeploys %v, overlaps %v, agent redeploys %d",
		w.rancherCalls, w.pausedAtRancher, w.staleAtRancher, w.addonRedeploy, w.addonOverlap, w.agentRedeploys)
}

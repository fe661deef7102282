package clusterupgrade_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/helmv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	if os.Getenv("CLUSTERUPGRADE_LOG") != "" {
		log.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		log.SetLogger(logr.Discard())
	}
	os.Exit(testenv.RunMain(m, &env))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func timeouts() clusterupgrade.Timeouts {
	d := 10 * time.Second
	return clusterupgrade.Timeouts{Repo: d, Rancher: d, CAPI: d, CAPIStable: 20 * time.Millisecond, Dependencies: d, Fleet: d, FleetReady: time.Second,
		ClusterRepo: d, Charts: d, KubeVirt: d, Longhorn: d, LonghornStable: 20 * time.Millisecond, Addon: 2 * time.Second, Bundles: 2 * time.Second, Interval: 10 * time.Millisecond}
}

// testCRD is the CRD of the world's CRDs directory.
const testCRD = "cdis.cdi.kubevirt.io"

// files of the world's add-on, CRD and versioned manifests directories;
// the CRD and the versioned ConfigMap carry the plan's name, so a test sees
// its own.
func addonFiles() fstest.MapFS {
	addon := func(ns, name, chart, version, values string) *fstest.MapFile {
		a := harvesterv1beta1.Addon{TypeMeta: metav1.TypeMeta{APIVersion: "harvesterhci.io/v1beta1", Kind: "Addon"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: harvesterv1beta1.AddonSpec{Chart: chart, Version: version, ValuesContent: values}}
		b, _ := yaml.Marshal(a)
		return &fstest.MapFile{Data: b}
	}
	return fstest.MapFS{
		"vm-import-controller.yaml":  addon(cluster.HarvesterNamespace, "vm-import-controller", "harvester-vm-import-controller", "1.8.0", ""),
		"pcidevices-controller.yaml": addon(cluster.HarvesterNamespace, "pcidevices-controller", "harvester-pcidevices-controller", "0.7.0", "image:\n  tag: v0.7.0\n"),
		"nvidia-driver-toolkit.yaml": addon(cluster.HarvesterNamespace, cluster.NvidiaDriverToolkitAddon, "nvidia-driver-runtime", "0.2.0",
			"driverLocation: HTTPENDPOINT/NVIDIA-Linux-x86_64-vgpu-kvm.run\n"),
		"kubeovn-operator.yaml": addon(cluster.KubeSystemNamespace, cluster.KubeOVNAddon, "kubeovn-operator", "1.15.0", ""),
		// Not an add-on the upgrade touches: it stays as the operator has it.
		"rancher-vcluster.yaml": addon("rancher-vcluster", "rancher-vcluster", "rancher-vcluster", "0.2.0", ""),
	}
}

func crdFiles(plan string) fstest.MapFS {
	return fstest.MapFS{"cdi.yaml": {Data: []byte(fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %s
  annotations:
    test.harvesterhci.io/plan: %s
spec:
  group: cdi.kubevirt.io
  names: {kind: CDI, listKind: CDIList, plural: cdis, singular: cdi}
  scope: Cluster
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: not-a-crd, namespace: kube-system}
`, testCRD, plan))}}
}

func manifestFiles(plan string) fstest.MapFS {
	cm := func(version string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-%s\n  namespace: kube-system\ndata:\n  plan: %s\n", version, plan))}
	}
	return fstest.MapFS{"v1.7.1/marker.yaml": cm("v1.7.1"), "v1.8.0/marker.yaml": cm("v1.8.0")}
}

// setup builds a world that runs previous and a plan that upgrades it.
func setup(t *testing.T, previous string) (*world, *clusterupgrade.Upgrade) {
	w, url := newWorld(t, previous)
	plan := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) { p.Status.PreviousVersion = ptr.To(previous) })
	u := &clusterupgrade.Upgrade{Client: env.Client, Plan: plan.Name, RepoURL: url, Rancher: &fakeRancher{w: w},
		Addons: addonFiles(), CRDs: crdFiles(plan.Name), Manifests: manifestFiles(plan.Name), Timeouts: timeouts()}
	return w, u
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

// upgraded is what the world looks like after an upgrade, checked step by
// step: each problem is listed under the step whose effect is missing.
type upgraded struct {
	w *world
	u *clusterupgrade.Upgrade
	// bundlesReady: every Fleet Bundle was ready when the Job returned.
	bundlesReady bool
}

// problems returns, by step, what is not as the step leaves it.
func (c upgraded) problems(ctx context.Context) map[string][]string {
	cl := env.Client
	rel := c.w.rel
	out := map[string][]string{}
	bad := func(step, format string, args ...any) { out[step] = append(out[step], fmt.Sprintf(format, args...)) }
	get := func(key client.ObjectKey, obj client.Object) bool { return cl.Get(ctx, key, obj) == nil }
	fromV17 := strings.HasPrefix(c.w.previous, "v1.7")

	hcc := &helmv1.HelmChartConfig{}
	if !get(client.ObjectKey{Namespace: cluster.KubeSystemNamespace, Name: cluster.RKE2MultusChartConfig}, hcc) || hcc.Spec.FailurePolicy != "abort" {
		bad(clusterupgrade.StepMultusFailurePolicy, "rke2-multus failurePolicy is %q", hcc.Spec.FailurePolicy)
	}
	oc := &harvesterv1beta1.Setting{}
	if get(client.ObjectKey{Name: cluster.OvercommitConfigSetting}, oc); fromV17 && oc.Value != oc.Default {
		bad(clusterupgrade.StepPreserveOvercommit, "overcommit-config value %q, default %q", oc.Value, oc.Default)
	}
	c.w.mu.Lock()
	paused, stale, calls, redeploys := c.w.pausedAtRancher, c.w.staleAtRancher, c.w.rancherCalls, c.w.agentRedeploys
	kvAtSync, lhAtMon, addonRedeploys, overlap := c.w.kubeVirtAtRegistrySync, c.w.longhornAtMonitoring, maps(c.w.addonRedeploy), slices.Clone(c.w.addonOverlap)
	c.w.mu.Unlock()
	for _, name := range []string{cluster.HarvesterManagedChart, cluster.HarvesterCRDManagedChart, cluster.MonitoringCRDManagedChart, cluster.LoggingCRDManagedChart} {
		if !slices.Contains(paused, name) {
			bad(clusterupgrade.StepPauseCharts, "chart %s was not paused while Rancher was upgraded (paused: %v)", name, paused)
		}
	}
	mgmt := &managementv3.Cluster{}
	get(client.ObjectKey{Name: cluster.LocalClusterName}, mgmt)
	if mgmt.Annotations[cluster.AnnotationImportedVersionManagement] != "false" {
		bad(clusterupgrade.StepDisableVersionManagement, "annotations %v", mgmt.Annotations)
	}
	tls := &managementv3.Setting{}
	if get(client.ObjectKey{Name: cluster.TLSInternalCNAllowedServicesSetting}, tls); !fromV17 && tls.Value != cluster.TLSInternalCNAllowedServices {
		bad(clusterupgrade.StepTLSInternalCN, "tls-internal-cn-allowed-services is %q", tls.Value)
	}
	if !fromV17 && mgmt.Annotations[cluster.AnnotationProvisioningAdministrated] != "true" {
		bad(clusterupgrade.StepProvisioningAdministrated, "annotations %v", mgmt.Annotations)
	}
	sv := &managementv3.Setting{}
	get(client.ObjectKey{Name: cluster.RancherServerVersionSetting}, sv)
	if calls != 1 || sv.Value != rel.Rancher || len(stale) > 0 {
		bad(clusterupgrade.StepRancher, "Rancher upgraded %d times, reports %s; the new Rancher found %v still there", calls, sv.Value, stale)
	}
	if fromV17 && get(client.ObjectKey{Name: cluster.LegacyCAPIMutatingWebhook}, &admissionregistrationv1.MutatingWebhookConfiguration{}) {
		bad(clusterupgrade.StepRancher, "the legacy CAPI webhook configurations are still there")
	}
	if !get(client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.STVAggregationSecret}, &corev1.Secret{}) {
		bad(clusterupgrade.StepRancherDependencies, "Secret stv-aggregation does not exist")
	}
	fc := &fleetv1alpha1.Cluster{}
	get(client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, fc)
	if redeploys != 1 || fc.Spec.RedeployAgentGeneration != 5 {
		bad(clusterupgrade.StepRedeployFleetAgent, "Fleet redeployed its agent %d times, redeployAgentGeneration %d", redeploys, fc.Spec.RedeployAgentGeneration)
	}
	fcm := &corev1.ConfigMap{}
	get(client.ObjectKey{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerConfigMap}, fcm)
	if !strings.Contains(fcm.Data[cluster.FleetControllerConfigKey], "apiServerURL: https://10.0.0.10:6443") {
		bad(clusterupgrade.StepWaitFleet, "fleet-controller's apiServerURL was not restored: %q", fcm.Data[cluster.FleetControllerConfigKey])
	}
	local := &provisioningv1.Cluster{}
	get(client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, local)
	if local.Labels[cluster.LabelManagementClusterName] != "local" || local.Status.FleetWorkspaceName != cluster.FleetLocalNamespace {
		bad(clusterupgrade.StepPatchLocalCluster, "labels %v, fleetWorkspaceName %q", local.Labels, local.Status.FleetWorkspaceName)
	}
	repoDep := &appsv1.Deployment{}
	get(client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.HarvesterClusterRepoDeployment}, repoDep)
	cr := &catalogv1.ClusterRepo{}
	get(client.ObjectKey{Name: cluster.HarvesterChartsRepo}, cr)
	if img := repoDep.Spec.Template.Spec.Containers[0].Image; img != "rancher/harvester-cluster-repo:"+rel.OSVersion() ||
		cr.Spec.ForceUpdate == nil || cr.Status.DownloadTime.Before(cr.Spec.ForceUpdate) {
		bad(clusterupgrade.StepClusterRepo, "image %s, forceUpdate %v, downloaded %v", img, cr.Spec.ForceUpdate, cr.Status.DownloadTime)
	}
	ing := &networkingv1.Ingress{}
	if get(client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.RancherExposeIngress}, ing); ptr.Deref(ing.Spec.IngressClassName, "") != "nginx" {
		bad(clusterupgrade.StepIngressClass, "ingressClassName %v", ptr.Deref(ing.Spec.IngressClassName, ""))
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if get(client.ObjectKey{Name: testCRD}, crd); crd.Annotations["test.harvesterhci.io/plan"] != c.u.Plan {
		bad(clusterupgrade.StepApplyCRDs, "CRD %s was not applied by this upgrade (annotations %v)", testCRD, crd.Annotations)
	}
	if get(client.ObjectKey{Namespace: cluster.KubeSystemNamespace, Name: "not-a-crd"}, &corev1.ConfigMap{}) {
		bad(clusterupgrade.StepApplyCRDs, "a ConfigMap of the CRDs directory was applied")
	}
	if mc := getChartNoFail(ctx, cluster.HarvesterCRDManagedChart); mc.Spec.Version != rel.HarvesterChart || mc.Spec.Paused {
		bad(clusterupgrade.StepHarvesterCRDChart, "version %s, paused %v", mc.Spec.Version, mc.Spec.Paused)
	}
	h := getChartNoFail(ctx, cluster.HarvesterManagedChart)
	var values map[string]any
	if h.Spec.Values != nil {
		_ = json.Unmarshal(h.Spec.Values.Raw, &values)
	}
	lh, _ := values["longhorn"].(map[string]any)
	ds, _ := lh["defaultSettings"].(map[string]any)
	if h.Spec.Version != rel.HarvesterChart || h.Spec.Paused || h.Spec.TimeoutSeconds != 601 || h.Annotations[cluster.AnnotationLastUpgradeName] != c.u.Plan ||
		ds["nodeDrainPolicy"] != cluster.LonghornNodeDrainPolicyHarvester || values["kubevirt"] == nil {
		bad(clusterupgrade.StepHarvesterChart, "version %s, paused %v, timeout %d, annotations %v, values %v", h.Spec.Version, h.Spec.Paused, h.Spec.TimeoutSeconds, h.Annotations, values)
	}
	if kvAtSync == nil || !*kvAtSync {
		bad(clusterupgrade.StepKubeVirt, "the upgrade went on before KubeVirt ran the release")
	}
	reg := &harvesterv1beta1.Setting{}
	if get(client.ObjectKey{Name: cluster.ContainerdRegistrySetting}, reg); reg.Annotations[cluster.AnnotationUpgradePatched] != rel.Harvester {
		bad(clusterupgrade.StepSyncContainerdRegistry, "annotations %v", reg.Annotations)
	}
	if lhAtMon == nil || !*lhAtMon {
		bad(clusterupgrade.StepLonghorn, "the upgrade went on before Longhorn ran the release")
	}
	for name, version := range map[string]string{cluster.MonitoringCRDManagedChart: rel.MonitoringChart, cluster.LoggingCRDManagedChart: rel.LoggingChart} {
		if mc := getChartNoFail(ctx, name); mc.Spec.Version != version || mc.Spec.Paused {
			bad(clusterupgrade.StepMonitoringLogging, "chart %s: version %s, paused %v", name, mc.Spec.Version, mc.Spec.Paused)
		}
	}
	marker := &corev1.ConfigMap{}
	if get(client.ObjectKey{Namespace: cluster.KubeSystemNamespace, Name: "from-" + c.w.previous}, marker); marker.Data["plan"] != c.u.Plan {
		bad(clusterupgrade.StepVersionedManifests, "the manifests of %s were not applied", c.w.previous)
	}
	for _, p := range append(c.addonProblems(ctx, addonRedeploys), overlap...) {
		bad(clusterupgrade.StepAddons, "%s", p)
	}
	if mc := getChartNoFail(ctx, cluster.LoggingManagedChart); mc.Spec.Paused {
		bad(clusterupgrade.StepResumeCharts, "chart %s, which the upgrade paused, is still paused", cluster.LoggingManagedChart)
	}
	if mc := getChartNoFail(ctx, cluster.MonitoringManagedChart); !mc.Spec.Paused {
		bad(clusterupgrade.StepResumeCharts, "chart %s, which an operator paused, was resumed", cluster.MonitoringManagedChart)
	}
	if !c.bundlesReady {
		bad(clusterupgrade.StepFleetBundles, "the Job returned before Fleet's bundles were ready")
	}
	if !fromV17 && !get(client.ObjectKey{Namespace: cluster.KubeSystemNamespace, Name: cluster.RKE2TraefikChartConfig}, &helmv1.HelmChartConfig{}) {
		bad(clusterupgrade.StepTraefikConfig, "HelmChartConfig rke2-traefik does not exist")
	}
	return out
}

func (c upgraded) addonProblems(ctx context.Context, redeploys map[string]int) []string {
	rel := c.w.rel
	var out []string
	addon := func(ns, name string) *harvesterv1beta1.Addon {
		a := &harvesterv1beta1.Addon{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, a); err != nil {
			out = append(out, fmt.Sprintf("Addon %s/%s: %v", ns, name, err))
		}
		return a
	}
	mon := addon(cluster.MonitoringNamespace, cluster.MonitoringAddon)
	if mon.Spec.Version != rel.MonitoringChart || !strings.Contains(mon.Spec.ValuesContent, "metricLabelsAllowlist") ||
		!strings.Contains(mon.Spec.ValuesContent, "size: 2Gi") || redeploys[cluster.MonitoringNamespace+"/"+cluster.MonitoringAddon] != 1 {
		out = append(out, fmt.Sprintf("rancher-monitoring: version %s, values %q, redeployed %d times", mon.Spec.Version, mon.Spec.ValuesContent, redeploys[cluster.MonitoringNamespace+"/"+cluster.MonitoringAddon]))
	}
	if lg := addon(cluster.LoggingNamespace, cluster.LoggingAddon); lg.Spec.Version != rel.LoggingChart || !strings.Contains(lg.Spec.ValuesContent, "image: "+rel.LoggingChartHarvesterEventRouter) {
		out = append(out, fmt.Sprintf("rancher-logging: version %s, values %q", lg.Spec.Version, lg.Spec.ValuesContent))
	}
	if pci := addon(cluster.HarvesterNamespace, "pcidevices-controller"); pci.Spec.Version != "0.7.0" || redeploys[cluster.HarvesterNamespace+"/pcidevices-controller"] != 1 {
		out = append(out, fmt.Sprintf("pcidevices-controller: version %s, redeployed %d times", pci.Spec.Version, redeploys[cluster.HarvesterNamespace+"/pcidevices-controller"]))
	}
	if vm := addon(cluster.HarvesterNamespace, "vm-import-controller"); vm.Spec.Version != "1.8.0" {
		out = append(out, "vm-import-controller was not installed")
	}
	if nv := addon(cluster.HarvesterNamespace, cluster.NvidiaDriverToolkitAddon); nv.Spec.Version != "0.2.0" || nv.Spec.ValuesContent != "driverLocation: http://10.0.0.5/NVIDIA.run\n" {
		out = append(out, fmt.Sprintf("nvidia-driver-toolkit: version %s, values %q", nv.Spec.Version, nv.Spec.ValuesContent))
	}
	if ovn := addon(cluster.KubeSystemNamespace, cluster.KubeOVNAddon); ovn.Spec.Version != "1.15.0" || getChartNoFail(ctx, cluster.KubeOVNCRDManagedChart).Spec.Version != "1.15.0" {
		out = append(out, "kube-ovn's CRD chart or add-on is not at 1.15.0")
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "rancher-vcluster", Name: "rancher-vcluster"}, &harvesterv1beta1.Addon{}); !apierrors.IsNotFound(err) {
		out = append(out, fmt.Sprintf("the rancher-vcluster add-on, which the upgrade does not own, was touched: %v", err))
	}
	return out
}

func getChartNoFail(ctx context.Context, name string) *managementv3.ManagedChart {
	mc := &managementv3.ManagedChart{}
	_ = env.Client.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc)
	return mc
}

func maps(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// run runs the upgrade and notes whether Fleet's bundles were ready when
// it returned.
func run(ctx context.Context, w *world, u *clusterupgrade.Upgrade) (upgraded, error) {
	err := u.Run(ctx)
	left, lerr := cluster.BundlesNotReady(context.Background(), env.Client)
	return upgraded{w: w, u: u, bundlesReady: lerr == nil && len(left) == 0}, err
}

func TestClusterUpgrade(t *testing.T) {
	ctx := t.Context()
	w, u := setup(t, "v1.7.1")
	got, err := run(ctx, w, u)
	if err != nil {
		t.Fatal(err)
	}
	if done := progress(t, u.Plan); !slices.Equal(done, clusterupgrade.StepIDs()) {
		t.Errorf("done %v, want %v", done, clusterupgrade.StepIDs())
	}
	for step, problems := range got.problems(ctx) {
		t.Errorf("step %s: %s", step, strings.Join(problems, "; "))
	}
	// A finished upgrade run again does nothing but read.
	if err := u.Run(ctx); err != nil || w.rancherCalls != 1 {
		t.Errorf("a second run: %v, Rancher upgraded %d times", err, w.rancherCalls)
	}
}

// TestStepsFailWhenSkipped runs the upgrade once per step with that step
// recorded as done beforehand, as if it were missing from the Job: the
// checks of TestClusterUpgrade must then name that step. Steps of one path
// run on a world of that path.
func TestStepsFailWhenSkipped(t *testing.T) {
	fromV18 := map[string]bool{clusterupgrade.StepTLSInternalCN: true, clusterupgrade.StepProvisioningAdministrated: true, clusterupgrade.StepTraefikConfig: true}
	for _, step := range clusterupgrade.StepIDs() {
		if step == clusterupgrade.StepCheckLocalRKEState {
			continue // a check without an effect: TestCheckLocalRKEState
		}
		t.Run(step, func(t *testing.T) {
			ctx := t.Context()
			previous := "v1.7.1"
			if fromV18[step] {
				previous = "v1.8.0"
			}
			w, u := setup(t, previous)
			u.Timeouts.KubeVirt, u.Timeouts.Longhorn = longhornLag+4*time.Second, longhornLag+4*time.Second
			skip(t, u.Plan, step)
			got, err := run(ctx, w, u)
			if err != nil {
				// Without the step, a later one cannot finish: the
				// upgrade fails, which TestClusterUpgrade would too.
				t.Logf("the upgrade without step %s fails: %v", step, err)
				return
			}
			problems := got.problems(ctx)
			if len(problems[step]) == 0 {
				t.Errorf("the checks do not notice that step %s did not run (they found: %v)", step, problems)
			}
			for other, p := range problems {
				if other != step {
					t.Logf("also missing, after step %s was skipped: %s %v", step, other, p)
				}
			}
		})
	}
}

// skip records a step as done before the upgrade runs.
func skip(t *testing.T, plan, step string) {
	t.Helper()
	must(t, env.Client.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeProgress(plan)},
		Data:       map[string]string{"done": step},
	}))
}

// TestClusterUpgradeKilledAfterEveryStep kills the Job right after each step
// in turn and starts it again, as a restarted pod: every run resumes, and
// the upgrade ends with each step done once and each effect made once.
func TestClusterUpgradeKilledAfterEveryStep(t *testing.T) {
	w, u := setup(t, "v1.7.1")
	steps := clusterupgrade.StepIDs()
	var got upgraded
	for i, kill := range steps {
		ctx, cancel := context.WithCancel(t.Context())
		u.OnStepDone = func(step string) {
			if step == kill {
				cancel()
			}
		}
		var err error
		got, err = run(ctx, w, u)
		cancel()
		switch {
		case i < len(steps)-1 && !errors.Is(err, context.Canceled):
			t.Fatalf("killed after %s: err = %v, want the run to stop", kill, err)
		case i == len(steps)-1 && err != nil:
			t.Fatalf("the last run: %v", err)
		}
		if done := progress(t, u.Plan); !slices.Equal(done, steps[:i+1]) {
			t.Fatalf("done %v after the run killed after %s, want %v", done, kill, steps[:i+1])
		}
	}
	for step, problems := range got.problems(t.Context()) {
		t.Errorf("step %s: %s", step, strings.Join(problems, "; "))
	}
	for name, timeout := range map[string]int{cluster.HarvesterManagedChart: 601, cluster.HarvesterCRDManagedChart: 601, cluster.MonitoringCRDManagedChart: 601} {
		if got := getChart(t, name).Spec.TimeoutSeconds; got != timeout {
			t.Errorf("chart %s has timeoutSeconds %d, want %d: changed more than once", name, got, timeout)
		}
	}
	t.Log(w)
}

// TestClusterUpgradeResumesAfterBeingKilled stops the upgrade while Fleet
// deploys the Harvester chart, then runs it again as a restarted pod would:
// it skips the finished steps (Rancher is upgraded once), changes the chart
// the same way and completes.
func TestClusterUpgradeResumesAfterBeingKilled(t *testing.T) {
	w, u := setup(t, "v1.7.1")
	w.block(cluster.HarvesterManagedChart, true)
	ctx, kill := context.WithCancel(t.Context())
	go func() {
		jobtest.Eventually(t, 20*time.Second, "the harvester chart to be upgraded", func() bool {
			return getChartNoFail(context.Background(), cluster.HarvesterManagedChart).Spec.Version == w.rel.HarvesterChart
		})
		kill()
	}()
	err := u.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the killed run to stop", err)
	}
	if !strings.Contains(err.Error(), clusterupgrade.StepHarvesterChart) {
		t.Errorf("message %q does not name the step", err)
	}
	if !getChart(t, cluster.LoggingCRDManagedChart).Spec.Paused {
		t.Fatal("the logging CRD chart is not paused while the upgrade is under way")
	}
	w.block(cluster.HarvesterManagedChart, false)
	got, err := run(t.Context(), w, u)
	if err != nil {
		t.Fatal(err)
	}
	if done := progress(t, u.Plan); !slices.Equal(done, clusterupgrade.StepIDs()) {
		t.Errorf("done %v, want %v", done, clusterupgrade.StepIDs())
	}
	for step, problems := range got.problems(t.Context()) {
		t.Errorf("step %s: %s", step, strings.Join(problems, "; "))
	}
}

func TestClusterUpgradeGivesUpOnFleet(t *testing.T) {
	w, u := setup(t, "v1.7.1")
	w.block(cluster.HarvesterCRDManagedChart, true)
	u.Timeouts.Charts = 500 * time.Millisecond
	err := u.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "Fleet to deploy ManagedChart fleet-local/harvester-crd") ||
		!strings.Contains(err.Error(), "kubectl -n fleet-local get managedchart harvester-crd") || !strings.Contains(err.Error(), "WaitApplied") {
		t.Errorf("err = %v, want a timeout that names the chart, its state and where to look", err)
	}
}

// TestCheckLocalRKEState: an RKE state Secret of the type older Ranchers
// used stops the upgrade before the charts change, with what to do; the
// upgrade would go on without the step.
func TestCheckLocalRKEState(t *testing.T) {
	for _, skipped := range []bool{false, true} {
		t.Run(fmt.Sprintf("skipped=%v", skipped), func(t *testing.T) {
			_, u := setup(t, "v1.7.1")
			s := &corev1.Secret{}
			must(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalRKEStateSecret}, s))
			must(t, env.Client.Delete(t.Context(), s))
			must(t, env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}, Type: corev1.SecretTypeOpaque, Data: s.Data}))
			if skipped {
				skip(t, u.Plan, clusterupgrade.StepCheckLocalRKEState)
			}
			err := u.Run(t.Context())
			refused := err != nil && strings.Contains(err.Error(), clusterupgrade.StepCheckLocalRKEState) && strings.Contains(err.Error(), "Opaque")
			if refused == skipped {
				t.Errorf("skipped %v: err = %v", skipped, err)
			}
			if !skipped && getChart(t, cluster.HarvesterManagedChart).Spec.Version != "1.7.1" {
				t.Error("the Harvester chart was upgraded on a cluster the upgrade refused")
			}
		})
	}
}

// TestAddonWaitWaitsForHarvester: the Addon wait does not end on the old
// AddonDeploySuccessful, only once Harvester has redeployed the add-on.
func TestAddonWaitWaitsForHarvester(t *testing.T) {
	w, u := setup(t, "v1.7.1")
	// Harvester's add-on controller is slow to react to pcidevices-controller:
	// its status says AddonDeploySuccessful all that time.
	w.mu.Lock()
	w.addonSlow[cluster.HarvesterNamespace+"/pcidevices-controller"] = 10
	w.mu.Unlock()
	u.Timeouts.Addon = 20 * time.Second
	got, err := run(t.Context(), w, u)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.problems(t.Context())[clusterupgrade.StepAddons]; len(p) > 0 {
		t.Errorf("add-ons: %v", p)
	}
}

// TestVersionedStepsOnTheirPaths: the per-version steps run on their paths
// only.
func TestVersionedStepsOnTheirPaths(t *testing.T) {
	_, u := setup(t, "v1.7.1")
	if err := u.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := env.Client.Get(ctx, client.ObjectKey{Name: cluster.TLSInternalCNAllowedServicesSetting}, &managementv3.Setting{}); !apierrors.IsNotFound(err) {
		t.Errorf("tls-internal-cn-allowed-services on an upgrade from v1.7: %v", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: cluster.KubeSystemNamespace, Name: cluster.RKE2TraefikChartConfig}, &helmv1.HelmChartConfig{}); !apierrors.IsNotFound(err) {
		t.Errorf("rke2-traefik's configuration on an upgrade from v1.7: %v", err)
	}
}

// TestRefusesAnUnsupportedPath: a Job started by hand on a cluster older
// than the toolkit supports changes nothing.
func TestRefusesAnUnsupportedPath(t *testing.T) {
	_, u := setup(t, "v1.6.1")
	err := u.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "upgrades from v1.7.0 or newer") || !strings.Contains(err.Error(), "Longhorn") {
		t.Errorf("err = %v, want a refusal that names the oldest release and what older paths need", err)
	}
	if getChart(t, cluster.HarvesterManagedChart).Spec.Paused {
		t.Error("the refused upgrade paused the charts")
	}
}

// TestWorldLags guards the world itself: KubeVirt must roll before
// Longhorn.
func TestWorldLags(t *testing.T) {
	if kubeVirtLag >= longhornLag {
		t.Fatalf("KubeVirt's lag %s must be shorter than Longhorn's %s for TestStepsFailWhenSkipped/wait-longhorn", kubeVirtLag, longhornLag)
	}
}

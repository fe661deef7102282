package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
)

// The components the cluster upgrade changes, as a running cluster has
// them: Rancher and what comes with it (its Deployments, Helm releases,
// chart repositories and settings), Fleet (its controller, agent and the
// fleet Cluster), the CAPI Cluster, the ManagedCharts besides harvester,
// Longhorn's manager and instance managers, Harvester's settings and
// add-ons, Rancher's ingress. The actors that make them react live in
// rancherchart.go, fleet.go and addons.go.

// Versions of the components before and after the upgrade that the
// release metadata does not name: Longhorn's (the harvester chart's
// values), Fleet's and the webhook's before, and the CRD charts' before.
const (
	longhornFromTag           = "v1.10.1"
	longhornToTag             = "v1.11.0"
	longhornManagerRepo       = "longhornio/longhorn-manager"
	longhornInstanceMgrRepo   = "longhornio/longhorn-instance-manager"
	fleetFromChart            = "107.0.0+up0.13.0"
	fleetFromApp              = "0.13.0"
	webhookFromChart          = "107.0.0+up0.8.0"
	webhookFromApp            = "0.8.0"
	monitoringCRDFromChart    = "107.0.0+up69.8.2"
	loggingCRDFromChart       = "107.0.0+up4.10.0"
	fleetAPIServerURL         = "https://10.53.0.10:6443"
	overcommitDefault         = `{"cpu":1600,"memory":150,"storage":200}`
	eventRouterFromImage      = "rancher/harvester-eventrouter:v1.7.1"
	labelFleetAgentGeneration = "sim.upgrade-toolkit.harvesterhci.io/agent-generation"
)

// harvesterValues are the harvester chart's default values that the cluster
// upgrade reads back from its Helm release: Longhorn's images of a tag.
func harvesterValues(longhornTag string) map[string]any {
	image := func(repo string) map[string]any { return map[string]any{"repository": repo, "tag": longhornTag} }
	return map[string]any{"longhorn": map[string]any{"image": map[string]any{"longhorn": map[string]any{
		"manager": image(longhornManagerRepo), "instanceManager": image(longhornInstanceMgrRepo),
	}}}}
}

// componentObjects are the objects of the components, at the versions the
// cluster runs.
func (s *Sim) componentObjects() []statusObject {
	c := s.cfg
	chartFrom := strings.TrimPrefix(c.From.Harvester, "v")
	now := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	deployment := func(ns, name, container, image string) statusObject {
		labels := map[string]string{"app": name}
		return statusObject{obj: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: image}}}}}}}
	}
	repo := func(name string) statusObject {
		return statusObject{obj: &catalogv1.ClusterRepo{ObjectMeta: metav1.ObjectMeta{Name: name}},
			status: func(o client.Object) { o.(*catalogv1.ClusterRepo).Status.DownloadTime = now }}
	}
	addon := func(ns, name, chart, version string, enabled bool, values string) statusObject {
		return statusObject{obj: &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: harvesterv1beta1.AddonSpec{Repo: "http://harvester-cluster-repo.cattle-system.svc/charts", Chart: chart, Version: version, Enabled: enabled, ValuesContent: values}},
			status: func(o client.Object) {
				if enabled {
					o.(*harvesterv1beta1.Addon).Status.Status = cluster.AddonStateDeployed
				}
			}}
	}
	objs := []statusObject{
		deployment(cluster.CattleNamespace, cluster.RancherDeployment, "rancher", "rancher/rancher:"+c.From.Rancher),
		deployment(cluster.CattleNamespace, cluster.RancherWebhookDeployment, "rancher-webhook", "rancher/rancher-webhook:v"+webhookFromApp),
		deployment(cluster.CattleNamespace, cluster.HarvesterClusterRepoDeployment, cluster.HarvesterClusterRepoContainer, cluster.HarvesterClusterRepoImage+":"+c.From.Harvester),
		deployment(cluster.FleetSystemNamespace, cluster.FleetControllerDeployment, "fleet-controller", "rancher/fleet:v"+fleetFromApp),
		s.fleetAgent(1, fleetFromApp),
		{obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerConfigMap},
			Data: map[string]string{cluster.FleetControllerConfigKey: fmt.Sprintf("agentTLSMode: system-store\napiServerCA: sim-ca\napiServerURL: %s\n", fleetAPIServerURL)}}},
		{obj: &managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherServerVersionSetting}, Value: c.From.Rancher}},
		{obj: &managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ChartDefaultBranchSetting}, Value: "release-" + rancherMinor(c.From.Rancher)}},
		{obj: &managementv3.Cluster{ObjectMeta: metav1.ObjectMeta{Name: cluster.LocalClusterName}}},
		{obj: &capiv1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}},
			status: func(o client.Object) {
				cl := o.(*capiv1beta1.Cluster)
				cl.Status = capiv1beta1.ClusterStatus{Phase: cluster.CAPIClusterPhaseProvisioned, ObservedGeneration: cl.Generation}
			}},
		{obj: &fleetv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
			Spec: fleetv1alpha1.ClusterSpec{RedeployAgentGeneration: 1}},
			status: func(o client.Object) {
				o.(*fleetv1alpha1.Cluster).Status = fleetv1alpha1.ClusterStatus{AgentDeployedGeneration: ptr.To[int64](1), AgentTLSMode: "system-store",
					Conditions: []common.Condition{{Type: cluster.ConditionImported, Status: "True", LastUpdateTime: wranglerNow()}, readyTrue()}}
			}},
		repo(cluster.HarvesterChartsRepo), repo(cluster.RancherChartsRepo), repo(cluster.RancherRKE2ChartsRepo), repo(cluster.RancherPartnerChartsRepo),
		s.managedChart(cluster.HarvesterCRDManagedChart, chartFrom, cluster.HarvesterNamespace, nil),
		s.managedChart(cluster.MonitoringCRDManagedChart, monitoringCRDFromChart, cluster.MonitoringNamespace, nil),
		s.managedChart(cluster.LoggingCRDManagedChart, loggingCRDFromChart, cluster.LoggingNamespace, nil),
		{obj: &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.OvercommitConfigSetting}, Default: overcommitDefault}},
		{obj: &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ContainerdRegistrySetting}}},
		addon(cluster.MonitoringNamespace, cluster.MonitoringAddon, "rancher-monitoring", monitoringCRDFromChart, true, "grafana:\n  persistence:\n    size: 2Gi\n"),
		addon(cluster.LoggingNamespace, cluster.LoggingAddon, "rancher-logging", loggingCRDFromChart, false,
			"eventTailer:\n  workloadOverrides:\n    containers:\n    - image: "+eventRouterFromImage+"\n"),
		addon(cluster.HarvesterNamespace, "pcidevices-controller", "harvester-pcidevices-controller", "0.6.0", true, ""),
		{obj: &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: cluster.DefaultIngressClassName, Annotations: map[string]string{cluster.AnnotationDefaultIngressClass: "true"}},
			Spec: networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}}},
		{obj: &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: cluster.RancherExposeIngress},
			Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "rancher", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}},
		{obj: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalRKEStateSecret},
			Type: cluster.LocalRKEStateSecretType, Data: map[string][]byte{"state": []byte("{}")}}},
		{obj: &longhornv1beta2.Setting{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornNodeDrainPolicy}, Value: cluster.LonghornNodeDrainPolicyDefault},
			status: func(o client.Object) { o.(*longhornv1beta2.Setting).Status.Applied = true }},
		{obj: &longhornv1beta2.Setting{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornDetachWhenCordoned}, Value: cluster.LonghornDetachWhenCordonedDefault},
			status: func(o client.Object) { o.(*longhornv1beta2.Setting).Status.Applied = true }},
		s.longhornManager(),
	}
	for _, n := range c.nodeNames() {
		objs = append(objs, statusObject{obj: &longhornv1beta2.Node{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: n}}},
			instanceManager(n, longhornInstanceMgrRepo+":"+longhornFromTag))
	}
	return objs
}

// helmReleases are the Helm releases of the running components.
func (s *Sim) helmReleases() []*cluster.HelmRelease {
	c := s.cfg
	rel := func(ns, name string, rev int, chart, app string, values map[string]any) *cluster.HelmRelease {
		return &cluster.HelmRelease{Name: name, Namespace: ns, Revision: rev, Info: cluster.HelmReleaseInfo{Status: cluster.HelmStatusDeployed, LastDeployed: time.Now()},
			Chart: cluster.HelmChart{Metadata: cluster.HelmChartMetadata{Name: name, Version: chart, AppVersion: app}, Values: values}}
	}
	return []*cluster.HelmRelease{
		rel(cluster.HarvesterNamespace, cluster.HarvesterRelease, 1, strings.TrimPrefix(c.From.Harvester, "v"), c.From.Harvester, harvesterValues(longhornFromTag)),
		rel(cluster.CattleNamespace, cluster.RancherRelease, 1, strings.TrimPrefix(c.From.Rancher, "v"), c.From.Rancher, nil),
		rel(cluster.FleetSystemNamespace, cluster.FleetRelease, 1, fleetFromChart, fleetFromApp, nil),
		rel(cluster.FleetSystemNamespace, cluster.FleetCRDRelease, 1, fleetFromChart, fleetFromApp, nil),
		rel(cluster.CattleNamespace, cluster.RancherWebhookRelease, 1, webhookFromChart, webhookFromApp, nil),
	}
}

// createHelmReleases writes the Secrets of the running Helm releases.
func (s *Sim) createHelmReleases(ctx context.Context) error {
	for _, r := range s.helmReleases() {
		sec, err := cluster.HelmReleaseSecret(r)
		if err != nil {
			return err
		}
		if err := s.createWithStatus(ctx, statusObject{obj: sec}); err != nil {
			return err
		}
	}
	return nil
}

// rancherMinor is the release branch of a Rancher version: v2.12.3 → v2.12.
func rancherMinor(version string) string {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return version
	}
	return parts[0] + "." + parts[1]
}

// managedChart is a deployed ManagedChart of the cluster.
func (s *Sim) managedChart(name, version, namespace string, values map[string]any) statusObject {
	mc := &managementv3.ManagedChart{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: name},
		Spec: managementv3.ManagedChartSpec{Chart: name, RepoName: cluster.HarvesterChartsRepo, ReleaseName: name, Version: version,
			DefaultNamespace: namespace, TimeoutSeconds: 600},
	}
	if values != nil {
		mc.Spec.Values = rawValues(values)
	}
	return statusObject{obj: mc, status: func(o client.Object) {
		o.(*managementv3.ManagedChart).Status = deployedBundleStatus(1)
	}}
}

// fleetAgent is Fleet's agent Deployment of one agent generation, at the
// Fleet version (the app version, e.g. 0.13.0) that deploys it: Fleet's
// controller deploys its own version's agent image.
func (s *Sim) fleetAgent(generation int64, version string) statusObject {
	labels := map[string]string{"app": cluster.FleetAgentDeployment}
	return statusObject{obj: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalSystemNamespace, Name: cluster.FleetAgentDeployment,
		Labels: map[string]string{labelFleetAgentGeneration: fmt.Sprint(generation)}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "fleet-agent", Image: "rancher/fleet-agent:v" + version}}}}}}}
}

// longhornManager is Longhorn's manager DaemonSet.
func (s *Sim) longhornManager() statusObject {
	labels := map[string]string{"app": cluster.LonghornManagerDaemonSet}
	return statusObject{obj: &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornManagerDaemonSet},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "longhorn-manager", Image: longhornManagerRepo + ":" + longhornFromTag}}}}}}}
}

// instanceManager is the running aio instance manager of a node and image,
// labelled as Longhorn labels it.
func instanceManager(node, image string) statusObject {
	label := clusterupgrade.InstanceManagerImageLabel(image)
	return statusObject{obj: &longhornv1beta2.InstanceManager{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace,
		Name: "instance-manager-" + label[len(cluster.LonghornInstanceManagerImagePref):] + "-" + node,
		Labels: map[string]string{cluster.LabelLonghornNode: node, cluster.LabelInstanceManagerType: cluster.InstanceManagerTypeAIO,
			cluster.LabelInstanceManagerDataEngine: cluster.LonghornDataEngineV1, cluster.LabelInstanceManagerImage: label}},
		Spec: longhornv1beta2.InstanceManagerSpec{Image: image, NodeID: node}},
		status: func(o client.Object) {
			o.(*longhornv1beta2.InstanceManager).Status.CurrentState = cluster.InstanceManagerStateRunning
		}}
}

// deployedBundleStatus is the status of a Bundle (and its ManagedChart)
// deployed at a generation.
func deployedBundleStatus(generation int64) fleetv1alpha1.BundleStatus {
	return fleetv1alpha1.BundleStatus{ObservedGeneration: generation, Conditions: []common.Condition{readyTrue()},
		Summary: fleetv1alpha1.BundleSummary{Ready: 1, DesiredReady: 1}, Display: fleetv1alpha1.BundleDisplay{ReadyClusters: "1/1"}}
}

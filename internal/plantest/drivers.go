package plantest

import (
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// Harvester creates a Harvester cluster of n nodes with what the node
// upgrade touches: Rancher's provisioning Cluster, a CAPI Machine and a
// machine-plan Secret per node, the Longhorn setting, the descheduler Addon,
// KubeVirt and the harvester ManagedChart.
func (h *Harness) Harvester(n int) []string {
	h.T.Helper()
	nodes := h.Cluster(n)
	create := func(obj client.Object) { h.T.Helper(); h.Must(h.C.Create(h.Ctx(), obj)) }
	create(&provisioningv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
		Spec: provisioningv1.ClusterSpec{KubernetesVersion: "v1.34.4+rke2r1", RKEConfig: &provisioningv1.RKEConfig{
			ProvisionGeneration: 4,
			UpgradeStrategy:     &provisioningv1.ClusterUpgradeStrategy{ControlPlaneConcurrency: "10%", WorkerConcurrency: "10%"},
		}},
	})
	for _, node := range nodes {
		m := &capiv1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "custom-" + node},
			Spec: capiv1beta1.MachineSpec{ClusterName: cluster.LocalClusterName, Bootstrap: capiv1beta1.Bootstrap{DataSecretName: ptr.To("custom-" + node)},
				InfrastructureRef: corev1.ObjectReference{APIVersion: "rke.cattle.io/v1", Kind: "CustomMachine", Name: "custom-" + node}}}
		create(m)
		m.Status = capiv1beta1.MachineStatus{Phase: "Running", NodeRef: &corev1.ObjectReference{Kind: "Node", Name: node}}
		h.Must(h.C.Status().Update(h.Ctx(), m))
		create(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: m.Name + "-machine-plan",
				Labels: map[string]string{cluster.LabelMachineName: m.Name}},
			Type: cluster.MachinePlanSecretType,
			Data: map[string][]byte{"plan": MachinePlanData(node)},
		})
	}
	create(&longhornv1beta2.Setting{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace,
		Name: cluster.LonghornReplicaReplenishmentWaitInterval}, Value: "600"})
	create(&harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.KubeSystemNamespace, Name: cluster.DeschedulerAddon},
		Spec: harvesterv1beta1.AddonSpec{Enabled: true, Repo: "http://harvester-cluster-repo.cattle-system.svc/charts", Chart: "descheduler", Version: "0.33.0", ValuesContent: "{}"}})
	create(&kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName},
		Spec: kubevirtv1.KubeVirtSpec{WorkloadUpdateStrategy: kubevirtv1.KubeVirtWorkloadUpdateStrategy{WorkloadUpdateMethods: []string{"LiveMigrate"}}}})
	create(&managementv3.ManagedChart{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart},
		Spec: managementv3.ManagedChartSpec{Chart: "harvester", Version: "1.7.1"}})
	h.ChartDeployed(cluster.HarvesterManagedChart)
	create(&managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherServerVersionSetting}, Value: "v2.13.1"})
	return nodes
}

// ChartDeployed plays Fleet deploying a ManagedChart's current spec.
func (h *Harness) ChartDeployed(name string) {
	h.T.Helper()
	mc := &managementv3.ManagedChart{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc))
	mc.Status = managementv3.ManagedChartStatus{ObservedGeneration: mc.Status.ObservedGeneration + 1, Conditions: []common.Condition{{Type: "Ready", Status: "True"}},
		Summary: fleetv1alpha1.BundleSummary{Ready: 1, DesiredReady: 1}}
	h.Must(h.C.Status().Update(h.Ctx(), mc))
}

// ChartDeploying plays Fleet rolling out a ManagedChart's change: its one
// deployment waits to be applied.
func (h *Harness) ChartDeploying(name string) {
	h.T.Helper()
	mc := &managementv3.ManagedChart{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc))
	mc.Status.Summary = fleetv1alpha1.BundleSummary{WaitApplied: 1, DesiredReady: 1}
	mc.Status.Unavailable = 1
	h.Must(h.C.Status().Update(h.Ctx(), mc))
}

// ClusterUpgraded plays the cluster-upgrade Job and what it changes: the
// Harvester chart at the release's version deployed by Fleet, Harvester and
// Rancher reporting the release's versions; then the Job succeeds.
func (h *Harness) ClusterUpgraded(plan string) {
	h.T.Helper()
	// The Job exists once the plan has done its own changes to the chart.
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeJob(plan)}, &batchv1.Job{})
	rel := h.Repo.Release
	h.UpgradeHarvesterChart()
	h.ChartDeployed(cluster.HarvesterManagedChart)
	h.SetSetting(&harvesterv1beta1.Setting{}, cluster.ServerVersionSetting, rel.Harvester)
	h.SetSetting(&managementv3.Setting{}, cluster.RancherServerVersionSetting, rel.Rancher)
	h.FinishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(plan), true)
}

// UpgradeHarvesterChart asks for the release's harvester chart, as the
// Cluster-upgrade Job does.
func (h *Harness) UpgradeHarvesterChart() {
	h.T.Helper()
	mc := &managementv3.ManagedChart{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart}, mc))
	mc.Spec.Version = h.Repo.Release.HarvesterChart
	h.Must(h.C.Update(h.Ctx(), mc))
}

// SetSetting sets the value of a Harvester or Rancher setting.
func (h *Harness) SetSetting(s client.Object, name, value string) {
	h.T.Helper()
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: name}, s))
	switch o := s.(type) {
	case *harvesterv1beta1.Setting:
		o.Value = value
	case *managementv3.Setting:
		o.Value = value
	}
	h.Must(h.C.Update(h.Ctx(), s))
}

// DeleteHarvester deletes the objects Harvester created.
func (h *Harness) DeleteHarvester() {
	ctx := h.Ctx()
	for _, d := range []struct {
		obj client.Object
		ns  string
	}{
		{&provisioningv1.Cluster{}, cluster.FleetLocalNamespace},
		{&capiv1beta1.Machine{}, cluster.FleetLocalNamespace},
		{&longhornv1beta2.Setting{}, cluster.LonghornNamespace},
		{&harvesterv1beta1.Addon{}, cluster.KubeSystemNamespace},
		{&kubevirtv1.KubeVirt{}, cluster.HarvesterNamespace},
		{&managementv3.ManagedChart{}, cluster.FleetLocalNamespace},
		{&managementv3.Setting{}, ""},
		{&corev1.ConfigMap{}, cluster.HarvesterNamespace},
	} {
		_ = h.C.DeleteAllOf(ctx, d.obj, client.InNamespace(d.ns))
	}
}

// ServeRepo makes the repo Deployment available and its Service reachable,
// as the Deployment and EndpointSlice controllers would.
func (h *Harness) ServeRepo(plan string) {
	h.T.Helper()
	dep := &appsv1.Deployment{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(plan)}, dep)
	r := ptr.Deref(dep.Spec.Replicas, 1)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: r, ReadyReplicas: r, AvailableReplicas: r, UpdatedReplicas: r}
	h.Must(h.C.Status().Update(h.Ctx(), dep))
	svc := &corev1.Service{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(plan)}, svc)
	h.Must(h.C.Create(h.Ctx(), &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.52.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](8080)}},
	}))
	h.T.Cleanup(func() {
		_ = h.C.DeleteAllOf(h.Ctx(), &discoveryv1.EndpointSlice{}, client.InNamespace(cluster.HarvesterNamespace))
	})
}

// SucJob creates the Job system-upgrade-controller would run for a Plan on a
// Node, with its labels, and returns its name.
func (h *Harness) SucJob(plan, node string) string {
	h.T.Helper()
	p := &upgradev1.Plan{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.CattleNamespace, Name: plan}, p)
	labels := map[string]string{cluster.LabelSUCPlan: plan, cluster.LabelSUCNode: node}
	for k, v := range p.Labels {
		labels[k] = v
	}
	name := names.Join("apply", plan, "on", node, "with", "hash")
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: name, Labels: labels},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "upgrade", Image: p.Spec.Upgrade.Image + ":" + p.Spec.Version}},
		}}},
	}
	h.Must(h.C.Create(h.Ctx(), j))
	return name
}

// Preload runs the image-preload Plan's Jobs on the nodes to success.
func (h *Harness) Preload(plan string, nodes []string) {
	h.T.Helper()
	for _, n := range nodes {
		h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImagePreloadPlan(plan), n), true)
	}
}

// DriveToNodeUpgrading plays the foreign components through the phases
// before NodeUpgrade.
func (h *Harness) DriveToNodeUpgrading(plan string, nodes []string) *v1beta1.UpgradePlan {
	h.T.Helper()
	h.WaitPhase(plan, v1beta1.PhaseISODownloading)
	h.SetImported(names.ISOImage(plan), "True", "", "")
	h.WaitPhase(plan, v1beta1.PhaseRepoCreating)
	h.ServeRepo(plan)
	h.WaitPhase(plan, v1beta1.PhaseImagePreloading)
	h.Preload(plan, nodes)
	h.WaitPhase(plan, v1beta1.PhaseClusterUpgrading)
	h.ClusterUpgraded(plan)
	return h.WaitPhase(plan, v1beta1.PhaseNodeUpgrading)
}

// MachinePlanData is what Rancher keeps in a node's machine-plan Secret,
// which the toolkit must never change.
func MachinePlanData(node string) []byte {
	return []byte(`{"files":[{"path":"/etc/rancher/rke2/config.yaml.d/50-rancher.yaml","content":"bm9kZS1uYW1lOiA="}],"node":"` + node + `"}`)
}

// MachinePlan returns a node's machine-plan Secret.
func (h *Harness) MachinePlan(node string) *corev1.Secret {
	h.T.Helper()
	s := &corev1.Secret{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: "custom-" + node + "-machine-plan"}, s))
	return s
}

// RancherAsks sets Rancher's drain-hook request (pre-drain or post-drain)
// on a node's machine-plan Secret and returns its value. Rancher asks for
// the post-drain hook once it upgraded RKE2 on the node.
func (h *Harness) RancherAsks(node, request string) string {
	h.T.Helper()
	if request == cluster.AnnotationRancherPostDrain {
		h.Rke2Upgraded(node)
	}
	s := h.MachinePlan(node)
	before := s.DeepCopy()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	v, _ := json.Marshal(map[string]any{"deleteEmptyDirData": true, "enabled": true, "force": true, "node": node, "at": time.Now().UnixNano()})
	s.Annotations[request] = string(v)
	h.Must(h.C.Patch(h.Ctx(), s, client.MergeFrom(before)))
	return string(v)
}

// WaitAck waits until the toolkit acknowledged a request with its hook.
func (h *Harness) WaitAck(node, ack, value string) {
	h.T.Helper()
	h.Eventually(fmt.Sprintf("%s of %s", ack, node), func() (bool, string) {
		s := h.MachinePlan(node)
		return s.Annotations[ack] == value, fmt.Sprintf("annotations %v", s.Annotations)
	})
}

// RancherDone clears the drain annotations of a node, as Rancher does once
// it uncordoned the node.
func (h *Harness) RancherDone(node string) {
	h.T.Helper()
	s := h.MachinePlan(node)
	before := s.DeepCopy()
	for _, k := range []string{cluster.AnnotationRancherPreDrain, cluster.AnnotationRancherPostDrain, v1beta1.AnnotationPreHook, v1beta1.AnnotationPostHook} {
		delete(s.Annotations, k)
	}
	h.Must(h.C.Patch(h.Ctx(), s, client.MergeFrom(before)))
}

// Reboot reports the node back from a reboot (a new boot ID) with an OS
// image, running the release's RKE2.
func (h *Harness) Reboot(node, osImage string) {
	h.T.Helper()
	n := &corev1.Node{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: node}, n))
	n.Status.NodeInfo.OSImage, n.Status.NodeInfo.BootID = osImage, string(uuid.NewUUID())
	n.Status.NodeInfo.KubeletVersion = h.Repo.Release.KubeletVersion()
	h.Must(h.C.Status().Update(h.Ctx(), n))
}

// Rke2Upgraded reports the node's kubelet at the release's version, as
// after Rancher upgraded RKE2 on it.
func (h *Harness) Rke2Upgraded(node string) {
	h.T.Helper()
	n := &corev1.Node{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: node}, n))
	n.Status.NodeInfo.KubeletVersion = h.Repo.Release.KubeletVersion()
	h.Must(h.C.Status().Update(h.Ctx(), n))
}

// WaitNodeState waits for a node's state in the plan.
func (h *Harness) WaitNodeState(plan, node string, state v1beta1.NodeUpgradeState) *v1beta1.UpgradePlan {
	h.T.Helper()
	var p *v1beta1.UpgradePlan
	h.Eventually(fmt.Sprintf("node %s in %s", node, state), func() (bool, string) {
		p = h.Get(plan)
		return p.Status.NodeUpgradeStatuses[node].State == state, Describe(p)
	})
	return p
}

// NodeJob waits for a node Job and returns it.
func (h *Harness) NodeJob(plan, jobType, node string) *batchv1.Job {
	h.T.Helper()
	j := &batchv1.Job{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(plan, jobType, node)}, j)
	return j
}

// UpgradeNode plays Rancher and the node Jobs for one node of a multi-node
// Cluster, from the pre-drain request to the node back in the new OS and
// Rancher done with it.
func (h *Harness) UpgradeNode(plan, node string) {
	h.T.Helper()
	pre := h.RancherAsks(node, cluster.AnnotationRancherPreDrain)
	h.WaitNodeState(plan, node, v1beta1.NodeStatePreDraining)
	h.FinishNode(plan, node, pre)
}

// FinishNode takes a node whose pre-drain Job runs (Rancher asked with
// pre) through the rest of its upgrade.
func (h *Harness) FinishNode(plan, node, pre string) {
	h.T.Helper()
	h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypePreDrain, node), true)
	h.WaitAck(node, v1beta1.AnnotationPreHook, pre)
	post := h.RancherAsks(node, cluster.AnnotationRancherPostDrain)
	h.WaitNodeState(plan, node, v1beta1.NodeStatePostDraining)
	h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypePostDrain, node), true)
	h.WaitNodeState(plan, node, v1beta1.NodeStateWaitingReboot)
	h.Reboot(node, h.Repo.Release.OS)
	h.WaitAck(node, v1beta1.AnnotationPostHook, post)
	h.RancherDone(node)
}

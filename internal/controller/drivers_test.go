package controller_test

import (
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/apimachinery/pkg/util/uuid"

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

// harvester creates a Harvester cluster of n nodes with what the node
// upgrade touches: Rancher's provisioning Cluster, a CAPI Machine and a
// machine-plan Secret per node, the Longhorn setting, the descheduler Addon,
// KubeVirt and the harvester ManagedChart.
func (h *harness) harvester(n int) []string {
	h.t.Helper()
	nodes := h.cluster(n)
	create := func(obj client.Object) { h.t.Helper(); h.must(h.c.Create(h.ctx(), obj)) }
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
		h.must(h.c.Status().Update(h.ctx(), m))
		create(&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: m.Name + "-machine-plan",
				Labels: map[string]string{cluster.LabelMachineName: m.Name}},
			Type: cluster.MachinePlanSecretType,
			Data: map[string][]byte{"plan": machinePlanData(node)},
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
	h.chartDeployed(cluster.HarvesterManagedChart)
	create(&managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherServerVersionSetting}, Value: "v2.13.1"})
	return nodes
}

// chartDeployed plays Fleet deploying a ManagedChart's current spec.
func (h *harness) chartDeployed(name string) {
	h.t.Helper()
	mc := &managementv3.ManagedChart{}
	h.must(h.c.Get(h.ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc))
	mc.Status = managementv3.ManagedChartStatus{ObservedGeneration: mc.Status.ObservedGeneration + 1, Conditions: []common.Condition{{Type: "Ready", Status: "True"}},
		Summary: fleetv1alpha1.BundleSummary{Ready: 1, DesiredReady: 1}}
	h.must(h.c.Status().Update(h.ctx(), mc))
}

// chartDeploying plays Fleet rolling out a ManagedChart's change: its one
// deployment waits to be applied.
func (h *harness) chartDeploying(name string) {
	h.t.Helper()
	mc := &managementv3.ManagedChart{}
	h.must(h.c.Get(h.ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc))
	mc.Status.Summary = fleetv1alpha1.BundleSummary{WaitApplied: 1, DesiredReady: 1}
	mc.Status.Unavailable = 1
	h.must(h.c.Status().Update(h.ctx(), mc))
}

// clusterUpgraded plays the cluster-upgrade Job and what it changes: the
// harvester chart at the release's version deployed by Fleet, Harvester and
// Rancher reporting the release's versions; then the Job succeeds.
func (h *harness) clusterUpgraded(plan string) {
	h.t.Helper()
	// The Job exists once the plan has done its own changes to the chart.
	h.waitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeJob(plan)}, &batchv1.Job{})
	rel := h.repo.Release
	h.upgradeHarvesterChart()
	h.chartDeployed(cluster.HarvesterManagedChart)
	h.setSetting(&harvesterv1beta1.Setting{}, cluster.ServerVersionSetting, rel.Harvester)
	h.setSetting(&managementv3.Setting{}, cluster.RancherServerVersionSetting, rel.Rancher)
	h.finishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(plan), true)
}

// upgradeHarvesterChart asks for the release's harvester chart, as the
// cluster-upgrade Job does.
func (h *harness) upgradeHarvesterChart() {
	h.t.Helper()
	mc := &managementv3.ManagedChart{}
	h.must(h.c.Get(h.ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart}, mc))
	mc.Spec.Version = h.repo.Release.HarvesterChart
	h.must(h.c.Update(h.ctx(), mc))
}

// setSetting sets the value of a Harvester or Rancher setting.
func (h *harness) setSetting(s client.Object, name, value string) {
	h.t.Helper()
	h.must(h.c.Get(h.ctx(), client.ObjectKey{Name: name}, s))
	switch o := s.(type) {
	case *harvesterv1beta1.Setting:
		o.Value = value
	case *managementv3.Setting:
		o.Value = value
	}
	h.must(h.c.Update(h.ctx(), s))
}

func (h *harness) deleteHarvester() {
	ctx := h.ctx()
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
		_ = h.c.DeleteAllOf(ctx, d.obj, client.InNamespace(d.ns))
	}
}

// serveRepo makes the repo Deployment available and its Service reachable,
// as the Deployment and EndpointSlice controllers would.
func (h *harness) serveRepo(plan string) {
	h.t.Helper()
	dep := &appsv1.Deployment{}
	h.waitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(plan)}, dep)
	r := ptr.Deref(dep.Spec.Replicas, 1)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: r, ReadyReplicas: r, AvailableReplicas: r, UpdatedReplicas: r}
	h.must(h.c.Status().Update(h.ctx(), dep))
	svc := &corev1.Service{}
	h.waitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(plan)}, svc)
	h.must(h.c.Create(h.ctx(), &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-abcde",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.52.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](8080)}},
	}))
	h.t.Cleanup(func() {
		_ = h.c.DeleteAllOf(h.ctx(), &discoveryv1.EndpointSlice{}, client.InNamespace(cluster.HarvesterNamespace))
	})
}

// sucJob creates the Job system-upgrade-controller would run for a Plan on a
// node, with its labels, and returns its name.
func (h *harness) sucJob(plan, node string) string {
	h.t.Helper()
	p := &upgradev1.Plan{}
	h.waitObject(client.ObjectKey{Namespace: cluster.CattleNamespace, Name: plan}, p)
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
	h.must(h.c.Create(h.ctx(), j))
	return name
}

// preload runs the image-preload Plan's Jobs on the nodes to success.
func (h *harness) preload(plan string, nodes []string) {
	h.t.Helper()
	for _, n := range nodes {
		h.finishJob(cluster.CattleNamespace, h.sucJob(names.ImagePreloadPlan(plan), n), true)
	}
}

// driveToNodeUpgrading plays the foreign components through the phases
// before NodeUpgrade.
func (h *harness) driveToNodeUpgrading(plan string, nodes []string) *v1beta1.UpgradePlan {
	h.t.Helper()
	h.waitPhase(plan, v1beta1.PhaseISODownloading)
	h.setImported(names.ISOImage(plan), "True", "", "")
	h.waitPhase(plan, v1beta1.PhaseRepoCreating)
	h.serveRepo(plan)
	h.waitPhase(plan, v1beta1.PhaseImagePreloading)
	h.preload(plan, nodes)
	h.waitPhase(plan, v1beta1.PhaseClusterUpgrading)
	h.clusterUpgraded(plan)
	return h.waitPhase(plan, v1beta1.PhaseNodeUpgrading)
}

// machinePlanData is what Rancher keeps in a node's machine-plan Secret,
// which the toolkit must never change.
func machinePlanData(node string) []byte {
	return []byte(`{"files":[{"path":"/etc/rancher/rke2/config.yaml.d/50-rancher.yaml","content":"bm9kZS1uYW1lOiA="}],"node":"` + node + `"}`)
}

// machinePlan returns a node's machine-plan Secret.
func (h *harness) machinePlan(node string) *corev1.Secret {
	h.t.Helper()
	s := &corev1.Secret{}
	h.must(h.c.Get(h.ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: "custom-" + node + "-machine-plan"}, s))
	return s
}

// rancherAsks sets Rancher's drain-hook request (pre-drain or post-drain)
// on a node's machine-plan Secret and returns its value. Rancher asks for
// the post-drain hook once it upgraded RKE2 on the node.
func (h *harness) rancherAsks(node, request string) string {
	h.t.Helper()
	if request == cluster.AnnotationRancherPostDrain {
		h.rke2Upgraded(node)
	}
	s := h.machinePlan(node)
	before := s.DeepCopy()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	v, _ := json.Marshal(map[string]any{"deleteEmptyDirData": true, "enabled": true, "force": true, "node": node, "at": time.Now().UnixNano()})
	s.Annotations[request] = string(v)
	h.must(h.c.Patch(h.ctx(), s, client.MergeFrom(before)))
	return string(v)
}

// waitAck waits until the toolkit acknowledged a request with its hook.
func (h *harness) waitAck(node, ack, value string) {
	h.t.Helper()
	h.eventually(fmt.Sprintf("%s of %s", ack, node), func() (bool, string) {
		s := h.machinePlan(node)
		return s.Annotations[ack] == value, fmt.Sprintf("annotations %v", s.Annotations)
	})
}

// rancherDone clears the drain annotations of a node, as Rancher does once
// it uncordoned the node.
func (h *harness) rancherDone(node string) {
	h.t.Helper()
	s := h.machinePlan(node)
	before := s.DeepCopy()
	for _, k := range []string{cluster.AnnotationRancherPreDrain, cluster.AnnotationRancherPostDrain, v1beta1.AnnotationPreHook, v1beta1.AnnotationPostHook} {
		delete(s.Annotations, k)
	}
	h.must(h.c.Patch(h.ctx(), s, client.MergeFrom(before)))
}

// reboot reports the node back from a reboot (a new boot ID) with an OS
// image, running the release's RKE2.
func (h *harness) reboot(node, osImage string) {
	h.t.Helper()
	n := &corev1.Node{}
	h.must(h.c.Get(h.ctx(), client.ObjectKey{Name: node}, n))
	n.Status.NodeInfo.OSImage, n.Status.NodeInfo.BootID = osImage, string(uuid.NewUUID())
	n.Status.NodeInfo.KubeletVersion = h.repo.Release.KubeletVersion()
	h.must(h.c.Status().Update(h.ctx(), n))
}

// rke2Upgraded reports the node's kubelet at the release's version, as
// after Rancher upgraded RKE2 on it.
func (h *harness) rke2Upgraded(node string) {
	h.t.Helper()
	n := &corev1.Node{}
	h.must(h.c.Get(h.ctx(), client.ObjectKey{Name: node}, n))
	n.Status.NodeInfo.KubeletVersion = h.repo.Release.KubeletVersion()
	h.must(h.c.Status().Update(h.ctx(), n))
}

// waitNodeState waits for a node's state in the plan.
func (h *harness) waitNodeState(plan, node string, state v1beta1.NodeUpgradeState) *v1beta1.UpgradePlan {
	h.t.Helper()
	var p *v1beta1.UpgradePlan
	h.eventually(fmt.Sprintf("node %s in %s", node, state), func() (bool, string) {
		p = h.get(plan)
		return p.Status.NodeUpgradeStatuses[node].State == state, describe(p)
	})
	return p
}

// nodeJob waits for a node Job and returns it.
func (h *harness) nodeJob(plan, jobType, node string) *batchv1.Job {
	h.t.Helper()
	j := &batchv1.Job{}
	h.waitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(plan, jobType, node)}, j)
	return j
}

// upgradeNode plays Rancher and the node Jobs for one node of a multi-node
// cluster, from the pre-drain request to the node back in the new OS and
// Rancher done with it.
func (h *harness) upgradeNode(plan, node string) {
	h.t.Helper()
	pre := h.rancherAsks(node, cluster.AnnotationRancherPreDrain)
	h.waitNodeState(plan, node, v1beta1.NodeStatePreDraining)
	h.finishNode(plan, node, pre)
}

// finishNode takes a node whose pre-drain Job runs (Rancher asked with
// pre) through the rest of its upgrade.
func (h *harness) finishNode(plan, node, pre string) {
	h.t.Helper()
	h.finishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypePreDrain, node), true)
	h.waitAck(node, v1beta1.AnnotationPreHook, pre)
	post := h.rancherAsks(node, cluster.AnnotationRancherPostDrain)
	h.waitNodeState(plan, node, v1beta1.NodeStatePostDraining)
	h.finishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypePostDrain, node), true)
	h.waitNodeState(plan, node, v1beta1.NodeStateWaitingReboot)
	h.reboot(node, h.repo.Release.OS)
	h.waitAck(node, v1beta1.AnnotationPostHook, post)
	h.rancherDone(node)
}

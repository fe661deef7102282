package plantest

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// WaitCleanedUp waits until a finished plan released everything: its
// objects are gone, the settings it changed are back, the finalizer is off.
func (h *Harness) WaitCleanedUp(plan string) {
	h.T.Helper()
	h.Eventually("the plan cleaned up", func() (bool, string) {
		p := h.Get(plan)
		if len(p.Finalizers) != 0 {
			return false, "finalizer still on; " + Describe(p)
		}
		return true, ""
	})
	h.AssertNothingLeft(plan)
	h.AssertRestored()
}

// AssertNothingLeft checks no object created by the plan remains.
func (h *Harness) AssertNothingLeft(plan string) {
	h.T.Helper()
	sel := client.MatchingLabels{v1beta1.LabelUpgradePlan: plan}
	for _, l := range []client.ObjectList{&batchv1.JobList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{},
		&upgradev1.PlanList{}, &harvesterv1beta1.VirtualMachineImageList{}} {
		h.Must(h.C.List(h.Ctx(), l, sel))
		if n := meta.LenList(l); n != 0 {
			h.T.Errorf("%d %T left behind", n, l)
		}
	}
	var ns corev1.NodeList
	h.Must(h.C.List(h.Ctx(), &ns))
	for _, n := range ns.Items {
		if _, ok := n.Annotations[v1beta1.AnnotationPendingOSImage]; ok {
			h.T.Errorf("node %s still has %s", n.Name, v1beta1.AnnotationPendingOSImage)
		}
	}
}

// AssertRestored checks every setting the upgrade changes is back to what
// the harvester fixture set.
func (h *Harness) AssertRestored() {
	h.T.Helper()
	ctx := h.Ctx()
	lh := &longhornv1beta2.Setting{}
	h.Must(h.C.Get(ctx, client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornReplicaReplenishmentWaitInterval}, lh))
	addon := &harvesterv1beta1.Addon{}
	h.Must(h.C.Get(ctx, client.ObjectKey{Namespace: cluster.KubeSystemNamespace, Name: cluster.DeschedulerAddon}, addon))
	kv := &kubevirtv1.KubeVirt{}
	h.Must(h.C.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}, kv))
	mc := &managementv3.ManagedChart{}
	h.Must(h.C.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart}, mc))
	cl := &provisioningv1.Cluster{}
	h.Must(h.C.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, cl))
	if lh.Value != "600" {
		h.T.Errorf("Longhorn setting %q, want 600", lh.Value)
	}
	if !addon.Spec.Enabled {
		h.T.Error("descheduler left disabled")
	}
	if m := kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods; len(m) != 1 || m[0] != "LiveMigrate" {
		h.T.Errorf("KubeVirt workload update methods %v", m)
	}
	if mc.Spec.Diff != nil && len(mc.Spec.Diff.ComparePatches) != 0 {
		h.T.Errorf("comparePatch left %+v", mc.Spec.Diff)
	}
	if us := cl.Spec.RKEConfig.UpgradeStrategy; us == nil || us.ControlPlaneConcurrency != "10%" || len(us.ControlPlaneDrainOptions.PreDrainHooks) != 0 {
		h.T.Errorf("Rancher upgrade strategy not restored: %+v", us)
	}
}

// WaitDegraded waits for the plan's Degraded condition.
func (h *Harness) WaitDegraded(plan string, status metav1.ConditionStatus) {
	h.T.Helper()
	h.Eventually(fmt.Sprintf("plan %s Degraded=%s", plan, status), func() (bool, string) {
		p := h.Get(plan)
		c := p.Condition(v1beta1.ConditionDegraded)
		return c != nil && c.Status == status, Describe(p)
	})
}

// SetPaused sets spec.paused.
func (h *Harness) SetPaused(plan string, paused bool) {
	h.T.Helper()
	p := h.Get(plan)
	before := p.DeepCopy()
	p.Spec.Paused = ptr.To(paused)
	h.Must(h.C.Patch(h.Ctx(), p, client.MergeFrom(before)))
}

// WaitHeld waits until the plan is held by spec.paused with a message that
// contains want.
func (h *Harness) WaitHeld(plan, want string) *v1beta1.UpgradePlan {
	h.T.Helper()
	var p *v1beta1.UpgradePlan
	h.Eventually("plan "+plan+" held: "+want, func() (bool, string) {
		p = h.Get(plan)
		c := p.Condition(v1beta1.ConditionProgressing)
		return c != nil && c.Status == "False" && c.Reason == v1beta1.ReasonPaused && strings.Contains(c.Message, want), Describe(p)
	})
	return p
}

// Volume creates a Longhorn volume of the given robustness, or sets it.
func (h *Harness) Volume(name, robustness string) {
	h.T.Helper()
	v := &longhornv1beta2.Volume{}
	key := client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: name}
	if err := h.C.Get(h.Ctx(), key, v); err != nil {
		v = &longhornv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: name},
			Spec: longhornv1beta2.VolumeSpec{NumberOfReplicas: 3}}
		h.Must(h.C.Create(h.Ctx(), v))
		// The API server outlives the test: later tests must not see it.
		h.T.Cleanup(func() { _ = h.C.Delete(context.Background(), v) })
	}
	v.Status.State, v.Status.Robustness = cluster.LonghornVolumeAttached, robustness
	h.Must(h.C.Status().Update(h.Ctx(), v))
}

// Replicas plays Longhorn's engine of a volume and its replicas: one
// replica per "node=mode" given (mode RW, WO or ERR), named
// <volume>-r-<node>, and the engine <volume>-e-0 reporting their modes. A
// second call sets the modes again.
func (h *Harness) Replicas(volume string, modes ...string) {
	h.T.Helper()
	ctx := h.Ctx()
	create := func(obj client.Object) {
		err := h.C.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			return
		}
		h.Must(err)
		// The API server outlives the test: later tests must not see it.
		h.T.Cleanup(func() { _ = h.C.Delete(context.Background(), obj) })
	}
	byName := map[string]string{}
	for _, m := range modes {
		node, mode, _ := strings.Cut(m, "=")
		name := volume + "-r-" + node
		byName[name] = mode
		create(&longhornv1beta2.Replica{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: name},
			Spec: longhornv1beta2.ReplicaSpec{VolumeName: volume, NodeID: node}})
	}
	e := &longhornv1beta2.Engine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: volume + "-e-0"},
		Spec: longhornv1beta2.EngineSpec{VolumeName: volume}}
	create(e.DeepCopy())
	h.Must(h.C.Get(ctx, client.ObjectKeyFromObject(e), e))
	e.Status.CurrentState, e.Status.ReplicaModeMap = cluster.LonghornEngineRunning, byName
	h.Must(h.C.Status().Update(ctx, e))
}

// Retry sets the plan's retry annotation, as the operator does.
func (h *Harness) Retry(name, value string) {
	h.T.Helper()
	p := h.Get(name)
	before := p.DeepCopy()
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, v1beta1.AnnotationRetry, value)
	h.Must(h.C.Patch(h.Ctx(), p, client.MergeFrom(before)))
}

// SetPauseNodes sets spec.nodeUpgradeOption.pauseNodes.
func (h *Harness) SetPauseNodes(plan string, nodes ...string) {
	h.T.Helper()
	p := h.Get(plan)
	before := p.DeepCopy()
	p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: nodes}
	h.Must(h.C.Patch(h.Ctx(), p, client.MergeFrom(before)))
}

// WaitEventually waits for a node's message to contain want.
func (h *Harness) WaitEventually(plan, node, want string) {
	h.T.Helper()
	h.Eventually("node "+node+" message "+want, func() (bool, string) {
		p := h.Get(plan)
		return strings.Contains(p.Status.NodeUpgradeStatuses[node].Message, want), Describe(p)
	})
}

// ToClusterUpgrading plays the foreign components up to the cluster-upgrade
// Job.
func (h *Harness) ToClusterUpgrading(nodes int) (*v1beta1.UpgradePlan, []string) {
	h.T.Helper()
	nodeNames := h.Harvester(nodes)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.SetImported(names.ISOImage(p.Name), "True", "", "")
	h.ServeRepo(p.Name)
	h.WaitPhase(p.Name, v1beta1.PhaseImagePreloading)
	h.Preload(p.Name, nodeNames)
	p = h.WaitPhase(p.Name, v1beta1.PhaseClusterUpgrading)
	// The Job exists once the plan has done its own changes to the chart.
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeJob(p.Name)}, &batchv1.Job{})
	return p, nodeNames
}

// Node1PreDrained runs a plan on two nodes until node-1's VMs are gone and
// Rancher has the node.
func (h *Harness) Node1PreDrained() *v1beta1.UpgradePlan {
	h.T.Helper()
	nodes := h.Harvester(2)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.DriveToNodeUpgrading(p.Name, nodes)
	h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDraining)
	h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-1"), true)
	return h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDrained)
}

// Node1Upgraded runs a plan on n nodes until node-1 is upgraded and
// Rancher is about to reach the next node.
func (h *Harness) Node1Upgraded(n int) *v1beta1.UpgradePlan {
	h.T.Helper()
	nodes := h.Harvester(n)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	h.UpgradeNode(p.Name, "node-1")
	return p
}

// Annotate sets an annotation of the plan.
func (h *Harness) Annotate(plan, key, value string) {
	h.T.Helper()
	p := h.Get(plan)
	before := p.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[key] = value
	h.Must(h.C.Patch(h.Ctx(), p, client.MergeFrom(before)))
}

// SetNodeReady reports a node Ready, or NotReady as the node-lifecycle
// controller marks a node whose kubelet stopped posting status.
func (h *Harness) SetNodeReady(node string, ready bool) {
	h.T.Helper()
	n := &corev1.Node{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: node}, n))
	c := cluster.ReadyCondition(n)
	c.Status, c.Reason = corev1.ConditionTrue, "KubeletReady"
	if !ready {
		c.Status, c.Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
	}
	h.Must(h.C.Status().Update(h.Ctx(), n))
}

package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
)

// drainWatch records the most nodes ever seen in the drain slot at once.
type drainWatch struct {
	mu   sync.Mutex
	max  int
	seen []string
	stop func()
}

func (h *harness) watchDrains(plan string) *drainWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &drainWatch{}
	done := make(chan struct{})
	w.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			p := &v1beta1.UpgradePlan{}
			if err := h.c.Get(ctx, client.ObjectKey{Name: plan}, p); err == nil {
				var in []string
				for n, s := range p.Status.NodeUpgradeStatuses {
					if nodestate.InDrainSlot(s.State) {
						in = append(in, n+"="+string(s.State))
					}
				}
				w.mu.Lock()
				if len(in) > w.max {
					w.max, w.seen = len(in), in
				}
				w.mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return w
}

func TestMultiNodeUpgradeToSucceeded(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(3)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	drains := h.watchDrains(p.Name)
	p = h.driveToNodeUpgrading(p.Name, nodes)

	// Entering NodeUpgrade records the settings it changes, then changes them
	// and hands the RKE2 rollout to Rancher, once.
	h.eventually("the Rancher Cluster patched", func() (bool, string) {
		cl, err := cluster.LocalCluster(h.ctx(), h.c)
		ok := err == nil && cl.Spec.RKEConfig.ProvisionGeneration == 5 && cl.Spec.KubernetesVersion == "v1.35.2+rke2r1"
		return ok, fmt.Sprintf("%+v %v", cl.Spec, err)
	})
	cl, _ := cluster.LocalCluster(h.ctx(), h.c)
	us := cl.Spec.RKEConfig.UpgradeStrategy
	if us.ControlPlaneConcurrency != "1" || us.WorkerConcurrency != "1" || !us.ControlPlaneDrainOptions.Enabled ||
		us.ControlPlaneDrainOptions.PreDrainHooks[0].Annotation != v1beta1.AnnotationPreHook ||
		us.WorkerDrainOptions.PostDrainHooks[0].Annotation != v1beta1.AnnotationPostHook {
		t.Errorf("upgrade strategy %+v", us)
	}
	p = h.get(p.Name)
	if ptr.Deref(p.Status.ProvisionGeneration, 0) != 5 || ptr.Deref(p.Status.SavedSettings.LonghornReplicaReplenishmentWaitInterval, "") != "600" ||
		!ptr.Deref(p.Status.SavedSettings.DeschedulerEnabled, false) || p.Status.SavedSettings.Rancher == nil {
		t.Errorf("recorded %+v, generation %v", p.Status.SavedSettings, p.Status.ProvisionGeneration)
	}
	h.eventually("Longhorn and descheduler changed", func() (bool, string) {
		v, _, _ := cluster.LonghornSetting(h.ctx(), h.c, cluster.LonghornReplicaReplenishmentWaitInterval)
		on, _, _ := cluster.AddonEnabled(h.ctx(), h.c, cluster.KubeSystemNamespace, cluster.DeschedulerAddon)
		return v == "1800" && !on, fmt.Sprintf("longhorn %s, descheduler %v", v, on)
	})
	h.waitProgressing(p.Name, "0 of 3 nodes upgraded")

	for i, n := range nodes {
		h.upgradeNode(p.Name, n)
		pre := h.nodeJob(p.Name, v1beta1.JobTypePreDrain, n)
		c := pre.Spec.Template.Spec.Containers[0]
		if !equality.Semantic.DeepEqual(pre.Spec.Template.Spec.Affinity, cluster.OnNode(n)) || pre.Spec.Template.Spec.NodeName != "" ||
			!ptr.Deref(c.SecurityContext.Privileged, false) ||
			strings.Join(c.Command, " ") != "upgrade-toolkit node pre-drain" || pre.Labels[v1beta1.LabelNode] != n {
			t.Errorf("pre-drain Job of %s: %+v %+v", n, pre.Labels, c)
		}
		h.waitProgressing(p.Name, fmt.Sprintf("%d of 3 nodes upgraded", i+1))
	}
	h.waitEvent(p.Name, "NodeRebootVerified: Node node-3 rebooted into Harvester v1.8.0")

	// The cluster-upgrade Job kept its progress in a ConfigMap of the plan.
	h.must(h.c.Create(h.ctx(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeProgress(p.Name),
		Labels: map[string]string{v1beta1.LabelUpgradePlan: p.Name, v1beta1.LabelUpgradeComponent: v1beta1.ComponentClusterUpgrade},
	}}))

	// ImageCleanup removes the previous release's images, node by node.
	p = h.waitPhase(p.Name, v1beta1.PhaseCleaningUp)
	suc := &upgradev1.Plan{}
	h.waitObject(client.ObjectKey{Namespace: cluster.CattleNamespace, Name: names.ImageCleanupPlan(p.Name)}, suc)
	if suc.Spec.Concurrency != 1 || strings.Join(suc.Spec.Upgrade.Command, " ") != "upgrade-toolkit node image-cleanup" {
		t.Errorf("image cleanup Plan %+v", suc.Spec)
	}
	for _, n := range nodes {
		h.finishJob(cluster.CattleNamespace, h.sucJob(suc.Name, n), true)
	}
	p = h.waitPhase(p.Name, v1beta1.PhaseSucceeded)
	drains.stop()
	if drains.max > 1 {
		t.Errorf("%d nodes were in the drain slot at once: %v", drains.max, drains.seen)
	}
	for _, n := range nodes {
		if s := p.Status.NodeUpgradeStatuses[n].State; s != v1beta1.NodeStateImageCleaned {
			t.Errorf("node %s ends in %s", n, s)
		}
	}
	h.waitEvent(p.Name, "UpgradeSucceeded: Upgrade completed successfully")
	h.waitCleanedUp(p.Name)
	// The manager caches the machine plans without their data; its hook
	// acknowledgments must not have touched it.
	for _, n := range nodes {
		if got, want := string(h.machinePlan(n).Data["plan"]), string(machinePlanData(n)); got != want {
			t.Errorf("Rancher's plan of %s is now %q, want %q kept", n, got, want)
		}
	}
	p = h.get(p.Name)
	for t2, want := range map[string]string{
		v1beta1.ConditionAvailable: "False/Executed", v1beta1.ConditionProgressing: "False/Succeeded", v1beta1.ConditionDegraded: "False/ReconcileSuccess",
	} {
		if c := p.Condition(t2); c == nil || string(c.Status)+"/"+c.Reason != want {
			t.Errorf("%s = %+v, want %s", t2, c, want)
		}
	}
}

// waitCleanedUp waits until a finished plan released everything: its
// objects are gone, the settings it changed are back, the finalizer is off.
func (h *harness) waitCleanedUp(plan string) {
	h.t.Helper()
	h.eventually("the plan cleaned up", func() (bool, string) {
		p := h.get(plan)
		if len(p.Finalizers) != 0 {
			return false, "finalizer still on; " + describe(p)
		}
		return true, ""
	})
	h.assertNothingLeft(plan)
	h.assertRestored()
}

// assertNothingLeft checks no object created by the plan remains.
func (h *harness) assertNothingLeft(plan string) {
	h.t.Helper()
	sel := client.MatchingLabels{v1beta1.LabelUpgradePlan: plan}
	for _, l := range []client.ObjectList{&batchv1.JobList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{},
		&upgradev1.PlanList{}, &harvesterv1beta1.VirtualMachineImageList{}} {
		h.must(h.c.List(h.ctx(), l, sel))
		if n := meta.LenList(l); n != 0 {
			h.t.Errorf("%d %T left behind", n, l)
		}
	}
	var ns corev1.NodeList
	h.must(h.c.List(h.ctx(), &ns))
	for _, n := range ns.Items {
		if _, ok := n.Annotations[v1beta1.AnnotationPendingOSImage]; ok {
			h.t.Errorf("node %s still has %s", n.Name, v1beta1.AnnotationPendingOSImage)
		}
	}
}

// assertRestored checks every setting the upgrade changes is back to what
// the harvester fixture set.
func (h *harness) assertRestored() {
	h.t.Helper()
	ctx := h.ctx()
	lh := &longhornv1beta2.Setting{}
	h.must(h.c.Get(ctx, client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornReplicaReplenishmentWaitInterval}, lh))
	addon := &harvesterv1beta1.Addon{}
	h.must(h.c.Get(ctx, client.ObjectKey{Namespace: cluster.KubeSystemNamespace, Name: cluster.DeschedulerAddon}, addon))
	kv := &kubevirtv1.KubeVirt{}
	h.must(h.c.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}, kv))
	mc := &managementv3.ManagedChart{}
	h.must(h.c.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart}, mc))
	cl := &provisioningv1.Cluster{}
	h.must(h.c.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, cl))
	if lh.Value != "600" {
		h.t.Errorf("Longhorn setting %q, want 600", lh.Value)
	}
	if !addon.Spec.Enabled {
		h.t.Error("descheduler left disabled")
	}
	if m := kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods; len(m) != 1 || m[0] != "LiveMigrate" {
		h.t.Errorf("KubeVirt workload update methods %v", m)
	}
	if mc.Spec.Diff != nil && len(mc.Spec.Diff.ComparePatches) != 0 {
		h.t.Errorf("comparePatch left %+v", mc.Spec.Diff)
	}
	if us := cl.Spec.RKEConfig.UpgradeStrategy; us == nil || us.ControlPlaneConcurrency != "10%" || len(us.ControlPlaneDrainOptions.PreDrainHooks) != 0 {
		h.t.Errorf("Rancher upgrade strategy not restored: %+v", us)
	}
}

func TestSingleNodeUpgrade(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(1)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.driveToNodeUpgrading(p.Name, nodes)
	j := h.nodeJob(p.Name, v1beta1.JobTypeSingleNodeUpgrade, "node-1")
	if strings.Join(j.Spec.Template.Spec.Containers[0].Command, " ") != "upgrade-toolkit node single-node-upgrade" {
		t.Errorf("single-node Job %+v", j.Spec.Template.Spec.Containers[0])
	}
	h.waitNodeState(p.Name, "node-1", v1beta1.NodeStateSingleNodeUpgrading)
	h.finishJob(cluster.HarvesterNamespace, j.Name, true)
	h.waitNodeState(p.Name, "node-1", v1beta1.NodeStateWaitingReboot)
	n := &corev1.Node{}
	h.must(h.c.Get(h.ctx(), client.ObjectKey{Name: "node-1"}, n))
	if n.Annotations[v1beta1.AnnotationPendingOSImage] != "Harvester v1.8.0" {
		t.Errorf("node annotations %v", n.Annotations)
	}
	h.reboot("node-1", "Harvester v1.8.0")
	h.waitNodeState(p.Name, "node-1", v1beta1.NodeStateSingleNodeUpgraded)
	cl, _ := cluster.LocalCluster(h.ctx(), h.c)
	if cl.Spec.RKEConfig.ProvisionGeneration != 4 {
		t.Errorf("the single-node path patched the Rancher Cluster: %+v", cl.Spec)
	}
	p = h.waitPhase(p.Name, v1beta1.PhaseCleaningUp)
	h.finishJob(cluster.CattleNamespace, h.sucJob(names.ImageCleanupPlan(p.Name), "node-1"), true)
	h.waitPhase(p.Name, v1beta1.PhaseSucceeded)
	h.waitCleanedUp(p.Name)
}

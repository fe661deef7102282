package phase_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// drainWatch records the most nodes ever seen in the drain slot at once.
type drainWatch struct {
	mu   sync.Mutex
	max  int
	seen []string
	stop func()
}

func watchDrains(h *plantest.Harness, plan string) *drainWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &drainWatch{}
	done := make(chan struct{})
	w.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			p := &v1beta1.UpgradePlan{}
			if err := h.C.Get(ctx, client.ObjectKey{Name: plan}, p); err == nil {
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
	h := plantest.New(t)
	nodes := h.Harvester(3)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	drains := watchDrains(h, p.Name)
	p = h.DriveToNodeUpgrading(p.Name, nodes)

	// Entering NodeUpgrade records the settings it changes, then changes them
	// and hands the RKE2 rollout to Rancher, once.
	h.Eventually("the Rancher Cluster patched", func() (bool, string) {
		cl, err := cluster.LocalCluster(h.Ctx(), h.C)
		ok := err == nil && cl.Spec.RKEConfig.ProvisionGeneration == 5 && cl.Spec.KubernetesVersion == "v1.35.2+rke2r1"
		return ok, fmt.Sprintf("%+v %v", cl.Spec, err)
	})
	cl, _ := cluster.LocalCluster(h.Ctx(), h.C)
	us := cl.Spec.RKEConfig.UpgradeStrategy
	if us.ControlPlaneConcurrency != "1" || us.WorkerConcurrency != "1" || !us.ControlPlaneDrainOptions.Enabled ||
		us.ControlPlaneDrainOptions.PreDrainHooks[0].Annotation != v1beta1.AnnotationPreHook ||
		us.WorkerDrainOptions.PostDrainHooks[0].Annotation != v1beta1.AnnotationPostHook {
		t.Errorf("upgrade strategy %+v", us)
	}
	p = h.Get(p.Name)
	if ptr.Deref(p.Status.ProvisionGeneration, 0) != 5 || ptr.Deref(p.Status.SavedSettings.LonghornReplicaReplenishmentWaitInterval, "") != "600" ||
		!ptr.Deref(p.Status.SavedSettings.DeschedulerEnabled, false) || p.Status.SavedSettings.Rancher == nil {
		t.Errorf("recorded %+v, generation %v", p.Status.SavedSettings, p.Status.ProvisionGeneration)
	}
	h.Eventually("Longhorn and descheduler changed", func() (bool, string) {
		v, _, _ := cluster.LonghornSetting(h.Ctx(), h.C, cluster.LonghornReplicaReplenishmentWaitInterval)
		on, _, _ := cluster.AddonEnabled(h.Ctx(), h.C, cluster.KubeSystemNamespace, cluster.DeschedulerAddon)
		return v == "1800" && !on, fmt.Sprintf("longhorn %s, descheduler %v", v, on)
	})
	h.WaitProgressing(p.Name, "0 of 3 nodes upgraded")

	for i, n := range nodes {
		h.UpgradeNode(p.Name, n)
		pre := h.NodeJob(p.Name, v1beta1.JobTypePreDrain, n)
		c := pre.Spec.Template.Spec.Containers[0]
		if !equality.Semantic.DeepEqual(pre.Spec.Template.Spec.Affinity, cluster.OnNode(n)) || pre.Spec.Template.Spec.NodeName != "" ||
			!ptr.Deref(c.SecurityContext.Privileged, false) ||
			strings.Join(c.Command, " ") != "upgrade-toolkit node pre-drain" || pre.Labels[v1beta1.LabelNode] != n {
			t.Errorf("pre-drain Job of %s: %+v %+v", n, pre.Labels, c)
		}
		if i < len(nodes)-1 {
			// After the last node the plan may be past NodeUpgrade before
			// a look sees its count: the event below says it instead.
			h.WaitProgressing(p.Name, fmt.Sprintf("%d of 3 nodes upgraded", i+1))
		}
		if i == 0 {
			// The first upgraded node is cleaned while the others still
			// upgrade: the cleanup Plan takes it, and only it.
			h.Eventually("the cleanup Plan takes node-1 only", func() (bool, string) {
				suc := &upgradev1.Plan{}
				err := h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.CattleNamespace, Name: names.ImageCleanupPlan(p.Name)}, suc)
				if err != nil {
					return false, err.Error()
				}
				sel := suc.Spec.NodeSelector
				ok := len(sel.MatchExpressions) == 1 && sel.MatchExpressions[0].Operator == metav1.LabelSelectorOpIn &&
					strings.Join(sel.MatchExpressions[0].Values, ",") == n && suc.Spec.Concurrency == v1beta1.DefaultImageCleanupConcurrency
				return ok, fmt.Sprintf("%+v, concurrency %d", sel, suc.Spec.Concurrency)
			})
			h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImageCleanupPlan(p.Name), n), true)
			h.WaitNodeState(p.Name, n, v1beta1.NodeStateImageCleaned)
			if st := h.Get(p.Name).Status; st.CurrentPhase != v1beta1.PhaseNodeUpgrading {
				t.Errorf("node-1 cleaned in phase %s, want during NodeUpgrade", st.CurrentPhase)
			}
		}
	}
	h.WaitEvent(p.Name, "NodeRebootVerified: Node node-3 rebooted into Harvester v1.8.0")

	// The cluster-upgrade Job kept its progress in a ConfigMap of the plan.
	h.Must(h.C.Create(h.Ctx(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeProgress(p.Name),
		Labels: map[string]string{v1beta1.LabelUpgradePlan: p.Name, v1beta1.LabelUpgradeComponent: v1beta1.ComponentClusterUpgrade},
	}}))

	// ImageCleanup then takes every node, and waits for those left.
	p = h.WaitPhase(p.Name, v1beta1.PhaseCleaningUp)
	suc := &upgradev1.Plan{}
	h.Eventually("the cleanup Plan takes every node", func() (bool, string) {
		err := h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.CattleNamespace, Name: names.ImageCleanupPlan(p.Name)}, suc)
		return err == nil && len(suc.Spec.NodeSelector.MatchExpressions) == 0, fmt.Sprintf("%+v %v", suc.Spec.NodeSelector, err)
	})
	if strings.Join(suc.Spec.Upgrade.Command, " ") != "upgrade-toolkit node image-cleanup" {
		t.Errorf("image cleanup Plan %+v", suc.Spec)
	}
	for _, n := range nodes[1:] {
		h.FinishJob(cluster.CattleNamespace, h.SucJob(suc.Name, n), true)
	}
	p = h.WaitPhase(p.Name, v1beta1.PhaseSucceeded)
	drains.stop()
	if drains.max > 1 {
		t.Errorf("%d nodes were in the drain slot at once: %v", drains.max, drains.seen)
	}
	for _, n := range nodes {
		if s := p.Status.NodeUpgradeStatuses[n].State; s != v1beta1.NodeStateImageCleaned {
			t.Errorf("node %s ends in %s", n, s)
		}
	}
	h.WaitEvent(p.Name, "UpgradeSucceeded: Upgrade completed successfully")
	if c := p.Check(phase.CheckStaleImages); c == nil || c.Result != v1beta1.CheckPassed || !strings.HasSuffix(c.Message, "removed from 3 nodes") {
		t.Errorf("check %s = %+v, want Passed, removed from 3 nodes", phase.CheckStaleImages, c)
	}
	h.WaitCleanedUp(p.Name)
	// The manager caches the machine plans without their data; its hook
	// acknowledgments must not have touched it.
	for _, n := range nodes {
		if got, want := string(h.MachinePlan(n).Data["plan"]), string(plantest.MachinePlanData(n)); got != want {
			t.Errorf("Rancher's plan of %s is now %q, want %q kept", n, got, want)
		}
	}
	p = h.Get(p.Name)
	for t2, want := range map[string]string{
		v1beta1.ConditionAvailable: "False/Executed", v1beta1.ConditionProgressing: "False/Succeeded", v1beta1.ConditionDegraded: "False/ReconcileSuccess",
	} {
		if c := p.Condition(t2); c == nil || string(c.Status)+"/"+c.Reason != want {
			t.Errorf("%s = %+v, want %s", t2, c, want)
		}
	}
}

func TestSingleNodeUpgrade(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(1)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	j := h.NodeJob(p.Name, v1beta1.JobTypeSingleNodeUpgrade, "node-1")
	if strings.Join(j.Spec.Template.Spec.Containers[0].Command, " ") != "upgrade-toolkit node single-node-upgrade" {
		t.Errorf("single-node Job %+v", j.Spec.Template.Spec.Containers[0])
	}
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStateSingleNodeUpgrading)
	h.FinishJob(cluster.HarvesterNamespace, j.Name, true)
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStateWaitingReboot)
	n := &corev1.Node{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: "node-1"}, n))
	if n.Annotations[v1beta1.AnnotationPendingOSImage] != "Harvester v1.8.0" {
		t.Errorf("node annotations %v", n.Annotations)
	}
	h.Reboot("node-1", "Harvester v1.8.0")
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStateSingleNodeUpgraded)
	cl, _ := cluster.LocalCluster(h.Ctx(), h.C)
	if cl.Spec.RKEConfig.ProvisionGeneration != 4 {
		t.Errorf("the single-node path patched the Rancher Cluster: %+v", cl.Spec)
	}
	p = h.WaitPhase(p.Name, v1beta1.PhaseCleaningUp)
	h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImageCleanupPlan(p.Name), "node-1"), true)
	h.WaitPhase(p.Name, v1beta1.PhaseSucceeded)
	h.WaitCleanedUp(p.Name)
}

package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// toClusterUpgrading plays the foreign components up to the cluster-upgrade
// Job.
func (h *harness) toClusterUpgrading(nodes int) (*v1beta1.UpgradePlan, []string) {
	h.t.Helper()
	nodeNames := h.harvester(nodes)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.waitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.setImported(names.ISOImage(p.Name), "True", "", "")
	h.serveRepo(p.Name)
	h.waitPhase(p.Name, v1beta1.PhaseImagePreloading)
	h.preload(p.Name, nodeNames)
	p = h.waitPhase(p.Name, v1beta1.PhaseClusterUpgrading)
	// The Job exists once the plan has done its own changes to the chart.
	h.waitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeJob(p.Name)}, &batchv1.Job{})
	return p, nodeNames
}

func degraded(p *v1beta1.UpgradePlan) *string {
	if c := p.Condition(v1beta1.ConditionDegraded); c != nil && c.Status == "True" {
		return &c.Message
	}
	return nil
}

// TestClusterUpgradeGateWaitsThenFails: the cluster-upgrade Job succeeded,
// but Harvester still reports the old version: the plan waits, names what
// it waits for, turns Degraded after a while, and fails at the deadline.
func TestClusterUpgradeGateWaitsThenFails(t *testing.T) {
	h := newHarness(t)
	p, _ := h.toClusterUpgrading(2)
	// Everything but Harvester's version: the new Harvester never started.
	h.setSetting(&managementv3.Setting{}, cluster.RancherServerVersionSetting, h.repo.Release.Rancher)
	h.upgradeHarvesterChart()
	h.chartDeployed(cluster.HarvesterManagedChart)
	h.finishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(p.Name), true)

	p = h.waitProgressing(p.Name, "verifying the cluster upgrade: Harvester reports version v1.7.1 (Setting harvesterhci.io server-version), expected v1.8.0")
	if p.Status.CurrentPhase != v1beta1.PhaseClusterUpgrading || degraded(p) != nil {
		t.Fatalf("right after the Job: %s", describe(p))
	}
	h.clock.Step(time.Minute)
	h.touch(p.Name)
	h.eventually("Degraded", func() (bool, string) {
		p = h.get(p.Name)
		c := p.Condition(v1beta1.ConditionDegraded)
		return c != nil && c.Reason == v1beta1.ReasonVerificationPending && strings.Contains(c.Message, "expected v1.8.0"), describe(p)
	})
	h.waitEvent(p.Name, "VerificationPending")
	for _, c := range p.Status.Checks {
		want := v1beta1.CheckPassed
		if c.Name == "ClusterUpgrade/HarvesterVersion" {
			want = v1beta1.CheckPending
		}
		if c.Result != want {
			t.Errorf("check %s is %s, want %s: %s", c.Name, c.Result, want, c.Message)
		}
	}

	h.clock.Step(h.cfg.Deadlines.Verify)
	h.touch(p.Name)
	p = h.waitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "the cluster upgrade reported success at") ||
		!strings.Contains(c.Message, "Harvester reports version v1.7.1") {
		t.Errorf("failure %q", c.Message)
	}
}

// TestEmptyClusterUpgradeFailsAtOnce: a cluster-upgrade Job that exited 0
// without upgrading the charts fails the plan at once: nothing will
// upgrade them later.
func TestEmptyClusterUpgradeFailsAtOnce(t *testing.T) {
	h := newHarness(t)
	p, _ := h.toClusterUpgrading(2)
	h.finishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(p.Name), true)
	p = h.waitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "ManagedChart fleet-local/harvester asks for version 1.7.1, expected 1.8.0") ||
		!strings.Contains(c.Message, "did not upgrade them") {
		t.Errorf("failure %q", c.Message)
	}
	found := false
	for _, c := range p.Status.Checks {
		if c.Name == "ClusterUpgrade/HarvesterCharts" {
			found = c.Result == v1beta1.CheckFailed
		}
	}
	if !found {
		t.Errorf("checks %+v: want ClusterUpgrade/HarvesterCharts Failed", p.Status.Checks)
	}
}

// TestClusterUpgradeGatePassesOnceSeen: a gate that waits passes as soon as
// the cluster shows the change, and the Degraded condition goes.
func TestClusterUpgradeGatePassesOnceSeen(t *testing.T) {
	h := newHarness(t)
	p, _ := h.toClusterUpgrading(2)
	h.setSetting(&managementv3.Setting{}, cluster.RancherServerVersionSetting, h.repo.Release.Rancher)
	h.upgradeHarvesterChart()
	h.chartDeploying(cluster.HarvesterManagedChart)
	h.finishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(p.Name), true)
	// Fleet has not deployed the chart yet, nor has Harvester restarted.
	h.waitProgressing(p.Name, "ManagedChart fleet-local/harvester is not deployed at 1.8.0 yet")
	h.clock.Step(time.Minute)
	h.touch(p.Name)
	h.eventually("Degraded", func() (bool, string) {
		p = h.get(p.Name)
		return degraded(p) != nil, describe(p)
	})
	h.chartDeployed(cluster.HarvesterManagedChart)
	h.setSetting(&harvesterv1beta1.Setting{}, cluster.ServerVersionSetting, h.repo.Release.Harvester)
	p = h.waitPhase(p.Name, v1beta1.PhaseNodeUpgrading)
	if d := degraded(p); d != nil {
		t.Errorf("still Degraded: %s", *d)
	}
	h.waitEvent(p.Name, "Verified: Verified the cluster upgrade: Harvester reports v1.8.0")
}

// TestNodeWaitingForRancherNamesTheMachine: a node whose VMs left waits for
// Rancher; the plan says what Rancher reports of the node's machine, since
// when and until when, then fails at the deadline.
func TestNodeWaitingForRancherNamesTheMachine(t *testing.T) {
	h := newHarness(t)
	p := h.node1PreDrained()
	// Rancher drained the node and wrote its new plan, which the agent has
	// not applied.
	s := h.machinePlan("node-1")
	before := s.DeepCopy()
	s.Annotations[cluster.AnnotationRancherDrainOptions] = "{}"
	s.Annotations[cluster.AnnotationRancherDrainDone] = "{}"
	h.must(h.c.Patch(h.ctx(), s, client.MergeFrom(before)))
	p = h.waitProgressing(p.Name, "upgrading node node-1 (PreDrained: waiting for Rancher to drain the node and upgrade RKE2 to v1.35.2+rke2r1; "+
		"Rancher reports: machine custom-node-1: drained; plan not applied yet; since ")
	if msg := p.Status.NodeUpgradeStatuses["node-1"].Message; !strings.Contains(msg, "fails at ") {
		t.Errorf("node-1's message does not say when it fails: %q", msg)
	}
	h.clock.Step(h.cfg.Deadlines.Rancher)
	h.touch(p.Name)
	p = h.waitPhase(p.Name, v1beta1.PhaseFailed)
	if st := p.Status.NodeUpgradeStatuses["node-1"]; st.State != v1beta1.NodeStatePostDrainFailed || st.Reason != v1beta1.ReasonRancherPlanNotApplied {
		t.Errorf("node-1: %+v", st)
	}
}

// TestDrainBlockedNamesThePDB: Rancher's drain error names a pod; the plan
// names the PodDisruptionBudget that protects it, once in an event, and
// goes back to what Rancher reports once the drain error is gone.
func TestDrainBlockedNamesThePDB(t *testing.T) {
	h := newHarness(t)
	p := h.node1PreDrained()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: "db-0", Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "db", Image: "db"}}},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	h.must(h.c.Create(h.ctx(), pod))
	h.must(h.c.Create(h.ctx(), pdb))
	t.Cleanup(func() {
		_ = h.c.Delete(context.Background(), pdb)
		_ = h.c.Delete(context.Background(), pod)
	})
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	h.must(h.c.Status().Update(h.ctx(), pdb))

	s := h.machinePlan("node-1")
	before := s.DeepCopy()
	s.Annotations[cluster.AnnotationRancherDrainOptions] = "{}"
	s.Annotations[cluster.AnnotationRancherDrainError] = `error when evicting pods/"db-0" -n "cattle-system": global timeout reached: 10m0s`
	h.must(h.c.Patch(h.ctx(), s, client.MergeFrom(before)))
	want := "drain of node node-1 blocked: PodDisruptionBudget cattle-system/db (minAvailable 1, 0 disruptions allowed) protects pod cattle-system/db-0; " +
		"delete or relax the PodDisruptionBudget, or move the pod's workload; Rancher reports: machine custom-node-1: drain error: "
	p = h.waitProgressing(p.Name, "upgrading node node-1 (PreDrained: "+want)
	if st := p.Status.NodeUpgradeStatuses["node-1"]; st.Reason != v1beta1.ReasonDrainBlocked {
		t.Errorf("node-1: %+v", st)
	}
	h.waitEvent(p.Name, v1beta1.EventDrainBlocked+": drain of node node-1 blocked: PodDisruptionBudget cattle-system/db")
	// Other passes while it blocks record no second event.
	h.touch(p.Name)
	h.touch(p.Name)
	s = h.machinePlan("node-1")
	before = s.DeepCopy()
	delete(s.Annotations, cluster.AnnotationRancherDrainError)
	h.must(h.c.Patch(h.ctx(), s, client.MergeFrom(before)))
	p = h.waitProgressing(p.Name, "upgrading node node-1 (PreDrained: waiting for Rancher to drain the node and upgrade RKE2")
	n := 0
	for _, e := range h.events(p.Name) {
		if strings.HasPrefix(e, v1beta1.EventDrainBlocked+": ") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d DrainBlocked events, want 1: %v", n, h.events(p.Name))
	}
	if st := p.Status.NodeUpgradeStatuses["node-1"]; st.Reason != "" {
		t.Errorf("node-1 keeps reason %q once the drain goes on", st.Reason)
	}
}

// TestFallbackBootFailsTheNodeAtOnce: a node back from its reboot (a new
// boot ID) on its old OS image fails at once, long before the reboot
// deadline.
func TestFallbackBootFailsTheNodeAtOnce(t *testing.T) {
	h := newHarness(t)
	p := h.node1PreDrained()
	h.rancherAsks("node-1", cluster.AnnotationRancherPostDrain)
	p = h.waitNodeState(p.Name, "node-1", v1beta1.NodeStatePostDraining)
	if st := p.Status.NodeUpgradeStatuses["node-1"]; st.PreviousBootID == "" || st.PreviousOSImage != "Harvester v1.7.1" {
		t.Errorf("the boot was not recorded as the OS upgrade began: %+v", st)
	}
	h.finishJob(cluster.HarvesterNamespace, names.NodeJob(p.Name, v1beta1.JobTypePostDrain, "node-1"), true)
	h.waitNodeState(p.Name, "node-1", v1beta1.NodeStateWaitingReboot)
	h.reboot("node-1", "Harvester v1.7.1")
	p = h.waitPhase(p.Name, v1beta1.PhaseFailed)
	st := p.Status.NodeUpgradeStatuses["node-1"]
	if st.State != v1beta1.NodeStatePostDrainFailed || st.Reason != v1beta1.ReasonFallbackBoot ||
		!strings.Contains(st.Message, `on OS image "Harvester v1.7.1", not the release's "Harvester v1.8.0"`) {
		t.Errorf("node-1: %+v", st)
	}
}

// TestPreloadJobOnTheWrongNodeFails: a node counts as preloaded only when
// its Job's pod ran on it.
func TestPreloadJobOnTheWrongNodeFails(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(2)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.waitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.setImported(names.ISOImage(p.Name), "True", "", "")
	h.serveRepo(p.Name)
	h.waitPhase(p.Name, v1beta1.PhaseImagePreloading)
	h.finishJob(cluster.CattleNamespace, h.sucJob(names.ImagePreloadPlan(p.Name), nodes[0]), true)
	job := h.sucJob(names.ImagePreloadPlan(p.Name), nodes[1])
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: job + "-x7k2p", Labels: map[string]string{batchv1.JobNameLabel: job}},
		Spec:       corev1.PodSpec{NodeName: nodes[0], RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "upgrade", Image: "toolkit"}}},
	}
	h.must(h.c.Create(h.ctx(), pod))
	pod.Status.Phase = corev1.PodSucceeded
	h.must(h.c.Status().Update(h.ctx(), pod))
	t.Cleanup(func() { _ = h.c.Delete(context.Background(), pod) })
	h.finishJob(cluster.CattleNamespace, job, true)
	p = h.waitPhase(p.Name, v1beta1.PhaseFailed)
	if st := p.Status.NodeUpgradeStatuses[nodes[1]]; st.State != v1beta1.NodeStateImagePreloadFailed || st.Reason != v1beta1.ReasonWrongNode ||
		!strings.Contains(st.Message, "its pod ran on node node-1, not node-2") {
		t.Errorf("node-2: %+v", st)
	}
	if st := p.Status.NodeUpgradeStatuses[nodes[0]]; st.State != v1beta1.NodeStateImagePreloaded {
		t.Errorf("node-1: %+v", st)
	}
}

// node1PreDrained runs a plan on two nodes until node-1's VMs are gone and
// Rancher has the node.
func (h *harness) node1PreDrained() *v1beta1.UpgradePlan {
	h.t.Helper()
	nodes := h.harvester(2)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.driveToNodeUpgrading(p.Name, nodes)
	h.rancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.waitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDraining)
	h.finishJob(cluster.HarvesterNamespace, names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-1"), true)
	return h.waitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDrained)
}

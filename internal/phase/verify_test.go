package phase_test

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
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

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
	h := plantest.New(t)
	p, _ := h.ToClusterUpgrading(2)
	// Everything but Harvester's version: the new Harvester never started.
	h.SetSetting(&managementv3.Setting{}, cluster.RancherServerVersionSetting, h.Repo.Release.Rancher)
	h.UpgradeHarvesterChart()
	h.ChartDeployed(cluster.HarvesterManagedChart)
	h.FinishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(p.Name), true)

	p = h.WaitProgressing(p.Name, "verifying the cluster upgrade: Harvester reports version v1.7.1 (Setting harvesterhci.io server-version), expected v1.8.0")
	if p.Status.CurrentPhase != v1beta1.PhaseClusterUpgrading || degraded(p) != nil {
		t.Fatalf("right after the Job: %s", plantest.Describe(p))
	}
	h.Clock.Step(time.Minute)
	h.Touch(p.Name)
	h.Eventually("Degraded", func() (bool, string) {
		p = h.Get(p.Name)
		c := p.Condition(v1beta1.ConditionDegraded)
		return c != nil && c.Reason == v1beta1.ReasonVerificationPending && strings.Contains(c.Message, "expected v1.8.0"), plantest.Describe(p)
	})
	h.WaitEvent(p.Name, "VerificationPending")
	for _, c := range p.Status.Checks {
		want := v1beta1.CheckPassed
		// The image cleanup is pending too: it has not run yet.
		if c.Name == "ClusterUpgrade/HarvesterVersion" || c.Name == phase.CheckStaleImages {
			want = v1beta1.CheckPending
		}
		if c.Result != want {
			t.Errorf("check %s is %s, want %s: %s", c.Name, c.Result, want, c.Message)
		}
	}

	h.Clock.Step(h.Cfg.Deadlines.Verify)
	h.Touch(p.Name)
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "the cluster upgrade reported success at") ||
		!strings.Contains(c.Message, "Harvester reports version v1.7.1") {
		t.Errorf("failure %q", c.Message)
	}
}

// TestEmptyClusterUpgradeFailsAtOnce: a cluster-upgrade Job that exited 0
// without upgrading the charts fails the plan at once: nothing will
// upgrade them later.
func TestEmptyClusterUpgradeFailsAtOnce(t *testing.T) {
	h := plantest.New(t)
	p, _ := h.ToClusterUpgrading(2)
	h.FinishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(p.Name), true)
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
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
	h := plantest.New(t)
	p, _ := h.ToClusterUpgrading(2)
	h.SetSetting(&managementv3.Setting{}, cluster.RancherServerVersionSetting, h.Repo.Release.Rancher)
	h.UpgradeHarvesterChart()
	h.ChartDeploying(cluster.HarvesterManagedChart)
	h.FinishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(p.Name), true)
	// Fleet has not deployed the chart yet, nor has Harvester restarted.
	h.WaitProgressing(p.Name, "ManagedChart fleet-local/harvester is not deployed at 1.8.0 yet")
	h.Clock.Step(time.Minute)
	h.Touch(p.Name)
	h.Eventually("Degraded", func() (bool, string) {
		p = h.Get(p.Name)
		return degraded(p) != nil, plantest.Describe(p)
	})
	h.ChartDeployed(cluster.HarvesterManagedChart)
	h.SetSetting(&harvesterv1beta1.Setting{}, cluster.ServerVersionSetting, h.Repo.Release.Harvester)
	p = h.WaitPhase(p.Name, v1beta1.PhaseNodeUpgrading)
	if d := degraded(p); d != nil {
		t.Errorf("still Degraded: %s", *d)
	}
	h.WaitEvent(p.Name, "Verified: Verified the cluster upgrade: Harvester reports v1.8.0")
}

// TestNodeWaitingForRancherNamesTheMachine: a node whose VMs left waits for
// Rancher; the plan says what Rancher reports of the node's machine, since
// when and until when, then fails at the deadline.
func TestNodeWaitingForRancherNamesTheMachine(t *testing.T) {
	h := plantest.New(t)
	p := h.Node1PreDrained()
	// Rancher drained the node and wrote its new plan, which the agent has
	// not applied.
	s := h.MachinePlan("node-1")
	before := s.DeepCopy()
	s.Annotations[cluster.AnnotationRancherDrainOptions] = "{}"
	s.Annotations[cluster.AnnotationRancherDrainDone] = "{}"
	h.Must(h.C.Patch(h.Ctx(), s, client.MergeFrom(before)))
	p = h.WaitProgressing(p.Name, "upgrading node node-1 (PreDrained: waiting for Rancher to drain the node and upgrade RKE2 to v1.35.2+rke2r1; "+
		"Rancher reports: machine custom-node-1: drained; plan not applied yet; since ")
	if msg := p.Status.NodeUpgradeStatuses["node-1"].Message; !strings.Contains(msg, "fails at ") {
		t.Errorf("node-1's message does not say when it fails: %q", msg)
	}
	h.Clock.Step(h.Cfg.Deadlines.Rancher)
	h.Touch(p.Name)
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if st := p.Status.NodeUpgradeStatuses["node-1"]; st.State != v1beta1.NodeStatePostDrainFailed || st.Reason != v1beta1.ReasonRancherPlanNotApplied {
		t.Errorf("node-1: %+v", st)
	}
}

// TestDrainBlockedNamesThePDB: Rancher's drain error names a pod; the plan
// names the PodDisruptionBudget that protects it, once in an event, and
// goes back to what Rancher reports once the drain error is gone.
func TestDrainBlockedNamesThePDB(t *testing.T) {
	h := plantest.New(t)
	p := h.Node1PreDrained()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: "db-0", Labels: map[string]string{"app": "db"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "db", Image: "db"}}},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	h.Must(h.C.Create(h.Ctx(), pod))
	h.Must(h.C.Create(h.Ctx(), pdb))
	t.Cleanup(func() {
		_ = h.C.Delete(context.Background(), pdb)
		_ = h.C.Delete(context.Background(), pod)
	})
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	h.Must(h.C.Status().Update(h.Ctx(), pdb))

	s := h.MachinePlan("node-1")
	before := s.DeepCopy()
	s.Annotations[cluster.AnnotationRancherDrainOptions] = "{}"
	s.Annotations[cluster.AnnotationRancherDrainError] = `error when evicting pods/"db-0" -n "cattle-system": global timeout reached: 10m0s`
	h.Must(h.C.Patch(h.Ctx(), s, client.MergeFrom(before)))
	want := "drain of node node-1 blocked: PodDisruptionBudget cattle-system/db (minAvailable 1, 0 disruptions allowed) protects pod cattle-system/db-0; " +
		"delete or relax the PodDisruptionBudget, or move the pod's workload; Rancher reports: machine custom-node-1: drain error: "
	p = h.WaitProgressing(p.Name, "upgrading node node-1 (PreDrained: "+want)
	if st := p.Status.NodeUpgradeStatuses["node-1"]; st.Reason != v1beta1.ReasonDrainBlocked {
		t.Errorf("node-1: %+v", st)
	}
	h.WaitEvent(p.Name, v1beta1.EventDrainBlocked+": drain of node node-1 blocked: PodDisruptionBudget cattle-system/db")
	// Other passes while it blocks record no second event.
	h.Touch(p.Name)
	h.Touch(p.Name)
	s = h.MachinePlan("node-1")
	before = s.DeepCopy()
	delete(s.Annotations, cluster.AnnotationRancherDrainError)
	h.Must(h.C.Patch(h.Ctx(), s, client.MergeFrom(before)))
	p = h.WaitProgressing(p.Name, "upgrading node node-1 (PreDrained: waiting for Rancher to drain the node and upgrade RKE2")
	n := 0
	for _, e := range h.Events(p.Name) {
		if strings.HasPrefix(e, v1beta1.EventDrainBlocked+": ") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d DrainBlocked events, want 1: %v", n, h.Events(p.Name))
	}
	if st := p.Status.NodeUpgradeStatuses["node-1"]; st.Reason != "" {
		t.Errorf("node-1 keeps reason %q once the drain goes on", st.Reason)
	}
}

// TestFallbackBootFailsTheNodeAtOnce: a node back from its reboot (a new
// boot ID) on its old OS image fails at once, long before the reboot
// deadline.
func TestFallbackBootFailsTheNodeAtOnce(t *testing.T) {
	h := plantest.New(t)
	p := h.Node1PreDrained()
	h.RancherAsks("node-1", cluster.AnnotationRancherPostDrain)
	p = h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStatePostDraining)
	if st := p.Status.NodeUpgradeStatuses["node-1"]; st.PreviousBootID == "" || st.PreviousOSImage != "Harvester v1.7.1" {
		t.Errorf("the boot was not recorded as the OS upgrade began: %+v", st)
	}
	h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(p.Name, v1beta1.JobTypePostDrain, "node-1"), true)
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStateWaitingReboot)
	h.Reboot("node-1", "Harvester v1.7.1")
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	st := p.Status.NodeUpgradeStatuses["node-1"]
	if st.State != v1beta1.NodeStatePostDrainFailed || st.Reason != v1beta1.ReasonFallbackBoot ||
		!strings.Contains(st.Message, `on OS image "Harvester v1.7.1", not the release's "Harvester v1.8.0"`) {
		t.Errorf("node-1: %+v", st)
	}
}

// TestPreloadJobOnTheWrongNodeFails: a node counts as preloaded only when
// its Job's pod ran on it.
func TestPreloadJobOnTheWrongNodeFails(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(2)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.SetImported(names.ISOImage(p.Name), "True", "", "")
	h.ServeRepo(p.Name)
	h.WaitPhase(p.Name, v1beta1.PhaseImagePreloading)
	h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImagePreloadPlan(p.Name), nodes[0]), true)
	job := h.SucJob(names.ImagePreloadPlan(p.Name), nodes[1])
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: job + "-x7k2p", Labels: map[string]string{batchv1.JobNameLabel: job}},
		Spec:       corev1.PodSpec{NodeName: nodes[0], RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "upgrade", Image: "toolkit"}}},
	}
	h.Must(h.C.Create(h.Ctx(), pod))
	pod.Status.Phase = corev1.PodSucceeded
	h.Must(h.C.Status().Update(h.Ctx(), pod))
	t.Cleanup(func() { _ = h.C.Delete(context.Background(), pod) })
	h.FinishJob(cluster.CattleNamespace, job, true)
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if st := p.Status.NodeUpgradeStatuses[nodes[1]]; st.State != v1beta1.NodeStateImagePreloadFailed || st.Reason != v1beta1.ReasonWrongNode ||
		!strings.Contains(st.Message, "its pod ran on node node-1, not node-2") {
		t.Errorf("node-2: %+v", st)
	}
	if st := p.Status.NodeUpgradeStatuses[nodes[0]]; st.State != v1beta1.NodeStateImagePreloaded {
		t.Errorf("node-1: %+v", st)
	}
}

package controller_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestRestartInEveryPhase stops the manager and starts a new one around
// every step of an upgrade; the plan still succeeds, enters each phase once
// and patches Rancher's Cluster exactly once.
func TestRestartInEveryPhase(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(3)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), RestoreVM: ptr.To(true)})
	step := func(f func()) {
		h.Restart()
		f()
		h.Restart()
	}
	step(func() { h.WaitPhase(p.Name, v1beta1.PhaseISODownloading) })
	step(func() { h.SetImported(names.ISOImage(p.Name), "True", "", "") })
	step(func() { h.WaitPhase(p.Name, v1beta1.PhaseRepoCreating) })
	step(func() { h.ServeRepo(p.Name) })
	step(func() { h.WaitPhase(p.Name, v1beta1.PhaseImagePreloading) })
	step(func() { h.Preload(p.Name, nodes) })
	step(func() { h.WaitPhase(p.Name, v1beta1.PhaseClusterUpgrading) })
	step(func() { h.ClusterUpgraded(p.Name) })
	step(func() { h.WaitPhase(p.Name, v1beta1.PhaseNodeUpgrading) })
	for _, n := range nodes {
		step(func() { h.UpgradeNode(p.Name, n) })
	}
	step(func() { h.WaitPhase(p.Name, v1beta1.PhaseCleaningUp) })
	for _, n := range nodes {
		step(func() { h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImageCleanupPlan(p.Name), n), true) })
	}
	p = h.WaitPhase(p.Name, v1beta1.PhaseSucceeded)

	seen := map[v1beta1.UpgradePlanPhase]int{}
	for _, e := range p.Status.PhaseTransitionTimestamps {
		seen[e.Phase]++
		if seen[e.Phase] > 1 {
			t.Errorf("phase %s entered twice: %v", e.Phase, p.Status.PhaseTransitionTimestamps)
		}
	}
	if len(seen) != 17 {
		t.Errorf("%d phases entered, want 17", len(seen))
	}
	if g := ptr.Deref(p.Status.ProvisionGeneration, 0); g != 5 {
		t.Errorf("provisionGeneration %d, want 5: bumped more than once", g)
	}
	h.WaitCleanedUp(p.Name)
	cl, err := cluster.LocalCluster(h.Ctx(), h.C)
	h.Must(err)
	if cl.Spec.RKEConfig.ProvisionGeneration != 5 {
		t.Errorf("Rancher's provisionGeneration %d, want 5", cl.Spec.RKEConfig.ProvisionGeneration)
	}
}

// TestNoWritesWhileNothingChanges: a reconcile that changes nothing writes
// nothing, whatever phase the plan waits in. Passes are counted, so that a
// quiet manager that did not reconcile at all cannot pass.
func TestNoWritesWhileNothingChanges(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(2)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	quiet := func(where string) {
		t.Helper()
		// The last change has settled (its status write and its events have
		// landed) once a whole pass goes by without a write.
		h.Eventually(where+": the last change settled", func() (bool, string) {
			writes := h.WritesDuring(func() { h.WholePass(p.Name) })
			return len(writes) == 0, apicount.Format(writes)
		})
		var passes int
		writes := h.WritesDuring(func() {
			passes = h.WholePass(p.Name) // reconciles with nothing to do
		})
		if passes == 0 {
			t.Errorf("%s: no reconcile ran", where)
		}
		if len(writes) != 0 {
			t.Errorf("%s: the manager wrote while nothing changed, in %d reconciles:\n%s", where, passes, apicount.Format(writes))
		}
		t.Logf("%s: %d reconciles, no write", where, passes)
	}
	h.WaitProgressing(p.Name, "importing the release ISO")
	quiet("ISODownloading")
	h.SetImported(names.ISOImage(p.Name), "True", "", "")
	h.WaitProgressing(p.Name, "waiting for the repo Deployment")
	quiet("RepoCreating")
	h.ServeRepo(p.Name)
	h.WaitProgressing(p.Name, "preloading images")
	quiet("ImagePreloading")
	h.Preload(p.Name, nodes)
	h.WaitProgressing(p.Name, "upgrading the cluster's components")
	quiet("ClusterUpgrading")
	h.ClusterUpgraded(p.Name)
	h.WaitProgressing(p.Name, "waiting for Rancher to start on the next node")
	quiet("NodeUpgrading")
	h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDraining)
	h.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-1")
	h.WaitProgressing(p.Name, "upgrading node node-1 (PreDraining)")
	quiet("PreDraining")
}

func TestSecondPlanWaitsThenStartsByItself(t *testing.T) {
	h := plantest.New(t)
	h.Harvester(2)
	first := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.WaitPhase(first.Name, v1beta1.PhaseISODownloading)
	time.Sleep(time.Second) // creation timestamps have a one-second resolution
	second := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})

	h.Eventually("the second plan queued", func() (bool, string) {
		p := h.Get(second.Name)
		c := p.Condition(v1beta1.ConditionProgressing)
		return c != nil && c.Reason == v1beta1.ReasonConcurrentUpgradeBlocked && c.Status == metav1.ConditionFalse &&
			strings.Contains(c.Message, `waiting for upgrade "`+first.Name+`" (phase ISODownloading) to finish`), plantest.Describe(p)
	})
	if p := h.Get(second.Name); p.Status.CurrentPhase != "" || len(p.Finalizers) != 0 {
		t.Errorf("the queued plan started: %s", plantest.Describe(p))
	}
	h.WaitEvent(second.Name, `ConcurrentUpgradeBlocked: Blocked by in-progress upgrade "`+first.Name+`"`)

	// The first plan fails; once it has cleaned up, the second one starts.
	h.SetImported(names.ISOImage(first.Name), "False", "True", "404 Not Found")
	h.WaitPhase(first.Name, v1beta1.PhaseFailed)
	p := h.WaitPhase(second.Name, v1beta1.PhaseISODownloading)
	if c := p.Condition(v1beta1.ConditionProgressing); c.Status != metav1.ConditionTrue {
		t.Errorf("second plan Progressing %+v", c)
	}
	if f := h.Get(first.Name); len(f.Finalizers) != 0 {
		t.Errorf("the second plan started before the first cleaned up")
	}
}

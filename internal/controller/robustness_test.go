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
)

// TestRestartInEveryPhase stops the manager and starts a new one around
// every step of an upgrade; the plan still succeeds, enters each phase once
// and patches Rancher's Cluster exactly once.
func TestRestartInEveryPhase(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(3)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), RestoreVM: ptr.To(true)})
	step := func(f func()) {
		h.restart()
		f()
		h.restart()
	}
	step(func() { h.waitPhase(p.Name, v1beta1.PhaseISODownloading) })
	step(func() { h.setImported(names.ISOImage(p.Name), "True", "", "") })
	step(func() { h.waitPhase(p.Name, v1beta1.PhaseRepoCreating) })
	step(func() { h.serveRepo(p.Name) })
	step(func() { h.waitPhase(p.Name, v1beta1.PhaseImagePreloading) })
	step(func() { h.preload(p.Name, nodes) })
	step(func() { h.waitPhase(p.Name, v1beta1.PhaseClusterUpgrading) })
	step(func() { h.clusterUpgraded(p.Name) })
	step(func() { h.waitPhase(p.Name, v1beta1.PhaseNodeUpgrading) })
	for _, n := range nodes {
		step(func() { h.upgradeNode(p.Name, n) })
	}
	step(func() { h.waitPhase(p.Name, v1beta1.PhaseCleaningUp) })
	for _, n := range nodes {
		step(func() { h.finishJob(cluster.CattleNamespace, h.sucJob(names.ImageCleanupPlan(p.Name), n), true) })
	}
	p = h.waitPhase(p.Name, v1beta1.PhaseSucceeded)

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
	h.waitCleanedUp(p.Name)
	cl, err := cluster.LocalCluster(h.ctx(), h.c)
	h.must(err)
	if cl.Spec.RKEConfig.ProvisionGeneration != 5 {
		t.Errorf("Rancher's provisionGeneration %d, want 5", cl.Spec.RKEConfig.ProvisionGeneration)
	}
}

// TestNoWritesWhileNothingChanges: a reconcile that changes nothing writes
// nothing, whatever phase the plan waits in. Passes are counted, so that a
// quiet manager that did not reconcile at all cannot pass.
func TestNoWritesWhileNothingChanges(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(2)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	quiet := func(where string) {
		t.Helper()
		// The last change has settled (its status write and its events have
		// landed) once a whole pass goes by without a write.
		h.eventually(where+": the last change settled", func() (bool, string) {
			writes := h.writesDuring(func() { h.wholePass(p.Name) })
			return len(writes) == 0, apicount.Format(writes)
		})
		var passes int
		writes := h.writesDuring(func() {
			passes = h.wholePass(p.Name) // reconciles with nothing to do
		})
		if passes == 0 {
			t.Errorf("%s: no reconcile ran", where)
		}
		if len(writes) != 0 {
			t.Errorf("%s: the manager wrote while nothing changed, in %d reconciles:\n%s", where, passes, apicount.Format(writes))
		}
		t.Logf("%s: %d reconciles, no write", where, passes)
	}
	h.waitProgressing(p.Name, "importing the release ISO")
	quiet("ISODownloading")
	h.setImported(names.ISOImage(p.Name), "True", "", "")
	h.waitProgressing(p.Name, "waiting for the repo Deployment")
	quiet("RepoCreating")
	h.serveRepo(p.Name)
	h.waitProgressing(p.Name, "preloading images")
	quiet("ImagePreloading")
	h.preload(p.Name, nodes)
	h.waitProgressing(p.Name, "upgrading the cluster's components")
	quiet("ClusterUpgrading")
	h.clusterUpgraded(p.Name)
	h.waitProgressing(p.Name, "waiting for Rancher to start on the next node")
	quiet("NodeUpgrading")
	h.rancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.waitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDraining)
	h.nodeJob(p.Name, v1beta1.JobTypePreDrain, "node-1")
	h.waitProgressing(p.Name, "upgrading node node-1 (PreDraining)")
	quiet("PreDraining")
}

func TestSecondPlanWaitsThenStartsByItself(t *testing.T) {
	h := newHarness(t)
	h.harvester(2)
	first := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.waitPhase(first.Name, v1beta1.PhaseISODownloading)
	time.Sleep(time.Second) // creation timestamps have a one-second resolution
	second := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})

	h.eventually("the second plan queued", func() (bool, string) {
		p := h.get(second.Name)
		c := p.Condition(v1beta1.ConditionProgressing)
		return c != nil && c.Reason == v1beta1.ReasonConcurrentUpgradeBlocked && c.Status == metav1.ConditionFalse &&
			strings.Contains(c.Message, `waiting for upgrade "`+first.Name+`" (phase ISODownloading) to finish`), describe(p)
	})
	if p := h.get(second.Name); p.Status.CurrentPhase != "" || len(p.Finalizers) != 0 {
		t.Errorf("the queued plan started: %s", describe(p))
	}
	h.waitEvent(second.Name, `ConcurrentUpgradeBlocked: Blocked by in-progress upgrade "`+first.Name+`"`)

	// The first plan fails; once it has cleaned up, the second one starts.
	h.setImported(names.ISOImage(first.Name), "False", "True", "404 Not Found")
	h.waitPhase(first.Name, v1beta1.PhaseFailed)
	p := h.waitPhase(second.Name, v1beta1.PhaseISODownloading)
	if c := p.Condition(v1beta1.ConditionProgressing); c.Status != metav1.ConditionTrue {
		t.Errorf("second plan Progressing %+v", c)
	}
	if f := h.get(first.Name); len(f.Finalizers) != 0 {
		t.Errorf("the second plan started before the first cleaned up")
	}
}

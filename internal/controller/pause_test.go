package controller_test

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

func (h *harness) setPaused(plan string, paused bool) {
	h.t.Helper()
	p := h.get(plan)
	before := p.DeepCopy()
	p.Spec.Paused = ptr.To(paused)
	h.must(h.c.Patch(h.ctx(), p, client.MergeFrom(before)))
}

// waitHeld waits until the plan is held by spec.paused with a message that
// contains want.
func (h *harness) waitHeld(plan, want string) *v1beta1.UpgradePlan {
	h.t.Helper()
	var p *v1beta1.UpgradePlan
	h.eventually("plan "+plan+" held: "+want, func() (bool, string) {
		p = h.get(plan)
		c := p.Condition(v1beta1.ConditionProgressing)
		return c != nil && c.Status == "False" && c.Reason == v1beta1.ReasonPaused && strings.Contains(c.Message, want), describe(p)
	})
	return p
}

// TestPausePlan: a plan created paused holds before its first phase and
// starts when resumed; paused between phases it holds before the next one.
func TestPausePlan(t *testing.T) {
	h := newHarness(t)
	h.harvester(1)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Paused: ptr.To(true)})
	h.waitHeld(p.Name, "paused (spec.paused) before phase Initialize; set spec.paused to false to resume")
	h.waitEvent(p.Name, "Paused: paused (spec.paused) before phase Initialize")
	h.wholePass(p.Name)
	if p = h.get(p.Name); p.Status.CurrentPhase != "" {
		t.Fatalf("a paused plan started: %s", describe(p))
	}
	h.setPaused(p.Name, false)
	h.waitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.waitEvent(p.Name, "Resumed in phase")

	// Paused while the ISO downloads: the download finishes, the next
	// phase does not start.
	h.setPaused(p.Name, true)
	h.setImported(names.ISOImage(p.Name), "True", "", "")
	h.waitHeld(p.Name, "before phase RepoCreate")
	h.wholePass(p.Name)
	if p = h.get(p.Name); p.Status.CurrentPhase != v1beta1.PhaseISODownloaded {
		t.Fatalf("a plan paused in ISODownload went on: %s", describe(p))
	}
	h.setPaused(p.Name, false)
	h.waitPhase(p.Name, v1beta1.PhaseRepoCreating)
}

// TestPauseDuringNodeUpgrade: a node under way when the plan is paused
// finishes; the next node Rancher reaches is held, with no Job, until the
// plan is resumed.
func TestPauseDuringNodeUpgrade(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(3)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.driveToNodeUpgrading(p.Name, nodes)

	pre := h.rancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.waitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDraining)
	h.setPaused(p.Name, true)
	h.waitProgressing(p.Name, "pausing (spec.paused): no other node starts once the one under way is done")
	// node-1 finishes its upgrade.
	h.finishNode(p.Name, "node-1", pre)

	// Rancher reaches node-2: it is held, nothing runs for it.
	h.rancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	p = h.waitNodeState(p.Name, "node-2", v1beta1.NodeStateUpgradePaused)
	if st := p.Status.NodeUpgradeStatuses["node-2"]; st.Reason != v1beta1.ReasonAdministrativelyPaused || !strings.Contains(st.Message, "the plan is paused (spec.paused)") {
		t.Errorf("held node status %+v", st)
	}
	h.waitHeld(p.Name, "paused (spec.paused) during NodeUpgrade: 1 of 3 nodes upgraded, no node under way")
	h.wholePass(p.Name)
	if !h.absent(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2")}, &batchv1.Job{}) {
		t.Fatal("a paused plan started node-2's pre-drain Job")
	}
	h.setPaused(p.Name, false)
	h.waitNodeState(p.Name, "node-2", v1beta1.NodeStatePreDraining)
	h.nodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2")
	h.waitEvent(p.Name, "Resumed in phase NodeUpgrading")
}

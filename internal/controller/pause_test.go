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
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestPausePlan: a plan created paused holds before its first phase and
// starts when resumed; paused between phases it holds before the next one.
func TestPausePlan(t *testing.T) {
	h := plantest.New(t)
	h.Harvester(1)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Paused: ptr.To(true)})
	h.WaitHeld(p.Name, "paused (spec.paused) before phase Initialize; set spec.paused to false to resume")
	h.WaitEvent(p.Name, "Paused: paused (spec.paused) before phase Initialize")
	h.WholePass(p.Name)
	if p = h.Get(p.Name); p.Status.CurrentPhase != "" {
		t.Fatalf("a paused plan started: %s", plantest.Describe(p))
	}
	h.SetPaused(p.Name, false)
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.WaitEvent(p.Name, "Resumed in phase")

	// Paused while the ISO downloads: the download finishes, the next
	// phase does not start.
	h.SetPaused(p.Name, true)
	h.SetImported(names.ISOImage(p.Name), "True", "", "")
	h.WaitHeld(p.Name, "before phase RepoCreate")
	h.WholePass(p.Name)
	if p = h.Get(p.Name); p.Status.CurrentPhase != v1beta1.PhaseISODownloaded {
		t.Fatalf("a plan paused in ISODownload went on: %s", plantest.Describe(p))
	}
	h.SetPaused(p.Name, false)
	h.WaitPhase(p.Name, v1beta1.PhaseRepoCreating)
}

// TestPauseDuringNodeUpgrade: a node under way when the plan is paused
// finishes; the next node Rancher reaches is held, with no Job, until the
// plan is resumed.
func TestPauseDuringNodeUpgrade(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(3)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)

	pre := h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDraining)
	h.SetPaused(p.Name, true)
	h.WaitProgressing(p.Name, "pausing (spec.paused): no other node starts once the one under way is done")
	// node-1 finishes its upgrade.
	h.FinishNode(p.Name, "node-1", pre)

	// Rancher reaches node-2: it is held, nothing runs for it.
	h.RancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	p = h.WaitNodeState(p.Name, "node-2", v1beta1.NodeStateUpgradePaused)
	if st := p.Status.NodeUpgradeStatuses["node-2"]; st.Reason != v1beta1.ReasonAdministrativelyPaused || !strings.Contains(st.Message, "the plan is paused (spec.paused)") {
		t.Errorf("held node status %+v", st)
	}
	h.WaitHeld(p.Name, "paused (spec.paused) during NodeUpgrade: 1 of 3 nodes upgraded, no node under way")
	h.WholePass(p.Name)
	if !h.Absent(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2")}, &batchv1.Job{}) {
		t.Fatal("a paused plan started node-2's pre-drain Job")
	}
	h.SetPaused(p.Name, false)
	h.WaitNodeState(p.Name, "node-2", v1beta1.NodeStatePreDraining)
	h.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2")
	h.WaitEvent(p.Name, "Resumed in phase NodeUpgrading")
}

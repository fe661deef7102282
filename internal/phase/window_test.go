package phase_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// windowAround is a daily window, in UTC, open from an hour before t to an
// hour after it.
func windowAround(t time.Time) v1beta1.MaintenanceWindow {
	return v1beta1.MaintenanceWindow{Start: t.Add(-time.Hour).UTC().Format("15:04"), End: t.Add(time.Hour).UTC().Format("15:04")}
}

// TestWindowClosesMidUpgrade: a node begins inside the window; the window
// closes while it is under way, and it finishes; the next node Rancher
// reaches does not begin, says why and when the next window opens, as do
// the plan's status, its Progressing condition and an event, and no
// deadline runs meanwhile (the health gate's included); as the next window
// opens, it begins.
func TestWindowClosesMidUpgrade(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(3)
	now := h.Clock.Now()
	w := windowAround(now)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"),
		NodeUpgradeOption: &v1beta1.NodeUpgradeOption{MaintenanceWindows: []v1beta1.MaintenanceWindow{w}}})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	if p.Status.NextMaintenanceWindow != nil {
		t.Errorf("inside the window the plan says the next opens at %s", p.Status.NextMaintenanceWindow)
	}
	pre := h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDraining)

	// The window closes: node-1 is under way and finishes.
	h.Clock.Step(2 * time.Hour)
	h.Touch(p.Name)
	p = h.WaitProgressing(p.Name, "no maintenance window is open: no other node begins once this one is done")
	// The next opens tomorrow, at the start of the day's window.
	start, _ := time.Parse("15:04", w.Start)
	today := h.Clock.Now().UTC()
	next := time.Date(today.Year(), today.Month(), today.Day(), start.Hour(), start.Minute(), 0, 0, time.UTC)
	if !next.After(h.Clock.Now()) {
		next = next.AddDate(0, 0, 1)
	}
	if got := p.Status.NextMaintenanceWindow; got == nil || !got.Time.Equal(next) {
		t.Fatalf("status.nextMaintenanceWindow %v, want %s", got, next)
	}
	h.WaitEvent(p.Name, "MaintenanceWindowClosed: No maintenance window is open: no other node begins its upgrade until the next opens at "+next.Format(time.RFC3339))
	h.FinishNode(p.Name, "node-1", pre)

	// Rancher reaches node-2, which waits, with a faulted volume that
	// would hold it at the health gate past its deadline.
	h.Volume("pvc-window", cluster.LonghornRobustnessFaulted)
	h.RancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	h.WaitEventually(p.Name, "node-2", nodestate.WindowPrefix+"the next opens at "+next.Format(time.RFC3339))
	p = h.WaitProgressing(p.Name, "1 of 3 nodes upgraded; waiting for a maintenance window (spec.nodeUpgradeOption.maintenanceWindows): the next opens at "+
		next.Format(time.RFC3339)+" (")
	st := p.Status.NodeUpgradeStatuses["node-2"]
	if st.State != v1beta1.NodeStateImagePreloaded || st.Reason != v1beta1.ReasonOutsideMaintenanceWindow || st.HealthGateSince != nil {
		t.Errorf("node-2 waiting for the window: %+v", st)
	}
	if n := len(p.Status.MaintenanceWindowWaits); n != 1 || p.Status.MaintenanceWindowWaits[0].End != nil {
		t.Errorf("the wait with no node under way is not recorded open: %+v", p.Status.MaintenanceWindowWaits)
	}
	// Longer than every deadline, short of the next window.
	h.Clock.Step(next.Sub(h.Clock.Now()) - time.Minute)
	h.WholePass(p.Name)
	p = h.Get(p.Name)
	if p.Status.CurrentPhase != v1beta1.PhaseNodeUpgrading || p.Status.NodeUpgradeStatuses["node-2"].State != v1beta1.NodeStateImagePreloaded {
		t.Fatalf("the plan moved outside the window: %s", plantest.Describe(p))
	}
	if !h.Absent(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2")}, &batchv1.Job{}) {
		t.Fatal("node-2's pre-drain Job was started outside the window")
	}

	// The window opens: node-2 goes to the health gate, whose clock starts
	// now, then, once the volume is healthy, begins.
	h.Clock.Step(time.Minute)
	h.Touch(p.Name)
	h.WaitEventually(p.Name, "node-2", "pvc-window (faulted)")
	p = h.Get(p.Name)
	if since := p.Status.NodeUpgradeStatuses["node-2"].HealthGateSince; since == nil || since.Time.Before(next) {
		t.Errorf("the health gate's clock ran while the window was closed: since %v", since)
	}
	if p.Status.NextMaintenanceWindow != nil {
		t.Errorf("status.nextMaintenanceWindow %s stays once the window opened", p.Status.NextMaintenanceWindow)
	}
	if waits := p.Status.MaintenanceWindowWaits; len(waits) != 1 || waits[0].End == nil {
		t.Errorf("the wait did not end as the window opened: %+v", waits)
	}
	h.WaitEvent(p.Name, "MaintenanceWindowOpened: Nodes may begin their upgrade again: a maintenance window is open until "+next.Add(2*time.Hour).Format(time.RFC3339))
	h.Volume("pvc-window", cluster.LonghornRobustnessHealthy)
	h.WaitNodeState(p.Name, "node-2", v1beta1.NodeStatePreDraining)
}

// TestWindowAndPauseCompose: a single node waits for a window while
// everything before it ran; paused, the plan says it is paused and that
// the window holds after; resumed, it still waits for the window; with
// the windows removed while the plan runs, the node begins.
func TestWindowAndPauseCompose(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(1)
	closed := windowAround(h.Clock.Now().Add(12 * time.Hour))
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"),
		NodeUpgradeOption: &v1beta1.NodeUpgradeOption{MaintenanceWindows: []v1beta1.MaintenanceWindow{closed}}})
	// Nothing before the node upgrade waits for the window.
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	h.WaitEventually(p.Name, "node-1", nodestate.WindowPrefix)
	p = h.WaitProgressing(p.Name, "waiting for a maintenance window")
	if p.Status.NextMaintenanceWindow == nil {
		t.Fatalf("no status.nextMaintenanceWindow: %s", plantest.Describe(p))
	}

	h.SetPaused(p.Name, true)
	h.WaitHeld(p.Name, "set spec.paused to false to resume; the nodes left then wait for a maintenance window: the next opens at")
	h.SetPaused(p.Name, false)
	h.WaitProgressing(p.Name, "waiting for a maintenance window")
	h.WholePass(p.Name)
	if !h.Absent(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(p.Name, v1beta1.JobTypeSingleNodeUpgrade, "node-1")}, &batchv1.Job{}) {
		t.Fatal("resumed outside the window, the single node was upgraded")
	}

	before := h.Get(p.Name)
	after := before.DeepCopy()
	after.Spec.NodeUpgradeOption.MaintenanceWindows = nil
	h.Must(h.C.Patch(h.Ctx(), after, client.MergeFrom(before)))
	h.NodeJob(p.Name, v1beta1.JobTypeSingleNodeUpgrade, "node-1")
	p = h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStateSingleNodeUpgrading)
	if p.Status.NextMaintenanceWindow != nil {
		t.Errorf("status.nextMaintenanceWindow %s stays with no window", p.Status.NextMaintenanceWindow)
	}
	if !slices.ContainsFunc(h.Events(p.Name), func(e string) bool {
		return strings.HasPrefix(e, "MaintenanceWindowOpened: Nodes may begin their upgrade again: spec.nodeUpgradeOption.maintenanceWindows is empty")
	}) {
		t.Errorf("no event tells the node may begin: %v", h.Events(p.Name))
	}
}

package phase

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/window"
)

// windows is how the plan's maintenance windows stand in one pass.
type windows struct {
	// closed: no node may begin its upgrade now.
	closed bool
	// next is when the next window opens, while closed; zero when the
	// windows cannot be read.
	next window.Opening
	// closes is when the open window closes; zero while closed, and when
	// no window is set or they never close.
	closes time.Time
	// hold is what a node held by a closed window says: when the next
	// opens, or what keeps the windows from being read.
	hold string
}

// maintenanceWindows reads the plan's windows at now. Windows that cannot
// be read hold every node until they are fixed: a node never begins
// outside the windows the operator meant.
func (s *Scope) maintenanceWindows(now time.Time) windows {
	sched, err := window.Parse(s.Plan.MaintenanceWindows())
	switch {
	case err != nil:
		return windows{closed: true, hold: fmt.Sprintf("the maintenance windows cannot be read: %v; correct %s (it may be changed while the plan runs)", err, window.Path)}
	case sched.Open(now):
		return windows{closes: sched.Closes(now)}
	}
	next := sched.NextOpen(now)
	return windows{closed: true, next: next, hold: "the next opens at " + next.String()}
}

// recordWindowWait keeps status.nextMaintenanceWindow and
// status.maintenanceWindowWaits up to date, and tells by an event when the
// nodes start waiting for a window and when they may go again. waiting:
// nodes that have not begun wait for a window; idle: and no node is under
// way; left counts the nodes not upgraded.
func (s *Scope) recordWindowWait(w windows, waiting, idle bool, left int) {
	st := &s.Plan.Status
	pipeline.RecordWindowWait(st, idle, s.Now())
	if waiting && !w.next.At.IsZero() {
		next := metav1.NewTime(w.next.At.UTC())
		if st.NextMaintenanceWindow == nil {
			s.Event(corev1.EventTypeNormal, v1beta1.EventMaintenanceWindowClosed,
				"No maintenance window is open: no other node begins its upgrade until the next opens at %s (a node under way finishes); %d nodes left", w.next, left)
		}
		if st.NextMaintenanceWindow == nil || !st.NextMaintenanceWindow.Equal(&next) {
			st.NextMaintenanceWindow = &next
		}
		return
	}
	if st.NextMaintenanceWindow == nil {
		return
	}
	st.NextMaintenanceWindow = nil
	if w.closed || left == 0 {
		return
	}
	why := "a maintenance window is open"
	if !w.closes.IsZero() {
		why += " until " + timestamp(w.closes)
	}
	if len(s.Plan.MaintenanceWindows()) == 0 {
		why = window.Path + " is empty"
	}
	s.Event(corev1.EventTypeNormal, v1beta1.EventMaintenanceWindowOpened, "Nodes may begin their upgrade again: %s; %d nodes left", why, left)
}

// nextWindowChange is how long until the windows open or close, for a pass
// to look then (zero: nothing to look at): nothing watched changes as they
// do.
func (w windows) nextWindowChange(now time.Time, waiting, nodesToBegin bool) time.Duration {
	switch {
	case waiting && !w.next.At.IsZero():
		return max(w.next.At.Sub(now), time.Second)
	case !w.closed && nodesToBegin && !w.closes.IsZero():
		return max(w.closes.Sub(now), time.Second)
	}
	return 0
}

package pipeline

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

func TestPausesStretchDeadlines(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	st := &v1beta1.UpgradePlanStatus{}
	if RecordPause(st, false, at(0)) {
		t.Fatal("a running plan recorded a pause")
	}
	if !RecordPause(st, true, at(10)) || RecordPause(st, true, at(11)) {
		t.Fatal("a pause must open once")
	}
	// Open pause: from 10 to now.
	if got := PausedSince(st, at(5), at(40)); got != 30*time.Minute {
		t.Errorf("open pause counted %s, want 30m", got)
	}
	if !RecordPause(st, false, at(70)) || RecordPause(st, false, at(71)) {
		t.Fatal("a pause must close once")
	}
	for _, c := range []struct {
		since, now int
		want       time.Duration
	}{
		{0, 100, 60 * time.Minute},  // the whole pause
		{30, 100, 40 * time.Minute}, // begun during the pause
		{80, 100, 0},                // after it
		{0, 40, 30 * time.Minute},   // now inside the pause's span
	} {
		if got := PausedSince(st, at(c.since), at(c.now)); got != c.want {
			t.Errorf("paused from minute %d to %d: %s, want %s", c.since, c.now, got, c.want)
		}
	}
	// A 30-minute deadline begun at 0 is not overdue at 90: 60 of its
	// minutes were paused.
	if d := Deadline(st, at(0), 30*time.Minute, at(90)); !d.Equal(at(90)) {
		t.Errorf("deadline %s, want minute 90", d)
	}
	for i := range 2 * maxPauses {
		RecordPause(st, true, at(100+2*i))
		RecordPause(st, false, at(101+2*i))
	}
	if len(st.Pauses) != maxPauses {
		t.Fatalf("%d pauses kept, want %d", len(st.Pauses), maxPauses)
	}
	if got := PausedSince(st, at(0), at(1000)); got < 60*time.Minute+2*maxPauses*time.Minute {
		t.Errorf("merging old pauses lost paused time: %s", got)
	}
}

// TestWindowWaitsAreNotPauses: a wait for a maintenance window is recorded
// on its own, stretches no deadline, and ends, with the next window
// forgotten, when the plan ends.
func TestWindowWaitsAreNotPauses(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	st := &v1beta1.UpgradePlanStatus{CurrentPhase: v1beta1.PhaseNodeUpgrading}
	if !RecordWindowWait(st, true, t0) || RecordWindowWait(st, true, t0.Add(time.Minute)) {
		t.Fatal("a wait must open once")
	}
	if len(st.Pauses) != 0 || len(st.MaintenanceWindowWaits) != 1 {
		t.Fatalf("pauses %+v, waits %+v", st.Pauses, st.MaintenanceWindowWaits)
	}
	if d := Deadline(st, t0, time.Hour, t0.Add(2*time.Hour)); !d.Equal(t0.Add(time.Hour)) {
		t.Errorf("a wait for a window stretched a deadline to %s", d)
	}
	next := metav1.NewTime(t0.Add(10 * time.Hour))
	st.NextMaintenanceWindow = &next
	SetPhase(st, v1beta1.PhaseFailed, t0.Add(time.Hour))
	if st.NextMaintenanceWindow != nil || st.MaintenanceWindowWaits[0].End == nil || !st.MaintenanceWindowWaits[0].End.Equal(ptr.To(metav1.NewTime(t0.Add(time.Hour)))) {
		t.Errorf("a failed plan still waits for a window: next %v, waits %+v", st.NextMaintenanceWindow, st.MaintenanceWindowWaits)
	}
}

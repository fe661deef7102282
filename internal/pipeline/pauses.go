package pipeline

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// maxPauses bounds status.pauses and status.maintenanceWindowWaits; past
// it the two oldest merge into one that spans both, which only ever
// lengthens a deadline.
const maxPauses = 16

// RecordPause keeps status.pauses up to date with spec.paused as seen at
// now: a pause opens when the plan is first seen paused and closes when it
// is first seen running again. It reports whether it changed the status.
func RecordPause(st *v1beta1.UpgradePlanStatus, paused bool, now time.Time) bool {
	return record(&st.Pauses, paused, now)
}

// RecordWindowWait keeps status.maintenanceWindowWaits up to date, as
// RecordPause does status.pauses: waiting is whether the node upgrade
// waits for a maintenance window with no node under way.
func RecordWindowWait(st *v1beta1.UpgradePlanStatus, waiting bool, now time.Time) bool {
	return record(&st.MaintenanceWindowWaits, waiting, now)
}

// record opens a span of holds when held and none is open, and closes the
// open one when not held.
func record(spans *[]v1beta1.Pause, held bool, now time.Time) bool {
	open := len(*spans) > 0 && (*spans)[len(*spans)-1].End == nil
	switch {
	case held && !open:
		*spans = append(*spans, v1beta1.Pause{Start: metav1.NewTime(now)})
		if len(*spans) > maxPauses {
			(*spans)[1].Start = (*spans)[0].Start
			*spans = (*spans)[1:]
		}
		return true
	case !held && open:
		end := metav1.NewTime(now)
		(*spans)[len(*spans)-1].End = &end
		return true
	}
	return false
}

// PausedSince is how much of the time from since to now the plan spent
// paused. Every deadline of the plan adds it: no clock runs while paused.
func PausedSince(st *v1beta1.UpgradePlanStatus, since, now time.Time) time.Duration {
	var d time.Duration
	for _, p := range st.Pauses {
		start, end := p.Start.Time, now
		if p.End != nil {
			end = p.End.Time
		}
		start, end = later(start, since), earlier(end, now)
		if end.After(start) {
			d += end.Sub(start)
		}
	}
	return d
}

// Deadline is when something that began at since and may take limit of
// the plan's running time is overdue.
func Deadline(st *v1beta1.UpgradePlanStatus, since time.Time, limit time.Duration, now time.Time) time.Time {
	return since.Add(limit + PausedSince(st, since, now))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Package pipeline holds the order of an upgrade's phases and the rules for
// moving between them, as pure functions.
package pipeline

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Step is one phase of the pipeline: its name, as events call it, and the
// values status.currentPhase takes while its work runs and once it is done.
type Step struct {
	Name      string
	Active    v1beta1.UpgradePlanPhase
	Completed v1beta1.UpgradePlanPhase
}

// Steps are the pipeline's phases in the order they run.
var Steps = []Step{
	{v1beta1.StepInitialize, v1beta1.PhaseInitializing, v1beta1.PhaseInitialized},
	{v1beta1.StepISODownload, v1beta1.PhaseISODownloading, v1beta1.PhaseISODownloaded},
	{v1beta1.StepRepoCreate, v1beta1.PhaseRepoCreating, v1beta1.PhaseRepoCreated},
	{v1beta1.StepMetadataPopulate, v1beta1.PhaseMetadataPopulating, v1beta1.PhaseMetadataPopulated},
	{v1beta1.StepImagePreload, v1beta1.PhaseImagePreloading, v1beta1.PhaseImagePreloaded},
	{v1beta1.StepClusterUpgrade, v1beta1.PhaseClusterUpgrading, v1beta1.PhaseClusterUpgraded},
	{v1beta1.StepNodeUpgrade, v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded},
	{v1beta1.StepImageCleanup, v1beta1.PhaseCleaningUp, v1beta1.PhaseCleanedUp},
}

// Position says where a phase value sits in the pipeline.
type Position struct {
	// Index of the step in Steps; -1 before the first step and for the
	// terminal phases.
	Index int
	// Active is true for a step's active value, false for its completed one.
	Active bool
}

// Locate returns the position of a phase value; ok is false for the empty
// phase, the terminal phases and unknown values.
func Locate(p v1beta1.UpgradePlanPhase) (pos Position, ok bool) {
	for i, s := range Steps {
		switch p {
		case s.Active:
			return Position{Index: i, Active: true}, true
		case s.Completed:
			return Position{Index: i, Active: false}, true
		}
	}
	return Position{Index: -1}, false
}

// StepOf returns the step a phase value belongs to.
func StepOf(p v1beta1.UpgradePlanPhase) (Step, bool) {
	pos, ok := Locate(p)
	if !ok {
		return Step{}, false
	}
	return Steps[pos.Index], true
}

// Next returns the phase that follows p on the way to success: a step's
// completed value after its active one, the next step's active value after a
// completed one, Succeeded after the last step, and the first step's active
// value for a plan that has not started. Terminal and unknown phases have no
// next phase.
func Next(p v1beta1.UpgradePlanPhase) (v1beta1.UpgradePlanPhase, bool) {
	if p == "" {
		return Steps[0].Active, true
	}
	pos, ok := Locate(p)
	switch {
	case !ok:
		return "", false
	case pos.Active:
		return Steps[pos.Index].Completed, true
	case pos.Index == len(Steps)-1:
		return v1beta1.PhaseSucceeded, true
	default:
		return Steps[pos.Index+1].Active, true
	}
}

// SetPhase moves the status to a phase and records the transition in the
// history, one entry per phase change; a terminal phase ends any wait for
// a maintenance window. It reports whether anything changed.
func SetPhase(st *v1beta1.UpgradePlanStatus, p v1beta1.UpgradePlanPhase, now time.Time) bool {
	if st.CurrentPhase == p {
		return false
	}
	st.CurrentPhase = p
	st.PhaseTransitionTimestamps = append(st.PhaseTransitionTimestamps, v1beta1.PhaseTransitionTimestamp{
		Phase:                    p,
		PhaseTransitionTimestamp: metav1.NewTime(now),
	})
	if p.IsTerminal() {
		// A plan that ended, failed or aborted waits for no maintenance
		// window.
		st.NextMaintenanceWindow = nil
		RecordWindowWait(st, false, now)
	}
	return true
}

// EnteredAt returns when the plan last entered phase p, and whether it did.
// Deadlines of a phase are measured from here.
func EnteredAt(st *v1beta1.UpgradePlanStatus, p v1beta1.UpgradePlanPhase) (time.Time, bool) {
	h := st.PhaseTransitionTimestamps
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Phase == p {
			return h[i].PhaseTransitionTimestamp.Time, true
		}
	}
	return time.Time{}, false
}

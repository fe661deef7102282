package pipeline

import (
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Mode is what the plan reconciler does with a plan on one pass.
type Mode int

// The modes, in the order Decide considers them.
const (
	// Run moves the plan through the pipeline as far as it goes: the
	// phase under way runs, and the next one starts once it is done.
	Run Mode = iota
	// AwaitRetry keeps a plan that failed for a reason a retry can cure as
	// it is, until the retry annotation asks for a retry or the retry
	// window closes.
	AwaitRetry
	// Retry removes what failed and takes the plan back to the failed step:
	// the retry annotation asked for it.
	Retry
	// Finish cleans up after a plan that ended, is being deleted or was not
	// retried in time, and releases it.
	Finish
	// DryRun previews the upgrade and ends the plan in Previewed
	// (spec.dryRun).
	DryRun
	// Queued waits for the plan that holds the cluster's one upgrade slot.
	Queued
	// Paused holds the plan at a safe point, between two phases
	// (spec.paused).
	Paused
	// Abort ends the plan in Aborted (spec.abort): it has not reached
	// ClusterUpgrade, or it is at a safe point. Finish cleans up after it.
	Abort
)

// Modes lists every mode.
var Modes = []Mode{Run, AwaitRetry, Retry, Finish, DryRun, Queued, Paused, Abort}

var modeNames = map[Mode]string{
	Run: "Run", AwaitRetry: "AwaitRetry", Retry: "Retry", Finish: "Finish", DryRun: "DryRun", Queued: "Queued", Paused: "Paused", Abort: "Abort",
}

func (m Mode) String() string { return modeNames[m] }

// Facts is what Decide needs besides the plan.
type Facts struct {
	// Now is the time the retry window is measured against.
	Now time.Time
	// SlotHolder is the plan that holds the upgrade slot (SlotHolder), nil
	// when none does. The reconciler reads it, from the API server, only
	// for a plan WaitsForSlot says may wait for it.
	SlotHolder *v1beta1.UpgradePlan
	// NodeUnderWay: a node is between the start of its drain (or of its
	// single-node upgrade) and its return; an abort waits for it. The
	// reconciler reads it from the plan's node states
	// (nodestate.UnderWay), only for a plan whose abort was asked for.
	NodeUnderWay bool
}

// Decision is the mode of one pass, with what the mode needs to know.
type Decision struct {
	Mode Mode
	// Holder is the plan a Queued plan waits for.
	Holder *v1beta1.UpgradePlan
	// RetryIn is how long the retry window of an AwaitRetry plan stays
	// open.
	RetryIn time.Duration
	// RetryExpired: a Finish because the retry window closed before a retry
	// was asked for.
	RetryExpired bool
}

// WaitsForSlot reports whether a plan's mode depends on who holds the
// upgrade slot: a plan that has not started, is not being deleted and
// changes something.
func WaitsForSlot(p *v1beta1.UpgradePlan) bool {
	return !p.IsStarted() && !p.IsDryRun() && p.DeletionTimestamp.IsZero()
}

// AtSafePoint reports whether nothing of the upgrade is under way in
// phase p: the plan has not started, or sits between two phases.
func AtSafePoint(p v1beta1.UpgradePlanPhase) bool {
	if p == "" {
		return true
	}
	pos, ok := Locate(p)
	return ok && !pos.Active
}

// Decide picks what a pass does with plan p. A failed plan that can still
// be retried comes first (a retry asked for, or its window closed); then a
// plan that ended or is deleted is finished; a dry run previews; an aborted
// plan ends Aborted once it may (CanAbortNow; until then it runs, starting
// no node); a plan that has not started waits while another one holds the
// slot; a paused plan holds at a safe point; anything else runs. Nodes
// excluded from the upgrade do not change the mode, only what Run's node
// upgrade reads.
//
// A pass asks again after each phase transition of Run: a plan paused while
// a phase was under way holds at the next safe point.
func Decide(p *v1beta1.UpgradePlan, f Facts) Decision {
	if p.AwaitsRetry() {
		left := p.LastFailure().RetryDeadline.Sub(f.Now)
		switch {
		case left <= 0:
			// Once begun, the cleanup is never cut short by a late retry.
			return Decision{Mode: Finish, RetryExpired: true}
		case p.RetryRequested() == "":
			return Decision{Mode: AwaitRetry, RetryIn: left}
		}
		return Decision{Mode: Retry}
	}
	switch {
	case !p.DeletionTimestamp.IsZero() || p.IsFinished():
		return Decision{Mode: Finish}
	case p.IsDryRun():
		return Decision{Mode: DryRun}
	case p.AbortRequested() && CanAbortNow(p, f):
		return Decision{Mode: Abort}
	case WaitsForSlot(p) && f.SlotHolder != nil && f.SlotHolder.Name != p.Name:
		return Decision{Mode: Queued, Holder: f.SlotHolder}
	case p.IsPaused() && AtSafePoint(p.Status.CurrentPhase):
		return Decision{Mode: Paused}
	}
	return Decision{Mode: Run}
}

// CanAbortNow reports whether an aborted plan may end now: nothing of the
// release has reached the cluster yet (before ClusterUpgrade), or it sits
// between two phases, or its node upgrade has no node under way
// (f.NodeUnderWay).
func CanAbortNow(p *v1beta1.UpgradePlan, f Facts) bool {
	phase := p.Status.CurrentPhase
	return AtSafePoint(phase) || BeforeClusterUpgrade(phase) || (phase == v1beta1.PhaseNodeUpgrading && !f.NodeUnderWay)
}

// BeforeClusterUpgrade reports whether a plan in phase p has not begun its
// cluster upgrade: nothing of the release has reached the cluster.
func BeforeClusterUpgrade(p v1beta1.UpgradePlanPhase) bool {
	if p == "" {
		return true
	}
	pos, ok := Locate(p)
	cluster, _ := Locate(v1beta1.PhaseClusterUpgrading)
	return ok && pos.Index < cluster.Index
}

// NodesDone reports whether a plan in phase p has upgraded its nodes: it
// only cleans up and verifies after.
func NodesDone(p v1beta1.UpgradePlanPhase) bool {
	pos, ok := Locate(p)
	nodes, _ := Locate(v1beta1.PhaseNodeUpgrading)
	return ok && (pos.Index > nodes.Index || p == v1beta1.PhaseNodeUpgraded)
}

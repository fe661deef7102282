package vmledger

import (
	"sort"
	"time"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// Facts are what the cluster shows of a VM now.
type Facts struct {
	// VM is nil when the VirtualMachine is gone.
	VM *VMFacts
	// VMI is nil when the VM has no instance.
	VMI *VMIFacts
	// Migrations are the instance's migrations the cluster still has.
	Migrations []MigrationFacts
}

// VMFacts are what a VirtualMachine shows.
type VMFacts struct {
	// RunStrategy is its effective run strategy.
	RunStrategy string
	// ByUpgrade: the upgrade stopped it (it carries the
	// restore-run-strategy annotation the toolkit sets with Halted).
	ByUpgrade bool
	// Consent: its shutdown-for-upgrade annotation names the plan.
	Consent bool
	// StopRequested: someone asked KubeVirt to stop it (virtctl stop of a
	// RerunOnFailure or Manual VM keeps its run strategy).
	StopRequested bool
}

// halted reports whether the VM's run strategy keeps it off.
func (v *VMFacts) halted() bool { return v.RunStrategy == cluster.RunStrategyHalted }

// startedByHand reports whether the VM's run strategy starts and stops
// instances only on request (Manual) or once (Once): an instance of such a
// VM that goes away was stopped by request, not lost.
func (v *VMFacts) startedByHand() bool {
	return v.RunStrategy == cluster.RunStrategyManual || v.RunStrategy == cluster.RunStrategyOnce
}

// VMIFacts are what a VirtualMachineInstance shows.
type VMIFacts struct {
	// Instance names it (the start of its UID).
	Instance string
	Node     string
	Phase    string
	// Final: it Succeeded or Failed.
	Final bool
}

// MigrationFacts are what a VirtualMachineInstanceMigration shows.
type MigrationFacts struct {
	Name    string
	Phase   string
	Created time.Time
	// Started and Ended are when the migration ran, from its state; zero
	// when unknown.
	Started, Ended time.Time
	Source, Target string
	// Reason is why it failed.
	Reason string
}

func (m *MigrationFacts) finished() bool {
	return m.Phase == cluster.MigrationPhaseSucceeded || m.Phase == cluster.MigrationPhaseFailed
}

// Observe compares the record with what the cluster shows and returns what
// happened since the record was last brought up to date, in order; it does
// not change the record. stallAfter is how long an attempt may run
// without completing before it counts as making no progress. next is when
// to look again, even if nothing changes, for an attempt that would stall
// then; zero when there is none. Who made a change (Event.By) is for the
// caller to add: it reads the VirtualMachine's managedFields.
func Observe(r *Record, f Facts, now time.Time, stallAfter time.Duration) (added []Event, next time.Time) {
	// A copy, to read the state each event leaves.
	cur := *r
	cur.Events = append([]Event(nil), r.Events...)
	add := func(e Event) {
		cur.Events = append(cur.Events, e)
		added = append(added, e)
	}
	migs := append([]MigrationFacts(nil), f.Migrations...)
	sort.Slice(migs, func(i, j int) bool { return migs[i].Created.Before(migs[j].Created) })
	for i := range migs {
		m := &migs[i]
		state := cur.Now()
		source := or(m.Source, state.Node)
		if state.Last != nil && m.Created.Before(state.Last.At) {
			// Created before the VM's latest stop or start: it was of an
			// instance that is gone, and its end is no news.
			continue
		}
		switch {
		case m.Phase == cluster.MigrationPhaseSucceeded && !cur.has(Migrated, m.Name):
			if n := len(cur.Events); n > 0 && cur.Events[n-1].Kind == Migrated && cur.Events[n-1].Migration == "" && state.Node == m.Target {
				// The move was seen on the instance before its migration
				// said Succeeded: the same move.
				continue
			}
			add(Event{At: orTime(m.Ended, now), Kind: Migrated, Node: source, To: or(m.Target, targetOf(f)), Took: took(m), Migration: m.Name})
		case m.Phase == cluster.MigrationPhaseFailed && !cur.has(MigrationFailed, m.Name):
			if !state.Running {
				// The VM stopped while it migrated: the stop is the news.
				continue
			}
			add(Event{At: orTime(m.Ended, now), Kind: MigrationFailed, Node: source, Migration: m.Name, Attempt: cur.attempts() + 1, Why: m.Reason})
		case !m.finished() && !cur.has(MigrationStalled, m.Name) && state.Running:
			// A pending attempt after a failure waits out KubeVirt's
			// backoff: that is KubeVirt retrying, not a new stall.
			if m.Phase == cluster.MigrationPhasePending && cur.attempts() > 0 {
				continue
			}
			began := orTime(m.Started, m.Created)
			if at := began.Add(stallAfter); now.Before(at) {
				if next.IsZero() || at.Before(next) {
					next = at
				}
				continue
			}
			add(Event{At: now, Kind: MigrationStalled, Node: source, Migration: m.Name, Attempt: cur.attempts() + 1, Took: now.Sub(began), Why: "phase " + orPending(m.Phase)})
		}
	}
	state := cur.Now()
	running := f.VMI != nil && !f.VMI.Final
	switch {
	case state.Deleted:
	case f.VM == nil:
		add(Event{At: now, Kind: Deleted, Node: state.Node, Cause: CauseOwner})
	case state.Running && !running:
		add(stopEvent(f, state, now))
	case !state.Running && running && f.VMI.Node != "":
		// (An instance not yet scheduled does not run yet.)
		add(Event{At: now, Kind: Started, Node: f.VMI.Node, Instance: f.VMI.Instance, Cause: startCause(state, f)})
	case state.Running && running && state.Instance != "" && f.VMI.Instance != state.Instance:
		// Another instance runs: the one seen last ended in between.
		add(Event{At: now, Kind: Ended, Node: state.Node, Why: endedReplaced})
		add(Event{At: now, Kind: Started, Node: f.VMI.Node, Instance: f.VMI.Instance, Cause: CauseKubeVirt})
	case state.Running && running && f.VMI.Node != state.Node && f.VMI.Node != "" && !migrating(migs):
		// A move whose migration the cluster no longer has (one that has
		// not said Succeeded yet records the move when it does).
		add(Event{At: now, Kind: Migrated, Node: state.Node, To: f.VMI.Node})
	}
	return added, next
}

// stopEvent says how a VM that ran stopped: the upgrade's stop (with the
// operator's consent or as planned), or its owner's (a Halted run strategy
// not set by the upgrade, or a stop request of a Manual VM); a VM that still
// asks to run and lost its instance ended, even if KubeVirt starts it again.
func stopEvent(f Facts, state Now, now time.Time) Event {
	node := state.Node
	if f.VMI != nil && f.VMI.Node != "" {
		node = f.VMI.Node
	}
	switch {
	case f.VM.halted() && f.VM.ByUpgrade && f.VM.Consent:
		return Event{At: now, Kind: StoppedEvent, Node: node, Cause: CauseConsent}
	case f.VM.halted() && f.VM.ByUpgrade:
		return Event{At: now, Kind: StoppedEvent, Node: node, Cause: CauseUpgrade}
	case f.VM.halted(), f.VM.startedByHand(), f.VM.StopRequested:
		return Event{At: now, Kind: StoppedEvent, Node: node, Cause: CauseOwner}
	}
	why := endedGone
	switch {
	case f.VMI == nil:
	case f.VMI.Phase == cluster.VMIPhaseFailed:
		why = endedFailed
	case f.VMI.Phase == cluster.VMIPhaseSucceeded:
		why = endedSucceeded
	default:
		why = "its instance " + f.VMI.Phase
	}
	return Event{At: now, Kind: Ended, Node: node, Why: why}
}

// Why an instance ended.
const (
	endedSucceeded = "its instance Succeeded"
	endedFailed    = "its instance Failed"
	endedGone      = "its instance went away"
	endedReplaced  = "its instance was replaced"
)

// startCause says who started a VM again: the restore after the upgrade
// stopped it; KubeVirt after its instance ended, where its run strategy
// restarts it (Always, or RerunOnFailure after a failure); else its owner.
func startCause(state Now, f Facts) Cause {
	last := state.Last
	switch {
	case last == nil:
		return CauseOwner
	case last.Kind == StoppedEvent && (last.Cause == CauseUpgrade || last.Cause == CauseConsent) && !f.VM.ByUpgrade:
		return CauseRestore
	case last.Kind == Ended && (f.VM.RunStrategy == cluster.RunStrategyAlways ||
		f.VM.RunStrategy == cluster.RunStrategyRerunOnFailure && last.Why != endedSucceeded):
		return CauseKubeVirt
	}
	return CauseOwner
}

// migrating reports whether one of the migrations has not finished.
func migrating(migs []MigrationFacts) bool {
	for i := range migs {
		if !migs[i].finished() {
			return true
		}
	}
	return false
}

func took(m *MigrationFacts) time.Duration {
	if m.Started.IsZero() || m.Ended.Before(m.Started) {
		return 0
	}
	return m.Ended.Sub(m.Started)
}

func targetOf(f Facts) string {
	if f.VMI != nil {
		return f.VMI.Node
	}
	return ""
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orPending(phase string) string { return or(phase, cluster.MigrationPhasePending) }

func orTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// Retry says whether the operator's retry-migration value asks for a retry
// now: the VM's migration is in trouble and the value was not acted on yet.
func (r *Record) Retry(value string) bool {
	return value != "" && value != r.lastRetry() && r.Trouble() != nil
}

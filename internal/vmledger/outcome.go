package vmledger

import (
	"fmt"
	"strings"
	"time"
)

// Result is how a VM that ran when the plan started stands at its end.
type Result string

// The results.
const (
	// Runs: it runs.
	Runs Result = "runs"
	// ByOwner: its owner stopped or deleted it; recorded.
	ByOwner Result = "stopped by its owner"
	// StaysOff: the upgrade shut it down as planned and spec.restoreVM
	// leaves it off.
	StaysOff Result = "stays off"
	// Off: it is off, and neither the plan nor its owner wanted that.
	Off Result = "off"
)

// Observed is what the cluster shows of a VM now.
type Observed struct {
	// Exists: the VirtualMachine exists.
	Exists bool
	// Running: it has an instance that has not ended.
	Running bool
	// Node is where its instance runs.
	Node string
}

// Outcome is how one VM stands at the plan's end, and why.
type Outcome struct {
	VM string
	// Node is where it ran when the plan started.
	Node   string
	Result Result
	// Story says what happened to it, for a person.
	Story string
}

// Outcomes judges every VM that ran when the plan started, by what the
// cluster shows now (observe) and what the ledger recorded of it.
func (l *Ledger) Outcomes(observe func(vm string) Observed) []Outcome {
	var out []Outcome
	for i := range l.Records {
		r := &l.Records[i]
		if r.State == Stopped {
			continue
		}
		o := Outcome{VM: r.VM, Node: r.Node}
		obs, now := observe(r.VM), r.Now()
		last := now.Last
		switch {
		case obs.Running:
			o.Result, o.Story = Runs, "runs on "+obs.Node+r.journey()
		case now.Deleted:
			o.Result, o.Story = ByOwner, "deleted"+at(last)
		case now.Running || last == nil:
			o.Result, o.Story = Off, fmt.Sprintf("is off, and the ledger has not recorded why yet (it last saw it run on %s)", now.Node)
		case last.Kind == StoppedEvent && last.Cause == CauseOwner:
			o.Result, o.Story = ByOwner, "stopped by its owner"+by(last)+" on "+last.Node+at(last)
		case last.Kind == StoppedEvent && last.Cause == CauseUpgrade && !r.Restore:
			o.Result, o.Story = StaysOff, "shut down by the upgrade as planned on "+last.Node+at(last)+" ("+r.Why+"); spec.restoreVM is false, so it stays off"
		case last.Kind == StoppedEvent:
			o.Result, o.Story = Off, "shut down by the upgrade"+consent(last)+" on "+last.Node+at(last)+" and not started again"
		default:
			o.Result, o.Story = Off, fmt.Sprintf("%s on %s%s, stopped by neither the upgrade nor its owner", last.Why, last.Node, at(last))
		}
		out = append(out, o)
	}
	return out
}

// journey sums up how a running VM got where it runs.
func (r *Record) journey() string {
	var moves, failures int
	var parts []string
	for _, e := range r.Events {
		switch {
		case e.Kind == Migrated:
			moves++
		case e.Kind == MigrationFailed:
			failures++
		case e.Kind == Started && e.Cause == CauseRestore:
			parts = append(parts, "started again by the restore after the upgrade shut it down")
		case e.Kind == Started && e.Cause == CauseKubeVirt:
			parts = append(parts, "started again by KubeVirt after its instance ended")
		case e.Kind == Started:
			parts = append(parts, "started by its owner"+by(&e))
		}
	}
	if moves > 0 {
		parts = append([]string{fmt.Sprintf("live-migrated %d time(s)", moves)}, parts...)
	}
	if failures > 0 {
		parts = append(parts, fmt.Sprintf("%d failed migration(s)", failures))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// Do says what the operator can do about a VM that is off.
func Do(vm string) string {
	ns, name, _ := strings.Cut(vm, "/")
	return fmt.Sprintf("start it (virtctl start %s -n %s), or, if it should stay off, stop it (virtctl stop %s -n %s), which the ledger records as its owner's stop", name, ns, name, ns)
}

func at(e *Event) string {
	if e == nil {
		return ""
	}
	return " at " + e.At.UTC().Format(time.RFC3339)
}

func by(e *Event) string {
	if e.By == "" {
		return ""
	}
	return " (" + e.By + ")"
}

func consent(e *Event) string {
	if e.Cause != CauseConsent {
		return ""
	}
	if e.By == "" {
		return " with the operator's consent"
	}
	return " with the operator's consent (" + e.By + ")"
}

// Summary says in one line where a VM stands and how it got there, for
// `upgrade-toolkit status`.
func (r *Record) Summary() string {
	now := r.Now()
	last := now.Last
	switch {
	case now.Deleted:
		return "deleted" + at(last)
	case now.Running:
		s := "runs on " + now.Node + r.journey()
		if t := r.Trouble(); t != nil {
			s += "; " + t.String()
		}
		return s
	case last == nil:
		return "off, as at the start"
	case last.Kind == StoppedEvent:
		return "stopped (" + string(last.Cause) + by(last) + ") on " + last.Node + at(last)
	}
	return fmt.Sprintf("off: %s on %s%s", last.Why, last.Node, at(last))
}

// String tells a migration trouble in one line.
func (t *Trouble) String() string {
	what := "failed: " + t.Reason
	if t.Stalled {
		what = fmt.Sprintf("no progress after %s", t.Took.Round(time.Second))
	}
	return fmt.Sprintf("migration off %s in trouble: %d attempt(s) since %s, last %s %s", t.Node, t.Attempts, t.Since.UTC().Format(time.RFC3339), t.Migration, what)
}

package vmledger

import (
	"sort"
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Now is where a VM stands according to its record.
type Now struct {
	// Running: it has an instance that runs (or is paused).
	Running bool
	// Node is where it runs, or ran last.
	Node string
	// Instance names its instance, "" when unknown.
	Instance string
	// Deleted: the VirtualMachine is gone.
	Deleted bool
	// Last is the event that stopped it, or started it again, nil when it
	// stands as at the start.
	Last *Event
}

// Now reads the VM's state from its start and its events.
func (r *Record) Now() Now {
	n := Now{Running: r.State != Stopped, Node: r.Node, Instance: r.Instance}
	for i := range r.Events {
		e := &r.Events[i]
		switch e.Kind {
		case Migrated:
			n.Running, n.Node = true, e.To
		case StoppedEvent, Ended:
			n.Running, n.Last = false, e
			if e.Node != "" {
				n.Node = e.Node
			}
		case Started:
			n.Running, n.Node, n.Instance, n.Last = true, e.Node, e.Instance, e
		case Deleted:
			n.Running, n.Deleted, n.Last = false, true, e
		}
	}
	return n
}

// Trouble is a VM's live migration that fails or makes no progress.
type Trouble struct {
	// Node is the node it must leave.
	Node string
	// Migration names the latest attempt that failed or stalled.
	Migration string
	// Attempts is how many migrations failed or stalled.
	Attempts int
	// Since is when the first of them failed or was seen stalled.
	Since time.Time
	// Last is when the latest failed or was seen stalled.
	Last time.Time
	// Reason is the latest failure's reason.
	Reason string
	// Stalled: the latest attempt makes no progress, for Took when it was
	// seen.
	Stalled bool
	Took    time.Duration
	// Retries counts the operator's retries of this trouble.
	Retries int
}

// Trouble returns the VM's failing or stalled migration: the attempts
// since its last successful migration, stop or start; nil when there is
// none. An operator's retry keeps the attempts counted but starts Since
// again.
func (r *Record) Trouble() *Trouble {
	var t *Trouble
	attempts := map[string]bool{}
	for _, e := range r.Events {
		switch e.Kind {
		case MigrationFailed, MigrationStalled:
			if t == nil {
				t = &Trouble{Node: e.Node, Since: e.At}
			}
			attempts[e.Migration] = true
			t.Attempts = len(attempts)
			t.Migration, t.Last = e.Migration, e.At
			t.Stalled, t.Took = e.Kind == MigrationStalled, e.Took
			if e.Kind == MigrationFailed {
				t.Reason = e.Why
			}
		case MigrationRetried:
			if t != nil {
				t.Since = e.At
				t.Retries++
			}
		case Migrated, StoppedEvent, Started, Ended, Deleted:
			t = nil
			clear(attempts)
		}
	}
	return t
}

// attempts counts the migrations of the current trouble, for the next
// event's attempt number.
func (r *Record) attempts() int {
	if t := r.Trouble(); t != nil {
		return t.Attempts
	}
	return 0
}

// lastRetry is the retry-migration value last acted on, "" when none.
func (r *Record) lastRetry() string {
	for i := len(r.Events) - 1; i >= 0; i-- {
		if r.Events[i].Kind == MigrationRetried {
			return r.Events[i].Value
		}
	}
	return ""
}

// Moves reports whether the VM leaves a draining node by live migration:
// it could at the start, or it did since.
func (r *Record) Moves() bool {
	if r.Leave == LeaveMigrate {
		return true
	}
	for _, e := range r.Events {
		if e.Kind == Migrated {
			return true
		}
	}
	return false
}

// Counts counts, per node, what the upgrade did to the VMs there and what is
// left (v1beta1.NodeVMs); upgraded says which nodes are upgraded already,
// where nothing is left to move. Nodes with nothing to count have no entry.
func (l *Ledger) Counts(upgraded func(node string) bool) map[string]v1beta1.NodeVMs {
	out := map[string]v1beta1.NodeVMs{}
	add := func(node string, f func(*v1beta1.NodeVMs)) {
		if node == "" {
			return
		}
		c := out[node]
		f(&c)
		out[node] = c
	}
	for i := range l.Records {
		r := &l.Records[i]
		for _, e := range r.Events {
			switch {
			case e.Kind == Migrated:
				add(e.Node, func(c *v1beta1.NodeVMs) { c.Moved++ })
			case e.Kind == StoppedEvent && (e.Cause == CauseUpgrade || e.Cause == CauseConsent):
				add(e.Node, func(c *v1beta1.NodeVMs) { c.Stopped++ })
			}
		}
		now := r.Now()
		if !now.Running || upgraded(now.Node) {
			continue
		}
		switch t := r.Trouble(); {
		case t != nil:
			add(now.Node, func(c *v1beta1.NodeVMs) { c.Failed++ })
		case r.Moves():
			add(now.Node, func(c *v1beta1.NodeVMs) { c.Pending++ })
		}
	}
	for node, c := range out {
		c.ToMove = c.Moved + c.Pending + c.Failed
		out[node] = c
	}
	return out
}

// Troubles returns the running VMs of the node whose migration fails or
// makes no progress, by VM, sorted.
func (l *Ledger) Troubles(node string) []VMTrouble {
	var out []VMTrouble
	for i := range l.Records {
		r := &l.Records[i]
		now := r.Now()
		if !now.Running || now.Node != node {
			continue
		}
		if t := r.Trouble(); t != nil && t.Node == node {
			out = append(out, VMTrouble{VM: r.VM, Trouble: *t})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VM < out[j].VM })
	return out
}

// VMTrouble is a VM's trouble.
type VMTrouble struct {
	VM string
	Trouble
}

// Consented returns, by node, the VMs the upgrade shut down there with the
// operator's consent: they are started again after the node's upgrade
// whatever spec.restoreVM says. One walk of the ledger for every node: a
// pass asks for all the upgraded nodes, and at 500 nodes a walk per node
// was an eighth of the manager's CPU.
func (l *Ledger) Consented() map[string][]string {
	out := map[string][]string{}
	for i := range l.Records {
		vm := l.Records[i].VM
		for _, e := range l.Records[i].Events {
			// Once per node, however many times it was stopped there (its
			// events are walked together: it would be the node's last).
			if on := out[e.Node]; e.Kind == StoppedEvent && e.Cause == CauseConsent && (len(on) == 0 || on[len(on)-1] != vm) {
				out[e.Node] = append(out[e.Node], vm)
			}
		}
	}
	return out
}

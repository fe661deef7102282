// Package vmledger keeps the record of every VM an upgrade found when it
// started, and of everything that happened to each while it ran: where a VM
// ran and whether it can live-migrate, then each migration (from, to, how
// long), each migration that failed or made no progress (attempt, reason),
// each stop (by the upgrade as planned, by the upgrade with the operator's
// consent, by its owner, and who), each start (by the restore, by its owner,
// by KubeVirt) and each instance that ended on its own. The record is the
// plan's VM ledger, the ConfigMap <plan>-vm-ledger in harvester-system
// (continued in <plan>-vm-ledger-1 and on past ShardSize VMs), owned by the
// plan and kept until the plan is deleted (like the restore-vm
// ConfigMap): the plan's status counts from it per node, its final check
// judges every VM from it, and `upgrade-toolkit status` and the support
// bundle show it.
//
// The format is text a person can read with kubectl, one line per VM and an
// indented line per event, values quoted as Go strings when they hold more
// than a name:
//
//	default/db node=node-2 state=Running leave=migrate vmi=1a2b3c4d
//	  2026-11-25T08:11:02Z migration-failed node=node-2 mig=kubevirt-evacuation-x7s9d attempt=1 why="source node reported migration failed"
//	  2026-11-25T08:12:01Z migrated node=node-2 to=node-1 took=5s mig=kubevirt-evacuation-1ak3d
//
// This file is the format; state.go reads a VM's state from its events,
// observe.go decides from the cluster which events happened, and
// snapshot.go makes the record of the start.
package vmledger

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RunState is how a VM ran when the plan started.
type RunState string

// The run states of the start.
const (
	Running RunState = "Running"
	Paused  RunState = "Paused"
	Stopped RunState = "Stopped"
)

// Leave is how a VM running at the start leaves its node when the node
// drains.
type Leave string

// The ways to leave.
const (
	// LeaveMigrate: KubeVirt live-migrates it.
	LeaveMigrate Leave = "migrate"
	// LeaveStop: it cannot live-migrate; the upgrade shuts it down (and,
	// with spec.restoreVM, starts it after the node's upgrade).
	LeaveStop Leave = "stop"
	// LeaveNone: it did not run.
	LeaveNone Leave = "none"
)

// Kind is what happened to a VM.
type Kind string

// The kinds of event.
const (
	// Migrated: a live migration moved it from Node to To in Took.
	Migrated Kind = "migrated"
	// MigrationFailed: a live migration off Node failed (Why).
	MigrationFailed Kind = "migration-failed"
	// MigrationStalled: a live migration off Node had run Took without
	// completing.
	MigrationStalled Kind = "migration-stalled"
	// MigrationRetried: the operator's retry-migration annotation (Value,
	// set By) made KubeVirt try again.
	MigrationRetried Kind = "migration-retried"
	// StoppedEvent: the VM was stopped on Node, for Cause, By.
	StoppedEvent Kind = "stopped"
	// Started: the VM runs again on Node, for Cause, By.
	Started Kind = "started"
	// Ended: its instance ended on Node (Why) while its run strategy still
	// asked it to run: stopped by neither the upgrade nor its owner.
	Ended Kind = "ended"
	// Deleted: the VirtualMachine was deleted.
	Deleted Kind = "deleted"
)

// Cause says who stopped or started a VM.
type Cause string

// The causes.
const (
	// CauseUpgrade: the upgrade shut it down as planned (it cannot
	// live-migrate).
	CauseUpgrade Cause = "upgrade"
	// CauseConsent: the upgrade shut it down with the operator's consent.
	CauseConsent Cause = "consent"
	// CauseOwner: someone other than the upgrade.
	CauseOwner Cause = "owner"
	// CauseRestore: the upgrade's restore after the node's upgrade.
	CauseRestore Cause = "restore"
	// CauseKubeVirt: KubeVirt, by the VM's run strategy.
	CauseKubeVirt Cause = "kubevirt"
)

// Ledger is the plan's record of its VMs.
type Ledger struct {
	// Started is when the plan recorded the VMs.
	Started time.Time
	// Records are the VMs, sorted by namespace/name.
	Records []Record
}

// Record is one VM: how it was at the start, then what happened to it.
type Record struct {
	// VM is namespace/name.
	VM string
	// Node is where it ran at the start ("" when it did not run).
	Node  string
	State RunState
	Leave Leave
	// Restore: the upgrade starts it again after shutting it down
	// (spec.restoreVM).
	Restore bool
	// Why says why it cannot live-migrate.
	Why string
	// Instance names its instance at the start (the start of its UID).
	Instance string
	// Events are what happened to it, oldest first.
	Events []Event
}

// Event is one thing that happened to a VM. Which fields it has depends on
// its kind.
type Event struct {
	At   time.Time
	Kind Kind
	// Node is where it happened (a migration's source).
	Node string
	// To is a migration's target.
	To string
	// Took is how long a migration took, or had run when it stalled.
	Took time.Duration
	// Migration names the VirtualMachineInstanceMigration.
	Migration string
	// Attempt numbers the migrations tried since the VM's last success,
	// retry or stop.
	Attempt int
	Cause   Cause
	// By is who, as the cluster says it (the field manager that made the
	// change, and when).
	By string
	// Why is a failure's reason, or what ended an instance.
	Why string
	// Instance names the instance a start made.
	Instance string
	// Value is the retry-migration annotation's value acted on.
	Value string
}

// Find returns the record of vm (namespace/name), nil when the ledger has
// none.
func (l *Ledger) Find(vm string) *Record {
	i := sort.Search(len(l.Records), func(i int) bool { return l.Records[i].VM >= vm })
	if i < len(l.Records) && l.Records[i].VM == vm {
		return &l.Records[i]
	}
	return nil
}

// Sort puts the records in the ledger's order.
func (l *Ledger) Sort() {
	sort.Slice(l.Records, func(i, j int) bool { return l.Records[i].VM < l.Records[j].VM })
}

// MaxEvents is how many events a record keeps: beyond it the oldest
// migration failures and stalls go (the later ones carry the attempt count),
// so that a VM retried for hours cannot grow the ledger without bound.
const MaxEvents = 24

// Add appends events to the record, keeping at most MaxEvents.
func (r *Record) Add(evs ...Event) {
	r.Events = append(r.Events, evs...)
	for len(r.Events) > MaxEvents {
		drop := 0
		for i, e := range r.Events {
			if e.Kind == MigrationFailed || e.Kind == MigrationStalled {
				drop = i
				break
			}
		}
		r.Events = append(r.Events[:drop], r.Events[drop+1:]...)
	}
}

// has reports whether the record has an event of the kind about the
// migration.
func (r *Record) has(kind Kind, migration string) bool {
	for _, e := range r.Events {
		if e.Kind == kind && e.Migration == migration {
			return true
		}
	}
	return false
}

// The text format.

// timeFormat is how times are written: whole seconds, as the API stores
// them.
const timeFormat = time.RFC3339

// Format writes the ledger's VMs as text.
func Format(l *Ledger) []byte {
	var b bytes.Buffer
	for i := range l.Records {
		formatRecord(&b, &l.Records[i])
	}
	return b.Bytes()
}

func formatRecord(b *bytes.Buffer, r *Record) {
	b.WriteString(r.VM)
	pair(b, "node", orDash(r.Node))
	pair(b, "state", string(r.State))
	pair(b, "leave", string(r.Leave))
	if r.Restore {
		pair(b, "restore", "true")
	}
	pair(b, "vmi", r.Instance)
	pair(b, "why", r.Why)
	b.WriteByte('\n')
	for _, e := range r.Events {
		b.WriteString("  ")
		b.WriteString(e.At.UTC().Format(timeFormat))
		b.WriteByte(' ')
		b.WriteString(string(e.Kind))
		pair(b, "node", e.Node)
		pair(b, "to", e.To)
		if e.Took > 0 {
			pair(b, "took", roundTook(e.Took).String())
		}
		pair(b, "mig", e.Migration)
		if e.Attempt > 0 {
			pair(b, "attempt", strconv.Itoa(e.Attempt))
		}
		pair(b, "cause", string(e.Cause))
		pair(b, "by", e.By)
		pair(b, "why", e.Why)
		pair(b, "vmi", e.Instance)
		pair(b, "value", e.Value)
		b.WriteByte('\n')
	}
}

// roundTook keeps a migration's duration readable: milliseconds under a
// second, seconds above.
func roundTook(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// pair writes " key=value", the value quoted unless it is a plain name;
// nothing for an empty value.
func pair(b *bytes.Buffer, key, value string) {
	if value == "" {
		return
	}
	b.WriteByte(' ')
	b.WriteString(key)
	b.WriteByte('=')
	if plain(value) {
		b.WriteString(value)
		return
	}
	b.WriteString(strconv.Quote(value))
}

// plain reports whether a value needs no quotes: letters, digits and the
// characters of names, times and durations.
func plain(s string) bool {
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("-._/:+@", c):
		default:
			return false
		}
	}
	return s != "" && s[0] != '"'
}

// Parse reads a ledger's VMs written by Format. A line it cannot read is an
// error that names it.
func Parse(text []byte) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "  ") {
			if len(out) == 0 {
				return nil, fmt.Errorf("line %d: an event before any VM: %q", n, line)
			}
			e, err := parseEvent(strings.TrimPrefix(line, "  "))
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			r := &out[len(out)-1]
			r.Events = append(r.Events, e)
			continue
		}
		r, err := parseRecord(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func parseRecord(line string) (Record, error) {
	head, rest, _ := strings.Cut(line, " ")
	ns, name, ok := strings.Cut(head, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return Record{}, fmt.Errorf("%q is not namespace/name", head)
	}
	r := Record{VM: head}
	err := pairs(rest, func(k, v string) error {
		switch k {
		case "node":
			if v != "-" {
				r.Node = v
			}
		case "state":
			r.State = RunState(v)
		case "leave":
			r.Leave = Leave(v)
		case "restore":
			r.Restore = v == "true"
		case "vmi":
			r.Instance = v
		case "why":
			r.Why = v
		default:
			return fmt.Errorf("unknown field %q", k)
		}
		return nil
	})
	if err != nil {
		return Record{}, fmt.Errorf("VM %s: %w", head, err)
	}
	switch r.State {
	case Running, Paused, Stopped:
	default:
		return Record{}, fmt.Errorf("VM %s: state %q is not Running, Paused or Stopped", head, r.State)
	}
	return r, nil
}

func parseEvent(line string) (Event, error) {
	at, rest, _ := strings.Cut(line, " ")
	t, err := time.Parse(timeFormat, at)
	if err != nil {
		return Event{}, fmt.Errorf("event time %q: %w", at, err)
	}
	kind, rest, _ := strings.Cut(rest, " ")
	e := Event{At: t, Kind: Kind(kind)}
	switch e.Kind {
	case Migrated, MigrationFailed, MigrationStalled, MigrationRetried, StoppedEvent, Started, Ended, Deleted:
	default:
		return Event{}, fmt.Errorf("unknown event %q", kind)
	}
	err = pairs(rest, func(k, v string) error {
		var err error
		switch k {
		case "node":
			e.Node = v
		case "to":
			e.To = v
		case "took":
			e.Took, err = time.ParseDuration(v)
		case "mig":
			e.Migration = v
		case "attempt":
			e.Attempt, err = strconv.Atoi(v)
		case "cause":
			e.Cause = Cause(v)
		case "by":
			e.By = v
		case "why":
			e.Why = v
		case "vmi":
			e.Instance = v
		case "value":
			e.Value = v
		default:
			return fmt.Errorf("unknown field %q", k)
		}
		return err
	})
	if err != nil {
		return Event{}, fmt.Errorf("%s event at %s: %w", kind, at, err)
	}
	return e, nil
}

// pairs reads " key=value key=\"quoted value\"" and hands each to f.
func pairs(s string, f func(k, v string) error) error {
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return nil
		}
		k, rest, ok := strings.Cut(s, "=")
		if !ok || k == "" || strings.Contains(k, " ") {
			return fmt.Errorf("%q is not key=value", s)
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return fmt.Errorf("field %s: unterminated quote", k)
			}
			if v, err = strconv.Unquote(q); err != nil {
				return fmt.Errorf("field %s: %w", k, err)
			}
			rest = rest[len(q):]
			if rest != "" && rest[0] != ' ' {
				return fmt.Errorf("field %s: a space must follow the quoted value", k)
			}
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		if err := f(k, v); err != nil {
			return err
		}
		s = rest
	}
}

// The ConfigMap's keys.
const (
	// KeyStarted holds when the plan recorded the VMs.
	KeyStarted = "started"
	// KeyVMs holds the VMs as text.
	KeyVMs = "vms"
	// KeyVMsGzip holds them gzipped (binaryData), once the text is larger
	// than MaxText.
	KeyVMsGzip = "vms.gz"
)

// MaxText is the largest text kept readable; a larger ledger is gzipped, so
// that thousands of VMs stay well within an object's 1 MiB.
const MaxText = 256 << 10

// Encode returns the ConfigMap's data and binaryData for the ledger.
func Encode(l *Ledger) (map[string]string, map[string][]byte, error) {
	text := Format(l)
	data := map[string]string{KeyStarted: l.Started.UTC().Format(timeFormat)}
	if len(text) <= MaxText {
		data[KeyVMs] = string(text)
		return data, nil, nil
	}
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	if _, err := w.Write(text); err != nil {
		return nil, nil, err
	}
	if err := w.Close(); err != nil {
		return nil, nil, err
	}
	return data, map[string][]byte{KeyVMsGzip: z.Bytes()}, nil
}

// ErrNoStart is the error of a ConfigMap that is not a ledger.
var ErrNoStart = errors.New("no " + KeyStarted + " key: not a VM ledger")

// Decode reads a ledger from its ConfigMap's data and binaryData.
func Decode(data map[string]string, binary map[string][]byte) (*Ledger, error) {
	started, ok := data[KeyStarted]
	if !ok {
		return nil, ErrNoStart
	}
	t, err := time.Parse(timeFormat, started)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyStarted, err)
	}
	text := []byte(data[KeyVMs])
	if z, ok := binary[KeyVMsGzip]; ok {
		r, err := gzip.NewReader(bytes.NewReader(z))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", KeyVMsGzip, err)
		}
		if text, err = io.ReadAll(io.LimitReader(r, 64<<20)); err != nil {
			return nil, fmt.Errorf("%s: %w", KeyVMsGzip, err)
		}
	}
	records, err := Parse(text)
	if err != nil {
		return nil, err
	}
	l := &Ledger{Started: t, Records: records}
	l.Sort()
	return l, nil
}

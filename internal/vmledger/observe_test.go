package vmledger

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// kinds sums up events as "kind[/cause]@node" for the tests.
func kinds(evs []Event) string {
	var out []string
	for _, e := range evs {
		s := string(e.Kind)
		if e.Cause != "" {
			s += "/" + string(e.Cause)
		}
		if e.Node != "" {
			s += "@" + e.Node
		}
		if e.To != "" {
			s += ">" + e.To
		}
		if e.Attempt > 0 {
			s += fmt.Sprintf("#%d", e.Attempt)
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestObserve(t *testing.T) {
	const stall = 2 * time.Minute
	now := t0.Add(10 * time.Minute)
	running := Record{VM: "a/b", Node: "node-2", State: Running, Leave: LeaveMigrate, Instance: "i1"}
	failedOnce := running
	failedOnce.Events = []Event{{At: t0, Kind: MigrationFailed, Node: "node-2", Migration: "m1", Attempt: 1}}
	stoppedByUpgrade := running
	stoppedByUpgrade.Events = []Event{{At: t0, Kind: StoppedEvent, Node: "node-2", Cause: CauseUpgrade}}
	ended := running
	ended.Events = []Event{{At: t0, Kind: Ended, Node: "node-2", Why: endedFailed}}
	endedOnItsOwn := running
	endedOnItsOwn.Events = []Event{{At: t0, Kind: Ended, Node: "node-2", Why: endedSucceeded}}
	movedSeen := running
	movedSeen.Events = []Event{{At: t0, Kind: Migrated, Node: "node-2", To: "node-3"}}
	restarted := stoppedByUpgrade
	restarted.Events = append(slices.Clone(stoppedByUpgrade.Events), Event{At: t0.Add(time.Minute), Kind: Started, Node: "node-2", Instance: "i2", Cause: CauseRestore})
	vm := func(rs string) *VMFacts { return &VMFacts{RunStrategy: rs} }
	onNode := func(node, instance string) *VMIFacts {
		return &VMIFacts{Instance: instance, Node: node, Phase: "Running"}
	}
	tests := map[string]struct {
		r    Record
		f    Facts
		want string
		next time.Time
	}{
		"nothing new": {r: running, f: Facts{VM: vm("Always"), VMI: onNode("node-2", "i1")}},
		"a migration that succeeded": {r: running, f: Facts{VM: vm("Always"), VMI: onNode("node-3", "i1"), Migrations: []MigrationFacts{
			{Name: "m1", Phase: "Succeeded", Created: t0, Started: t0.Add(time.Second), Ended: t0.Add(5 * time.Second), Source: "node-2", Target: "node-3"}}},
			want: "migrated@node-2>node-3"},
		"two failures, then success: attempts counted": {r: running, f: Facts{VM: vm("Always"), VMI: onNode("node-1", "i1"), Migrations: []MigrationFacts{
			{Name: "m2", Phase: "Failed", Created: t0.Add(time.Minute), Source: "node-2", Reason: "x"},
			{Name: "m1", Phase: "Failed", Created: t0, Source: "node-2", Reason: "x"},
			{Name: "m3", Phase: "Succeeded", Created: t0.Add(2 * time.Minute), Source: "node-2", Target: "node-1"}}},
			want: "migration-failed@node-2#1 migration-failed@node-2#2 migrated@node-2>node-1"},
		"a failure already recorded is not recorded again": {r: failedOnce, f: Facts{VM: vm("Always"), VMI: onNode("node-2", "i1"), Migrations: []MigrationFacts{
			{Name: "m1", Phase: "Failed", Created: t0, Source: "node-2"}}}},
		"an attempt running for longer than the stall time": {r: running, f: Facts{VM: vm("Always"), VMI: onNode("node-2", "i1"), Migrations: []MigrationFacts{
			{Name: "m1", Phase: "Running", Created: now.Add(-5 * time.Minute), Started: now.Add(-3 * time.Minute), Source: "node-2"}}},
			want: "migration-stalled@node-2#1"},
		"an attempt not yet stalled: look again then": {r: running, f: Facts{VM: vm("Always"), VMI: onNode("node-2", "i1"), Migrations: []MigrationFacts{
			{Name: "m1", Phase: "Running", Created: now.Add(-time.Minute), Source: "node-2"}}},
			next: now.Add(time.Minute)},
		"a pending attempt after a failure waits out KubeVirt's backoff": {r: failedOnce, f: Facts{VM: vm("Always"), VMI: onNode("node-2", "i1"), Migrations: []MigrationFacts{
			{Name: "m1", Phase: "Failed", Created: t0},
			{Name: "m2", Phase: "Pending", Created: t0.Add(time.Second)}}}},
		"a first attempt pending for long (no target) is a stall": {r: running, f: Facts{VM: vm("Always"), VMI: onNode("node-2", "i1"), Migrations: []MigrationFacts{
			{Name: "m1", Phase: "Pending", Created: now.Add(-stall)}}},
			want: "migration-stalled@node-2#1"},
		"stopped by the upgrade": {r: running, f: Facts{VM: &VMFacts{RunStrategy: "Halted", ByUpgrade: true}}, want: "stopped/upgrade@node-2"},
		"stopped with the operator's consent": {r: failedOnce, f: Facts{VM: &VMFacts{RunStrategy: "Halted", ByUpgrade: true, Consent: true},
			VMI: &VMIFacts{Node: "node-2", Phase: "Succeeded", Final: true}}, want: "stopped/consent@node-2"},
		"a migration failed, then the VM was stopped: both, in order": {r: running, f: Facts{VM: &VMFacts{RunStrategy: "Halted", ByUpgrade: true, Consent: true},
			Migrations: []MigrationFacts{{Name: "m1", Phase: "Failed", Created: t0}}}, want: "migration-failed@node-2#1 stopped/consent@node-2"},
		"stopped by its owner":                      {r: running, f: Facts{VM: vm("Halted")}, want: "stopped/owner@node-2"},
		"a Manual VM stopped by request":            {r: running, f: Facts{VM: vm("Manual")}, want: "stopped/owner@node-2"},
		"killed: the instance ended on its own":     {r: running, f: Facts{VM: vm("RerunOnFailure"), VMI: &VMIFacts{Node: "node-2", Phase: "Succeeded", Final: true}}, want: "ended@node-2"},
		"killed: the instance is gone":              {r: running, f: Facts{VM: vm("RerunOnFailure")}, want: "ended@node-2"},
		"restarted by the restore":                  {r: stoppedByUpgrade, f: Facts{VM: vm("Always"), VMI: onNode("node-2", "i2")}, want: "started/restore@node-2"},
		"started by KubeVirt after it ended":        {r: ended, f: Facts{VM: vm("Always"), VMI: onNode("node-3", "i2")}, want: "started/kubevirt@node-3"},
		"restarted after a failure":                 {r: ended, f: Facts{VM: vm("RerunOnFailure"), VMI: onNode("node-3", "i2")}, want: "started/kubevirt@node-3"},
		"a RerunOnFailure VM started by hand":       {r: endedOnItsOwn, f: Facts{VM: vm("RerunOnFailure"), VMI: onNode("node-3", "i2")}, want: "started/owner@node-3"},
		"virtctl stop of a RerunOnFailure VM":       {r: running, f: Facts{VM: &VMFacts{RunStrategy: "RerunOnFailure", StopRequested: true}}, want: "stopped/owner@node-2"},
		"another instance runs: one ended":          {r: running, f: Facts{VM: vm("Always"), VMI: onNode("node-3", "i2")}, want: "ended@node-2 started/kubevirt@node-3"},
		"moved, the migration no longer there":      {r: running, f: Facts{VM: vm("Always"), VMI: onNode("node-3", "i1")}, want: "migrated@node-2>node-3"},
		"deleted":                                   {r: running, f: Facts{}, want: "deleted/owner@node-2"},
		"started, not yet scheduled: not yet a run": {r: stoppedByUpgrade, f: Facts{VM: vm("Always"), VMI: &VMIFacts{Instance: "i2", Phase: "Scheduling"}}},
		"a migration of the instance before the restart ends: no news": {r: restarted, f: Facts{VM: vm("Always"), VMI: onNode("node-2", "i2"), Migrations: []MigrationFacts{
			{Name: "m1", Phase: "Failed", Created: t0, Source: "node-2", Reason: "Migration failed because vmi does not exist."}}}},
		"moved before its migration says Succeeded: wait for it": {r: running, f: Facts{VM: vm("Always"), VMI: onNode("node-3", "i1"), Migrations: []MigrationFacts{
			{Name: "m1", Phase: "Running", Created: now.Add(-time.Minute), Source: "node-2", Target: "node-3"}}}, next: now.Add(time.Minute)},
		"a move seen first, then its migration: one move": {r: movedSeen, f: Facts{VM: vm("Always"), VMI: onNode("node-3", "i1"), Migrations: []MigrationFacts{
			{Name: "m1", Phase: "Succeeded", Created: t0, Source: "node-2", Target: "node-3"}}}},
		"a VM off at the start started by owner":  {r: Record{VM: "a/b", State: Stopped, Leave: LeaveNone}, f: Facts{VM: vm("Always"), VMI: onNode("node-1", "i9")}, want: "started/owner@node-1"},
		"still stopped: nothing new":              {r: stoppedByUpgrade, f: Facts{VM: &VMFacts{RunStrategy: "Halted", ByUpgrade: true}}},
		"a VM that was off stays off":             {r: Record{VM: "a/b", State: Stopped, Leave: LeaveNone}, f: Facts{VM: vm("Halted")}},
		"the deletion is recorded once":           {r: Record{VM: "a/b", State: Stopped, Events: []Event{{At: t0, Kind: Deleted}}}, f: Facts{}},
		"a stop while its instance still runs":    {r: running, f: Facts{VM: vm("Halted"), VMI: onNode("node-2", "i1")}},
		"an instance restarting is not yet a run": {r: ended, f: Facts{VM: vm("Always"), VMI: &VMIFacts{Node: "node-2", Phase: "Failed", Final: true}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			before := len(tt.r.Events)
			got, next := Observe(&tt.r, tt.f, now, stall)
			if kinds(got) != tt.want {
				t.Errorf("events %q, want %q", kinds(got), tt.want)
			}
			if !next.Equal(tt.next) {
				t.Errorf("look again at %v, want %v", next, tt.next)
			}
			if len(tt.r.Events) != before {
				t.Error("Observe changed the record")
			}
		})
	}
}

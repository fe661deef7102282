package vmledger

import "testing"

func TestSummary(t *testing.T) {
	running := Record{VM: "a/b", Node: "node-1", State: Running, Leave: LeaveMigrate}
	moved := running
	moved.Events = []Event{{At: t0, Kind: MigrationFailed, Node: "node-1", Migration: "m1", Attempt: 1, Why: "boom"}, {At: t0, Kind: Migrated, Node: "node-1", To: "node-2"}}
	failing := running
	failing.Events = []Event{{At: t0, Kind: MigrationFailed, Node: "node-1", Migration: "m1", Attempt: 1, Why: "boom"}}
	owner := running
	owner.Events = []Event{{At: t0, Kind: StoppedEvent, Node: "node-1", Cause: CauseOwner, By: "harvester"}}
	ended := running
	ended.Events = []Event{{At: t0, Kind: Ended, Node: "node-1", Why: endedSucceeded}}
	for _, tc := range []struct {
		r    Record
		want string
	}{
		{running, "runs on node-1"},
		{moved, "runs on node-2 (live-migrated 1 time(s), 1 failed migration(s))"},
		{failing, "runs on node-1 (1 failed migration(s)); migration off node-1 in trouble: 1 attempt(s) since 2026-11-25T08:09:00Z, last m1 failed: boom"},
		{owner, "stopped (owner (harvester)) on node-1 at 2026-11-25T08:09:00Z"},
		{ended, "off: its instance Succeeded on node-1 at 2026-11-25T08:09:00Z"},
	} {
		if got := tc.r.Summary(); got != tc.want {
			t.Errorf("Summary %q, want %q", got, tc.want)
		}
	}
}

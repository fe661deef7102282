package vmledger

import (
	"reflect"
	"testing"
)

// Consented names, by node, the VMs stopped there with the operator's
// consent, once each, and no other.
func TestConsented(t *testing.T) {
	consent := func(node string) Event {
		return Event{At: t0, Kind: StoppedEvent, Node: node, Cause: CauseConsent, By: "kubectl-annotate (Update)"}
	}
	l := &Ledger{Started: t0, Records: []Record{
		{VM: "a/twice", Node: "node-1", State: Running, Leave: LeaveMigrate, Events: []Event{consent("node-1"), consent("node-1")}},
		{VM: "a/moved", Node: "node-1", State: Running, Leave: LeaveMigrate, Events: []Event{
			consent("node-1"), {At: t0, Kind: Migrated, Node: "node-1", To: "node-2"}, consent("node-2"),
		}},
		{VM: "a/planned", Node: "node-1", State: Running, Leave: LeaveStop, Events: []Event{{At: t0, Kind: StoppedEvent, Node: "node-1", Cause: CauseUpgrade}}},
		{VM: "b/other", Node: "node-3", State: Running, Leave: LeaveMigrate, Events: []Event{consent("node-3")}},
	}}
	want := map[string][]string{"node-1": {"a/twice", "a/moved"}, "node-2": {"a/moved"}, "node-3": {"b/other"}}
	if got := l.Consented(); !reflect.DeepEqual(got, want) {
		t.Errorf("Consented %v, want %v", got, want)
	}
}

package vmledger

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

var t0 = time.Date(2026, 11, 25, 8, 9, 0, 0, time.UTC)

func sampleLedger() *Ledger {
	return &Ledger{Started: t0, Records: []Record{
		{VM: "default/db", Node: "node-2", State: Running, Leave: LeaveMigrate, Instance: "1a2b3c4d", Events: []Event{
			{At: t0.Add(2 * time.Minute), Kind: MigrationFailed, Node: "node-2", Migration: "kubevirt-evacuation-x7s9d", Attempt: 1, Why: "source node reported migration failed"},
			{At: t0.Add(3 * time.Minute), Kind: Migrated, Node: "node-2", To: "node-1", Took: 5 * time.Second, Migration: "kubevirt-evacuation-1ak3d"},
		}},
		{VM: "default/gpu", Node: "node-1", State: Running, Leave: LeaveStop, Restore: true, Why: `passes through host devices "nvidia.com/GA102"`, Events: []Event{
			{At: t0.Add(time.Minute), Kind: StoppedEvent, Node: "node-1", Cause: CauseUpgrade},
			{At: t0.Add(4 * time.Minute), Kind: Started, Node: "node-1", Cause: CauseRestore, By: "upgrade-toolkit (Update at 2026-11-25T08:13:00Z)", Instance: "9f8e7d6c"},
		}},
		{VM: "web/off", State: Stopped, Leave: LeaveNone},
	}}
}

func TestFormatThenParse(t *testing.T) {
	l := sampleLedger()
	text := Format(l)
	want := `default/db node=node-2 state=Running leave=migrate vmi=1a2b3c4d
  2026-11-25T08:11:00Z migration-failed node=node-2 mig=kubevirt-evacuation-x7s9d attempt=1 why="source node reported migration failed"
  2026-11-25T08:12:00Z migrated node=node-2 to=node-1 took=5s mig=kubevirt-evacuation-1ak3d
default/gpu node=node-1 state=Running leave=stop restore=true why="passes through host devices \"nvidia.com/GA102\""
  2026-11-25T08:10:00Z stopped node=node-1 cause=upgrade
  2026-11-25T08:13:00Z started node=node-1 cause=restore by="upgrade-toolkit (Update at 2026-11-25T08:13:00Z)" vmi=9f8e7d6c
web/off node=- state=Stopped leave=none
`
	if string(text) != want {
		t.Fatalf("Format:\n%s\nwant:\n%s", text, want)
	}
	records, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(records, l.Records) {
		t.Errorf("Parse(Format(l)):\n%+v\nwant\n%+v", records, l.Records)
	}
}

func TestEncodeGzipsALargeLedger(t *testing.T) {
	l := &Ledger{Started: t0}
	for i := range 4000 {
		l.Records = append(l.Records, Record{VM: fmt.Sprintf("default/vm-%05d", i), Node: fmt.Sprintf("node-%d", i%50), State: Running, Leave: LeaveMigrate, Instance: "1a2b3c4d",
			Events: []Event{{At: t0, Kind: Migrated, Node: "node-1", To: "node-2", Took: 3 * time.Second, Migration: "kubevirt-evacuation-abcde"}}})
	}
	data, binary, err := Encode(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := data[KeyVMs]; ok || len(binary[KeyVMsGzip]) == 0 {
		t.Fatalf("a ledger of %d bytes is kept as text (%d keys of data, %d of binaryData)", len(Format(l)), len(data), len(binary))
	}
	got, err := Decode(data, binary)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, l) {
		t.Error("the gzipped ledger does not read back the same")
	}
	small := sampleLedger()
	data, binary, _ = Encode(small)
	if data[KeyVMs] == "" || binary != nil {
		t.Errorf("a small ledger is not kept as text: %v %v", data, binary)
	}
}

func TestParseNamesWhatIsWrong(t *testing.T) {
	for text, want := range map[string]string{
		"db node=node-1 state=Running\n":                           `line 1: "db" is not namespace/name`,
		"a/b node=n state=Sleeping\n":                              `state "Sleeping"`,
		"a/b node=n state=Running color=red\n":                     `unknown field "color"`,
		"  2026-11-25T08:11:00Z migrated\n":                        "line 1: an event before any VM",
		"a/b state=Running\n  yesterday migrated\n":                `line 2: event time "yesterday"`,
		"a/b state=Running\n  2026-11-25T08:11:00Z vanished\n":     `unknown event "vanished"`,
		"a/b state=Running\n  2026-11-25T08:11:00Z migrated to\n":  `"to" is not key=value`,
		"a/b state=Running why=\"open\n":                           "unterminated quote",
		"a/b state=Running\n  2026-11-25T08:11:00Z ended took=x\n": `invalid duration "x"`,
		"a/b state=Running why=\"a\"b\n":                           "a space must follow",
	} {
		if _, err := Parse([]byte(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want an error saying %q", text, err, want)
		}
	}
}

func TestAddKeepsTheLedgerBounded(t *testing.T) {
	r := Record{VM: "a/b", State: Running, Leave: LeaveMigrate, Node: "node-1"}
	r.Add(Event{At: t0, Kind: StoppedEvent, Cause: CauseOwner}, Event{At: t0, Kind: Started, Cause: CauseOwner, Node: "node-1"})
	for i := range 3 * MaxEvents {
		r.Add(Event{At: t0.Add(time.Duration(i) * time.Second), Kind: MigrationFailed, Node: "node-1", Migration: fmt.Sprintf("m-%d", i), Attempt: i + 1})
	}
	if len(r.Events) != MaxEvents || r.Events[0].Kind != StoppedEvent || r.Events[1].Kind != Started {
		t.Fatalf("%d events, first %v %v: want %d, the stop and start kept", len(r.Events), r.Events[0].Kind, r.Events[1].Kind, MaxEvents)
	}
	if last := r.Events[len(r.Events)-1]; last.Attempt != 3*MaxEvents {
		t.Errorf("the last failure is attempt %d", last.Attempt)
	}
}

func TestNowAndTrouble(t *testing.T) {
	r := Record{VM: "a/b", Node: "node-2", State: Running, Leave: LeaveMigrate, Instance: "aaaa"}
	if n := r.Now(); !n.Running || n.Node != "node-2" || r.Trouble() != nil {
		t.Fatalf("at the start: %+v %+v", n, r.Trouble())
	}
	r.Add(Event{At: t0, Kind: MigrationStalled, Node: "node-2", Migration: "m1", Attempt: 1, Took: 2 * time.Minute})
	r.Add(Event{At: t0.Add(time.Minute), Kind: MigrationFailed, Node: "node-2", Migration: "m1", Attempt: 1, Why: "aborted"})
	r.Add(Event{At: t0.Add(2 * time.Minute), Kind: MigrationFailed, Node: "node-2", Migration: "m2", Attempt: 2, Why: "target pod gone"})
	tr := r.Trouble()
	if tr == nil || tr.Attempts != 2 || !tr.Since.Equal(t0) || tr.Migration != "m2" || tr.Reason != "target pod gone" || tr.Stalled {
		t.Fatalf("trouble %+v", tr)
	}
	r.Add(Event{At: t0.Add(3 * time.Minute), Kind: MigrationRetried, Node: "node-2", Value: "1", By: "kubectl-annotate"})
	if tr := r.Trouble(); tr == nil || !tr.Since.Equal(t0.Add(3*time.Minute)) || tr.Retries != 1 || r.lastRetry() != "1" {
		t.Fatalf("after a retry: %+v", tr)
	}
	if !r.Retry("2") || r.Retry("1") || r.Retry("") {
		t.Error("Retry acts on a new value only")
	}
	r.Add(Event{At: t0.Add(4 * time.Minute), Kind: Migrated, Node: "node-2", To: "node-3", Migration: "m3"})
	if n := r.Now(); !n.Running || n.Node != "node-3" || r.Trouble() != nil || r.Retry("2") {
		t.Fatalf("after the move: %+v %+v", n, r.Trouble())
	}
	r.Add(Event{At: t0.Add(5 * time.Minute), Kind: StoppedEvent, Node: "node-3", Cause: CauseOwner})
	if n := r.Now(); n.Running || n.Node != "node-3" || n.Last.Cause != CauseOwner {
		t.Fatalf("after the stop: %+v", n)
	}
	r.Add(Event{At: t0.Add(6 * time.Minute), Kind: Deleted, Cause: CauseOwner})
	if n := r.Now(); !n.Deleted || n.Running {
		t.Fatalf("after the deletion: %+v", n)
	}
}

func TestCounts(t *testing.T) {
	l := sampleLedger()
	l.Records = append(l.Records,
		Record{VM: "default/slow", Node: "node-3", State: Running, Leave: LeaveMigrate, Events: []Event{
			{At: t0, Kind: MigrationStalled, Node: "node-3", Migration: "m", Attempt: 1}}},
		Record{VM: "default/waits", Node: "node-3", State: Running, Leave: LeaveMigrate},
		Record{VM: "default/pinned", Node: "node-3", State: Running, Leave: LeaveStop},
		Record{VM: "default/done", Node: "node-4", State: Running, Leave: LeaveMigrate},
	)
	l.Sort()
	got := l.Counts(func(node string) bool { return node == "node-4" })
	want := map[string]v1beta1.NodeVMs{
		// db moved off node-2 and waits on node-1, not upgraded yet.
		"node-2": {ToMove: 1, Moved: 1},
		"node-1": {ToMove: 1, Pending: 1, Stopped: 1},
		"node-3": {ToMove: 2, Pending: 1, Failed: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Counts:\n%+v\nwant\n%+v", got, want)
	}
	if tr := l.Troubles("node-3"); len(tr) != 1 || tr[0].VM != "default/slow" || !tr[0].Stalled {
		t.Errorf("Troubles(node-3) %+v", tr)
	}
}

func TestWho(t *testing.T) {
	at := func(min int) *metav1.Time { t := metav1.NewTime(t0.Add(time.Duration(min) * time.Minute)); return &t }
	entries := []metav1.ManagedFieldsEntry{
		{Manager: "virt-controller", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(1), FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:ready":{}}}`)}},
		{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(2), FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:template":{}}}`)}},
		{Manager: "virt-api", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(3), FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:runStrategy":{}}}`)}},
		{Manager: "kubectl-annotate", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(4), FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:management.harvesterhci.io/shutdown-for-upgrade":{}}}}`)}},
	}
	if got := Who(entries, "spec", "runStrategy"); got != "virt-api (Update at 2026-11-25T08:12:00Z)" {
		t.Errorf("runStrategy: %q", got)
	}
	if got := Who(entries, "metadata", "annotations", v1beta1.AnnotationShutdownForUpgrade); !strings.HasPrefix(got, "kubectl-annotate (Update") {
		t.Errorf("annotation: %q", got)
	}
	if got := Who(entries, "spec", "running"); got != "" {
		t.Errorf("a field nobody set: %q", got)
	}
}

func TestOutcomes(t *testing.T) {
	l := &Ledger{Started: t0, Records: []Record{
		{VM: "a/runs", Node: "node-1", State: Running, Leave: LeaveMigrate, Events: []Event{{At: t0, Kind: Migrated, Node: "node-1", To: "node-2"}}},
		{VM: "a/owner", Node: "node-1", State: Running, Leave: LeaveMigrate, Events: []Event{{At: t0, Kind: StoppedEvent, Node: "node-1", Cause: CauseOwner, By: "virt-api (Update)"}}},
		{VM: "a/gone", Node: "node-1", State: Running, Leave: LeaveMigrate, Events: []Event{{At: t0, Kind: Deleted, Cause: CauseOwner}}},
		{VM: "a/planned", Node: "node-1", State: Running, Leave: LeaveStop, Why: "pinned", Events: []Event{{At: t0, Kind: StoppedEvent, Node: "node-1", Cause: CauseUpgrade}}},
		{VM: "a/notrestored", Node: "node-1", State: Running, Leave: LeaveStop, Restore: true, Events: []Event{{At: t0, Kind: StoppedEvent, Node: "node-1", Cause: CauseUpgrade}}},
		{VM: "a/consented", Node: "node-1", State: Running, Leave: LeaveMigrate, Events: []Event{{At: t0, Kind: StoppedEvent, Node: "node-1", Cause: CauseConsent, By: "kubectl-annotate (Update)"}}},
		{VM: "a/killed", Node: "node-1", State: Running, Leave: LeaveMigrate, Events: []Event{{At: t0, Kind: Ended, Node: "node-1", Why: "its instance Succeeded"}}},
		{VM: "a/unrecorded", Node: "node-1", State: Running, Leave: LeaveMigrate},
		{VM: "a/wasoff", State: Stopped, Leave: LeaveNone},
	}}
	obs := map[string]Observed{"a/runs": {Exists: true, Running: true, Node: "node-2"}, "a/owner": {Exists: true}, "a/planned": {Exists: true},
		"a/notrestored": {Exists: true}, "a/consented": {Exists: true}, "a/killed": {Exists: true}, "a/unrecorded": {Exists: true}}
	got := map[string]Result{}
	stories := map[string]string{}
	for _, o := range l.Outcomes(func(vm string) Observed { return obs[vm] }) {
		got[o.VM], stories[o.VM] = o.Result, o.Story
	}
	want := map[string]Result{"a/runs": Runs, "a/owner": ByOwner, "a/gone": ByOwner, "a/planned": StaysOff,
		"a/notrestored": Off, "a/consented": Off, "a/killed": Off, "a/unrecorded": Off}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Outcomes %v\nwant %v", got, want)
	}
	for vm, says := range map[string]string{
		"a/runs":        "runs on node-2 (live-migrated 1 time(s))",
		"a/owner":       "stopped by its owner (virt-api (Update)) on node-1",
		"a/consented":   "with the operator's consent (kubectl-annotate (Update)) on node-1",
		"a/killed":      "its instance Succeeded on node-1 at 2026-11-25T08:09:00Z, stopped by neither the upgrade nor its owner",
		"a/planned":     "spec.restoreVM is false, so it stays off",
		"a/unrecorded":  "has not recorded why yet",
		"a/notrestored": "and not started again",
	} {
		if !strings.Contains(stories[vm], says) {
			t.Errorf("%s: %q does not say %q", vm, stories[vm], says)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Format(sampleLedger()))
	f.Add([]byte("a/b node=- state=Stopped leave=none why=\"\\\"\"\n  2026-11-25T08:11:00Z ended node=n why=\"x y\"\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		records, err := Parse(text)
		if err != nil {
			return
		}
		// What parses writes back to text that parses to the same.
		again, err := Parse(Format(&Ledger{Records: records}))
		if err != nil {
			t.Fatalf("Format of a parsed ledger does not parse: %v\n%s", err, Format(&Ledger{Records: records}))
		}
		if !bytes.Equal(Format(&Ledger{Records: again}), Format(&Ledger{Records: records})) {
			t.Fatalf("a parsed ledger does not write back the same")
		}
	})
}

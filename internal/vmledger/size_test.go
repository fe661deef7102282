package vmledger

import (
	"fmt"
	"testing"
	"time"
)

// atScale is the ledger of an upgrade of 1,000 VMs on 50 nodes at its end:
// every VM live-migrated off its node and back onto an upgraded one, one in
// ten after a failed attempt, one in fifty shut down as planned and started
// again by the restore.
func atScale(vms, nodes int) *Ledger {
	l := &Ledger{Started: t0}
	for i := range vms {
		node := fmt.Sprintf("harvester-node-%02d", i%nodes+1)
		to := fmt.Sprintf("harvester-node-%02d", (i+1)%nodes+1)
		r := Record{VM: fmt.Sprintf("tenant-%02d/vm-%04d", i%20, i), Node: node, State: Running, Leave: LeaveMigrate, Instance: fmt.Sprintf("%08x", i*2654435761%(1<<32))}
		at := t0.Add(time.Duration(i) * time.Second)
		switch {
		case i%50 == 0:
			r.Leave, r.Restore, r.Why = LeaveStop, true, "pinned by nodeSelector kubernetes.io/hostname="+node
			r.Events = []Event{
				{At: at, Kind: StoppedEvent, Node: node, Cause: CauseUpgrade},
				{At: at.Add(4 * time.Minute), Kind: Started, Node: node, Instance: "7c6a3fb4", Cause: CauseRestore},
			}
		case i%10 == 0:
			r.Events = []Event{
				{At: at, Kind: MigrationFailed, Node: node, Migration: "kubevirt-evacuation-54jjp", Attempt: 1, Why: "Live migration failed error encountered during MigrateToURI3 libvirt api call"},
				{At: at.Add(20 * time.Second), Kind: Migrated, Node: node, To: to, Took: 7 * time.Second, Migration: "kubevirt-evacuation-r5shw"},
			}
		default:
			r.Events = []Event{{At: at, Kind: Migrated, Node: node, To: to, Took: 5 * time.Second, Migration: "kubevirt-evacuation-cttl9"}}
		}
		l.Records = append(l.Records, r)
	}
	l.Sort()
	return l
}

// storedBytes is what the ledger's ConfigMap holds.
func storedBytes(t testing.TB, l *Ledger) (text, stored int) {
	data, binary, err := Encode(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range data {
		stored += len(v)
	}
	for _, v := range binary {
		stored += len(v)
	}
	return len(Format(l)), stored
}

// TestSizeAtScale: the ledger of 1,000 VMs is stored in well under an
// object's 1 MiB, and 10,000 still fit.
func TestSizeAtScale(t *testing.T) {
	for _, n := range []int{1000, 10000} {
		text, stored := storedBytes(t, atScale(n, 50))
		t.Logf("%d VMs: text %d bytes (%d per VM), stored %d bytes", n, text, text/n, stored)
		if stored > 512<<10 {
			t.Errorf("%d VMs take %d bytes in the ConfigMap, want at most 512 KiB", n, stored)
		}
	}
}

// BenchmarkLedger measures at 1,000 VMs what the keeper and the plan do
// with the ledger: write it (Encode), read it (Decode, on each change of
// its ConfigMap) and count the nodes' VMs (each pass of the node upgrade).
func BenchmarkLedger(b *testing.B) {
	l := atScale(1000, 50)
	data, binary, err := Encode(l)
	if err != nil {
		b.Fatal(err)
	}
	text, stored := storedBytes(b, l)
	b.Run("encode", func(b *testing.B) {
		b.ReportMetric(float64(text), "text-bytes")
		b.ReportMetric(float64(stored), "stored-bytes")
		for b.Loop() {
			if _, _, err := Encode(l); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := Decode(data, binary); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("counts", func(b *testing.B) {
		for b.Loop() {
			l.Counts(func(string) bool { return false })
		}
	})
}

package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/status"
)

// TestWindowClosesAndReopens: as the first node begins its upgrade, the
// operator narrows the maintenance windows to one that opens at the next
// minute boundary, at least 30 s away (real time: the manager's clock is
// the machine's). The node under way finishes; no other node begins before
// the window opens; meanwhile status.nextMaintenanceWindow, the
// Progressing condition and `upgrade-toolkit status` say when it opens.
// The plan looks again by itself as the window opens (no pass of the
// watchdog needed), the next node begins within seconds, and the upgrade
// ends Succeeded, verified, having told of the wait by events.
func TestWindowClosesAndReopens(t *testing.T) {
	var (
		mu            sync.Mutex
		first         string
		opens         time.Time
		sawWaiting    bool
		sawStatusText bool
		began         = map[string]time.Time{}
	)
	final := scenario{sim: sim.Config{Nodes: 3}, want: v1beta1.PhaseSucceeded, timeout: 5 * time.Minute,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			mu.Lock()
			defer mu.Unlock()
			now := time.Now()
			for name, st := range p.Status.NodeUpgradeStatuses {
				if _, seen := began[name]; !seen && !nodestate.NotStarted(st.State) {
					began[name] = now
				}
			}
			if first == "" {
				for name, st := range p.Status.NodeUpgradeStatuses {
					if nodestate.InDrainSlot(st.State) {
						first = name
					}
				}
				if first == "" {
					return
				}
				// The window closes now and opens at a minute boundary
				// (windows have minutes), far enough for the first node to
				// finish.
				opens = now.UTC().Truncate(time.Minute).Add(time.Minute)
				if opens.Sub(now) < 30*time.Second {
					opens = opens.Add(time.Minute)
				}
				w := v1beta1.MaintenanceWindow{Start: opens.Format("15:04"), End: opens.Add(30 * time.Minute).Format("15:04"), TimeZone: "UTC"}
				t.Logf("node %s began; the window now opens at %s", first, opens.Format(time.RFC3339))
				before := p.DeepCopy()
				p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{MaintenanceWindows: []v1beta1.MaintenanceWindow{w}}
				if err := run.Client.Patch(ctx, p, client.MergeFrom(before)); err != nil {
					t.Fatalf("narrowing the maintenance windows: %v", err)
				}
				return
			}
			if !now.Before(opens) {
				return
			}
			for name, st := range p.Status.NodeUpgradeStatuses {
				if name != first && !nodestate.NotStarted(st.State) {
					t.Errorf("node %s began its upgrade (%s) at %s, before the window opened at %s", name, st.State, now.Format(time.RFC3339), opens.Format(time.RFC3339))
				}
			}
			c := p.Condition(v1beta1.ConditionProgressing)
			if c == nil || !strings.Contains(c.Message, "waiting for a maintenance window") {
				return
			}
			if next := p.Status.NextMaintenanceWindow; next == nil || !next.Time.Equal(opens) {
				t.Errorf("waiting for the window, status.nextMaintenanceWindow is %v, want %s", next, opens.Format(time.RFC3339))
			}
			if !strings.Contains(c.Message, "the next opens at "+opens.Format(time.RFC3339)) {
				t.Errorf("the Progressing condition does not say when the window opens: %q", c.Message)
			}
			sawWaiting = true
			if !sawStatusText {
				sawStatusText = true
				s, err := status.Compute(ctx, run.Client, nil, p.Name, now)
				if err != nil {
					t.Fatal(err)
				}
				if text := status.Text(s); !strings.Contains(text, "closed: nodes wait for the next, at "+opens.Format(time.RFC3339)) {
					t.Errorf("upgrade-toolkit status does not say when the window opens:\n%s", text)
				}
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			checkEvent(t, ctx, run, v1beta1.EventMaintenanceWindowClosed, "until the next opens at "+opens.Format(time.RFC3339))
			checkEvent(t, ctx, run, v1beta1.EventMaintenanceWindowOpened, "a maintenance window is open until "+opens.Add(30*time.Minute).Format(time.RFC3339))
		}}.run(t)
	mu.Lock()
	defer mu.Unlock()
	if !sawWaiting {
		t.Fatal("the plan never said it waits for the maintenance window")
	}
	if final.Status.NextMaintenanceWindow != nil {
		t.Errorf("the plan ended with status.nextMaintenanceWindow %s", final.Status.NextMaintenanceWindow)
	}
	// The first node finished while the window was closed; every other
	// began once it opened, the first of them by the plan's own requeue,
	// not the watchdog's next look (every 15 s).
	if done := final.Status.NodeUpgradeStatuses[first].UpgradedAt; done == nil || !done.Time.Before(opens) {
		t.Errorf("node %s, under way as the window closed, finished at %v, not before it opened at %s", first, done, opens.Format(time.RFC3339))
	}
	var firstAfter time.Time
	for name, at := range began {
		if name == first {
			continue
		}
		if at.Before(opens) {
			t.Errorf("node %s began at %s, before the window opened", name, at.Format(time.RFC3339))
		}
		if firstAfter.IsZero() || at.Before(firstAfter) {
			firstAfter = at
		}
	}
	t.Logf("the next node began %s after the window opened", firstAfter.Sub(opens).Round(100*time.Millisecond))
	if firstAfter.IsZero() || firstAfter.Sub(opens) > 5*time.Second {
		t.Errorf("the next node began at %s, more than 5 s after the window opened at %s", firstAfter.Format(time.RFC3339), opens.Format(time.RFC3339))
	}
	waits := final.Status.MaintenanceWindowWaits
	if len(waits) != 1 || waits[0].End == nil || waits[0].End.Time.Before(opens) || waits[0].End.After(opens.Add(5*time.Second)) {
		t.Errorf("status.maintenanceWindowWaits %+v, want one wait ending as the window opened at %s", waits, opens.Format(time.RFC3339))
	}
}

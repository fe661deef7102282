package pipeline

import (
	"testing"
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// the seed's successful run, in order
var happyPath = []v1beta1.UpgradePlanPhase{
	v1beta1.PhaseInitializing, v1beta1.PhaseInitialized,
	v1beta1.PhaseISODownloading, v1beta1.PhaseISODownloaded,
	v1beta1.PhaseRepoCreating, v1beta1.PhaseRepoCreated,
	v1beta1.PhaseMetadataPopulating, v1beta1.PhaseMetadataPopulated,
	v1beta1.PhaseImagePreloading, v1beta1.PhaseImagePreloaded,
	v1beta1.PhaseClusterUpgrading, v1beta1.PhaseClusterUpgraded,
	v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded,
	v1beta1.PhaseCleaningUp, v1beta1.PhaseCleanedUp,
	v1beta1.PhaseSucceeded,
}

func TestNextWalksTheHappyPath(t *testing.T) {
	var p v1beta1.UpgradePlanPhase
	for i, want := range happyPath {
		next, ok := Next(p)
		if !ok || next != want {
			t.Fatalf("step %d: Next(%q) = %q, %v; want %q", i, p, next, ok, want)
		}
		p = next
	}
	if next, ok := Next(v1beta1.PhaseSucceeded); ok {
		t.Errorf("Next(Succeeded) = %q; want none", next)
	}
	if next, ok := Next(v1beta1.PhaseFailed); ok {
		t.Errorf("Next(Failed) = %q; want none", next)
	}
	if next, ok := Next("Bogus"); ok {
		t.Errorf("Next(Bogus) = %q; want none", next)
	}
}

func TestLocateAndStepOf(t *testing.T) {
	tests := []struct {
		phase  v1beta1.UpgradePlanPhase
		index  int
		active bool
		ok     bool
		step   string
	}{
		{v1beta1.PhaseInitializing, 0, true, true, v1beta1.StepInitialize},
		{v1beta1.PhaseInitialized, 0, false, true, v1beta1.StepInitialize},
		{v1beta1.PhaseRepoCreating, 2, true, true, v1beta1.StepRepoCreate},
		{v1beta1.PhaseCleaningUp, 7, true, true, v1beta1.StepImageCleanup},
		{v1beta1.PhaseCleanedUp, 7, false, true, v1beta1.StepImageCleanup},
		{"", -1, false, false, ""},
		{v1beta1.PhaseSucceeded, -1, false, false, ""},
		{v1beta1.PhaseFailed, -1, false, false, ""},
	}
	for _, tt := range tests {
		pos, ok := Locate(tt.phase)
		if ok != tt.ok || pos.Index != tt.index || pos.Active != tt.active {
			t.Errorf("Locate(%q) = %+v, %v", tt.phase, pos, ok)
		}
		step, ok := StepOf(tt.phase)
		if ok != tt.ok || step.Name != tt.step {
			t.Errorf("StepOf(%q) = %q, %v", tt.phase, step.Name, ok)
		}
	}
}

func TestSetPhaseRecordsOneEntryPerChange(t *testing.T) {
	st := &v1beta1.UpgradePlanStatus{}
	t0 := time.Date(2026, 3, 13, 3, 57, 9, 0, time.UTC)
	if !SetPhase(st, v1beta1.PhaseInitializing, t0) {
		t.Fatal("first phase not recorded")
	}
	if SetPhase(st, v1beta1.PhaseInitializing, t0.Add(time.Minute)) {
		t.Error("setting the same phase again reported a change")
	}
	SetPhase(st, v1beta1.PhaseInitialized, t0.Add(2*time.Minute))
	SetPhase(st, v1beta1.PhaseISODownloading, t0.Add(3*time.Minute))
	if len(st.PhaseTransitionTimestamps) != 3 || st.CurrentPhase != v1beta1.PhaseISODownloading {
		t.Fatalf("history %+v, phase %q", st.PhaseTransitionTimestamps, st.CurrentPhase)
	}
	at, ok := EnteredAt(st, v1beta1.PhaseInitialized)
	if !ok || !at.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("EnteredAt(Initialized) = %v, %v", at, ok)
	}
	if _, ok := EnteredAt(st, v1beta1.PhaseNodeUpgrading); ok {
		t.Error("EnteredAt found a phase never entered")
	}
}

func TestEveryPhaseValueBelongsToOneStep(t *testing.T) {
	seen := map[v1beta1.UpgradePlanPhase]bool{}
	for _, s := range Steps {
		for _, p := range []v1beta1.UpgradePlanPhase{s.Active, s.Completed} {
			if seen[p] {
				t.Errorf("phase %q appears twice", p)
			}
			seen[p] = true
		}
	}
	if len(seen)+2 != len(happyPath)+1 { // + Succeeded, Failed; happyPath includes Succeeded
		t.Errorf("steps cover %d phase values", len(seen))
	}
}

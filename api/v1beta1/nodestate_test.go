package v1beta1

import "testing"

func TestCanMoveNodeState(t *testing.T) {
	tests := []struct {
		from, to NodeUpgradeState
		want     bool
	}{
		// first sighting
		{"", NodeStateImagePreloading, true},
		{"", NodeStateImagePreloaded, true},
		{"", NodeStatePreDraining, true},
		{"", "", false},
		// forward along the multi-node path
		{NodeStateImagePreloading, NodeStateImagePreloaded, true},
		{NodeStateImagePreloading, NodeStateImagePreloadFailed, true},
		{NodeStateImagePreloaded, NodeStateUpgradePaused, true},
		{NodeStateImagePreloaded, NodeStatePreDraining, true},
		{NodeStateUpgradePaused, NodeStatePreDraining, true},
		{NodeStatePreDraining, NodeStatePreDrained, true},
		{NodeStatePreDraining, NodeStatePreDrainFailed, true},
		{NodeStatePreDrained, NodeStatePostDraining, true},
		{NodeStatePostDraining, NodeStateWaitingReboot, true},
		{NodeStatePostDraining, NodeStatePostDrainFailed, true},
		{NodeStateWaitingReboot, NodeStatePostDrained, true},
		{NodeStatePostDrained, NodeStateImageCleaning, true},
		{NodeStateImageCleaning, NodeStateImageCleaned, true},
		{NodeStateImageCleaning, NodeStateImageCleanFailed, true},
		// forward along the single-node path
		{NodeStateUpgradePaused, NodeStateSingleNodeUpgrading, true},
		{NodeStateSingleNodeUpgrading, NodeStateWaitingReboot, true},
		{NodeStateWaitingReboot, NodeStateSingleNodeUpgraded, true},
		{NodeStateSingleNodeUpgrading, NodeStateSingleNodeUpgradeFailed, true},
		{NodeStateSingleNodeUpgraded, NodeStateImageCleaning, true},
		// skipping tiers forward is allowed (a missed event)
		{NodeStateImagePreloaded, NodeStatePreDrained, true},
		{NodeStateImagePreloading, NodeStateImageCleaned, true},
		// repeated events change nothing and are allowed
		{NodeStatePreDraining, NodeStatePreDraining, true},
		{NodeStateImageCleaned, NodeStateImageCleaned, true},
		// never backwards
		{NodeStatePreDraining, NodeStateUpgradePaused, false},
		{NodeStatePreDrained, NodeStatePreDraining, false},
		{NodeStateWaitingReboot, NodeStatePostDraining, false},
		{NodeStatePostDrained, NodeStateWaitingReboot, false},
		{NodeStateImageCleaned, NodeStateImageCleaning, false},
		{NodeStateImageCleaning, NodeStateImagePreloading, false},
		{NodeStateImagePreloaded, NodeStateImagePreloading, false},
		{NodeStateSingleNodeUpgraded, NodeStateSingleNodeUpgrading, false},
		// sideways within a tier: the first outcome is final
		{NodeStatePreDrained, NodeStatePreDrainFailed, false},
		{NodeStatePreDrainFailed, NodeStatePreDrained, false},
		{NodeStateImagePreloadFailed, NodeStateImagePreloaded, false},
		{NodeStatePostDrained, NodeStatePostDrainFailed, false},
		{NodeStatePreDraining, NodeStateSingleNodeUpgrading, false},
		// unknown states never move and are never entered
		{"Bogus", NodeStateImageCleaned, false},
		{NodeStateImagePreloading, "Bogus", false},
		{NodeStateImagePreloading, "", false},
	}
	for _, tt := range tests {
		if got := CanMoveNodeState(tt.from, tt.to); got != tt.want {
			t.Errorf("CanMoveNodeState(%q, %q) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
}

func TestEveryNodeStateHasATier(t *testing.T) {
	seen := map[NodeUpgradeState]bool{}
	prev := -1
	for _, s := range AllNodeStates() {
		tier, ok := s.Tier()
		if !ok {
			t.Errorf("state %q has no tier", s)
		}
		if tier < prev {
			t.Errorf("AllNodeStates is not in tier order at %q (tier %d after %d)", s, tier, prev)
		}
		prev = tier
		seen[s] = true
	}
	if len(seen) != len(nodeStateTiers) {
		t.Errorf("AllNodeStates lists %d states, the tier table has %d", len(seen), len(nodeStateTiers))
	}
}

func TestIsFailure(t *testing.T) {
	failures := 0
	for _, s := range AllNodeStates() {
		if s.IsFailure() {
			failures++
			if len(s) < len("Failed") || s[len(s)-len("Failed"):] != "Failed" {
				t.Errorf("%q counted as failure", s)
			}
		}
	}
	if failures != 5 {
		t.Errorf("got %d failure states, want 5", failures)
	}
}

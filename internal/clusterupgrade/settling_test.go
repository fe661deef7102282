package clusterupgrade

import (
	"strings"
	"testing"
	"time"
)

// TestSettlingNeedsAnUnbrokenSpell: a state seen once is not settled, one
// that held for the time needed is, and a single break starts the count
// again (a crashing Longhorn manager is ready between its restarts).
func TestSettlingNeedsAnUnbrokenSpell(t *testing.T) {
	s := settling{need: 50 * time.Millisecond}
	if ok, status := s.held(true, "ready"); ok || !strings.HasPrefix(status, "ready, settled for ") {
		t.Fatalf("first sighting: %v %q, want not settled yet", ok, status)
	}
	time.Sleep(60 * time.Millisecond)
	if ok, _ := s.held(true, "ready"); !ok {
		t.Fatal("held for longer than needed, yet not settled")
	}
	if ok, status := s.held(false, "not ready"); ok || status != "not ready" {
		t.Fatalf("a break: %v %q, want not settled and the state's own words", ok, status)
	}
	if ok, _ := s.held(true, "ready"); ok {
		t.Fatal("settled at once after a break: the count did not start again")
	}
}

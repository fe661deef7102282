package phase

import (
	"errors"
	"testing"
)

// TestReuse: a derived value is reused until a kind it was derived from
// changes; a change of another kind, or a failed derive, keeps nothing stale.
func TestReuse(t *testing.T) {
	r := NewReuse()
	calls := 0
	derive := func() (int, error) { calls++; return calls, nil }
	get := func() int {
		v, err := reuse(r, "k", derive, KindJobs, KindNodes)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if a, b := get(), get(); a != 1 || b != 1 {
		t.Fatalf("two passes without a change derived %d and %d, want 1 and 1", a, b)
	}
	r.Changed(KindMachines)
	if got := get(); got != 1 {
		t.Errorf("a change of another kind derived again: %d", got)
	}
	r.Changed(KindNodes)
	if got := get(); got != 2 {
		t.Errorf("after a change of a kind it reads, got %d, want a new derivation (2)", got)
	}
	r.Changed(KindJobs)
	if _, err := reuse(r, "k", func() (int, error) { return 0, errors.New("cache not ready") }, KindJobs); err == nil {
		t.Fatal("a failed derive reported no error")
	}
	if got := get(); got != 3 {
		t.Errorf("after a failed derive, got %d, want a new derivation (3)", got)
	}
	if v, _ := reuse(nil, "k", derive); v != 4 {
		t.Errorf("a nil Reuse reused a value: %d", v)
	}
}

package kept

import (
	"errors"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestUpdating: a kept value is brought up to date with the objects
// named since, each once; it is derived again when the changes are more than
// the log names, when a kind it derives afresh from changes, or after a
// failed update; Forget lets go of it.
func TestUpdating(t *testing.T) {
	r := New()
	derived, updated := 0, [][]string{}
	get := func(fail bool) ([]string, error) {
		return updating(r, "k", KindNodes,
			func() ([]string, error) { derived++; return nil, nil },
			func(v []string, changed []client.ObjectKey) ([]string, error) {
				var names []string
				for _, k := range changed {
					names = append(names, k.Name)
				}
				updated = append(updated, names)
				if fail {
					return nil, errors.New("cache not ready")
				}
				return append(v, names...), nil
			}, KindMachines)
	}
	node := func(name string) client.ObjectKey { return client.ObjectKey{Name: name} }
	if _, err := get(false); err != nil || derived != 1 {
		t.Fatalf("first pass: derived %d times (%v), want 1", derived, err)
	}
	if _, _ = get(false); derived != 1 || len(updated) != 0 {
		t.Fatalf("a pass without a change derived %d times and updated %v", derived, updated)
	}
	r.Changed(KindNodes, node("b"))
	r.Changed(KindNodes, node("a"))
	r.Changed(KindNodes, node("b"))
	r.Changed(KindJobs, client.ObjectKey{Namespace: "ns", Name: "j"})
	v, err := get(false)
	if err != nil || derived != 1 || !slices.Equal(v, []string{"a", "b"}) {
		t.Fatalf("after changes of a and b (b twice): derived %d times, value %v (%v); want 1 and [a b]", derived, v, err)
	}
	r.Changed(KindMachines, client.ObjectKey{Namespace: "ns", Name: "m"})
	if _, _ = get(false); derived != 2 {
		t.Errorf("a change of a kind derived afresh: derived %d times, want 2", derived)
	}
	for i := range maxLogged + 1 {
		r.Changed(KindNodes, node(string(rune('a'+i%26))))
	}
	if _, _ = get(false); derived != 3 {
		t.Errorf("more changes than the log names: derived %d times, want 3", derived)
	}
	r.Changed(KindNodes, node("c"))
	if _, err := get(true); err == nil {
		t.Fatal("a failed update reported no error")
	}
	if _, _ = get(false); derived != 4 {
		t.Errorf("after a failed update: derived %d times, want 4 (the value may be half updated)", derived)
	}
	r.Forget("other", "k")
	if _, _ = get(false); derived != 5 {
		t.Errorf("after Forget: derived %d times, want 5 (nothing kept)", derived)
	}
	r = nil
	r.Forget("k")
	if _, _ = get(false); derived != 6 {
		t.Errorf("nil Lists kept a value: derived %d times, want 6", derived)
	}
}

package manager

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// countingMapper counts the mappings asked of the mapper behind the memo.
type countingMapper struct {
	meta.RESTMapper
	asked int
}

func (c *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	c.asked++
	return c.RESTMapper.RESTMapping(gk, versions...)
}

// TestMappingMemo: a mapping found is asked of the mapper once per kind and
// versions; a kind not found is asked every time (the mapper then looks in
// discovery again), and a caller that changes the mapping it got changes
// nothing of the memo.
func TestMappingMemo(t *testing.T) {
	v1 := schema.GroupVersion{Version: "v1"}
	known := meta.NewDefaultRESTMapper([]schema.GroupVersion{v1})
	known.Add(v1.WithKind("Node"), meta.RESTScopeRoot)
	known.Add(v1.WithKind("Pod"), meta.RESTScopeNamespace)
	under := &countingMapper{RESTMapper: known}
	memo := newMappingMemo(under)

	node := schema.GroupKind{Kind: "Node"}
	for range 3 {
		m, err := memo.RESTMapping(node, "v1")
		if err != nil {
			t.Fatal(err)
		}
		if m.Scope.Name() != meta.RESTScopeNameRoot || m.Resource.Resource != "nodes" {
			t.Fatalf("Node maps to %+v", m)
		}
		m.Resource.Resource = "changed by a caller"
	}
	if under.asked != 1 {
		t.Errorf("Node's mapping was asked of the mapper %d times, want once", under.asked)
	}
	if _, err := memo.RESTMapping(schema.GroupKind{Kind: "Pod"}); err != nil {
		t.Fatal(err)
	}
	if _, err := memo.RESTMapping(node); err != nil {
		t.Fatal(err)
	}
	if under.asked != 3 {
		t.Errorf("the mapper was asked %d times after Pod and Node without a version, want 3 (each its own key)", under.asked)
	}

	missing := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	for range 2 {
		if _, err := memo.RESTMapping(missing, "v1"); !meta.IsNoMatchError(err) {
			t.Fatalf("a kind the mapper does not know: %v, want its no-match error", err)
		}
	}
	if under.asked != 5 {
		t.Errorf("the mapper was asked %d times after two asks of a missing kind, want 5: a miss is never remembered", under.asked)
	}
}

// Package kept is the manager's scale machinery, the one seam the phases
// read the cache's large lists through: the managed nodes, the Jobs of a
// selection by type and node, and what Rancher's machine-plan Secrets say of
// the drains, each kept from one pass to the next and brought up to date
// with the objects that changed (Lists); the predicates that say which
// updates of a Node or a Job change what a pass reads; the event handlers
// with which the watches name the changes; and the pass's working copy of a
// plan, which shares the node map of the plan it came from until the first
// change (WorkingCopy). The controller only wires it: it builds a Lists and
// marks the changes with the handlers.
package kept

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kind is a kind of cached object whose lists a pass may reuse.
type Kind int

// The kinds a node upgrade's pass lists.
const (
	KindNodes Kind = iota
	KindJobs
	KindMachinePlans
	KindMachines
	numKinds
)

// Lists keep, from one pass to the next, what a pass derived from the
// cache's lists of some kinds, brought up to date with the objects of them
// that change. A pass lists every node, every node Job and every machine plan, and on a
// large cluster most passes come from a change of something else (a pod,
// the plan's own status): reading and copying every list again on each is
// what made a pass's cost grow with the cluster.
//
// The watches mark a kind changed (Changed) on every event of it that may
// change what the passes read of it (for Nodes and Jobs, what
// NodeChangeMatters and JobChangeMatters compare; for the others, every
// event), before the event asks for a pass: a pass asked for by a change
// always reads a cache that holds it, and reads again only the objects
// named since the last pass (updating), not the whole list. The zero
// value is not usable; a nil *Lists derives on every pass.
type Lists struct {
	mu      sync.Mutex
	version [numKinds]uint64
	// changed names, for each kind, the objects of its last changes, the
	// oldest first: changed[k][i] is change number logged[k]+i+1.
	changed [numKinds][]client.ObjectKey
	logged  [numKinds]uint64
	kept    map[string]reused
}

// maxLogged bounds the changes of a kind named for updating; a value
// older than that many changes is derived again.
const maxLogged = 512

// reused is a derived value and the versions of the kinds it was derived
// from.
type reused struct {
	version [numKinds]uint64
	value   any
}

// New returns empty Lists.
func New() *Lists { return &Lists{kept: map[string]reused{}} }

// Changed records that the object key of kind k changed in the cache.
func (r *Lists) Changed(k Kind, key client.ObjectKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.version[k]++
	if len(r.changed[k]) == maxLogged {
		r.changed[k] = r.changed[k][:0]
		r.logged[k] = r.version[k] - 1
	}
	r.changed[k] = append(r.changed[k], key)
}

// Forget drops the values kept for keys: a phase done with them lets them
// go, rather than hold a large cluster's lists (every node Job of the
// upgrade, thousands at 500 nodes) to the plan's end.
func (r *Lists) Forget(keys ...string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		delete(r.kept, k)
	}
}

// Changes is how many changes of kind k were seen.
func (r *Lists) Changes(k Kind) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version[k]
}

// changedSince names, each once, the objects of kind k changed after change
// number v, and whether the log still names them all. The caller holds mu.
func (r *Lists) changedSince(k Kind, v uint64) ([]client.ObjectKey, bool) {
	if v < r.logged[k] {
		return nil, false
	}
	keys := slices.Clone(r.changed[k][v-r.logged[k]:])
	slices.SortFunc(keys, func(a, b client.ObjectKey) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return slices.Compact(keys), true
}

// updating returns the value kept for key, derived from the objects of
// kind k and of the kinds also. A change of one of also derives it again; the
// objects of kind k named since it was derived are handed to update, which
// reads them from the cache (which holds their changes before they are
// named) as the cache holds them (client.UnsafeDisableDeepCopy: a copy of the
// top level that shares the rest, read only). The value is shared by the
// passes that follow and nothing but update may change it: update runs
// between passes, and the plans' passes run one at a time.
func updating[T any](r *Lists, key string, k Kind, derive func() (T, error), update func(T, []client.ObjectKey) (T, error), also ...Kind) (T, error) {
	if r == nil {
		return derive()
	}
	r.mu.Lock()
	now := r.version
	kept, ok := r.kept[key]
	ok = ok && sameVersions(kept.version, now, also)
	var changed []client.ObjectKey
	if ok && kept.version[k] != now[k] {
		changed, ok = r.changedSince(k, kept.version[k])
	}
	r.mu.Unlock()
	if !ok {
		return keep(r, key, now, derive)
	}
	if len(changed) == 0 {
		return kept.value.(T), nil
	}
	return keep(r, key, now, func() (T, error) { return update(kept.value.(T), changed) })
}

// keep derives the value for key and keeps it as of versions now; a failed
// derive keeps nothing. The versions are read before the lists: a change
// during derive makes the next pass read it.
func keep[T any](r *Lists, key string, now [numKinds]uint64, derive func() (T, error)) (T, error) {
	v, err := derive()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		delete(r.kept, key)
		return v, err
	}
	r.kept[key] = reused{version: now, value: v}
	return v, nil
}

func sameVersions(a, b [numKinds]uint64, kinds []Kind) bool {
	for _, k := range kinds {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

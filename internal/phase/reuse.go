package phase

import "sync"

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

// Reuse keeps, from one pass to the next, what a pass derived from the
// cache's lists of some kinds, until an object of one of them changes. A
// pass lists every node, every node Job and every machine plan, and on a
// large cluster most passes come from a change of something else (a pod,
// the plan's own status): reading and copying every list again on each is
// what made a pass's cost grow with the cluster.
//
// The watches mark a kind changed (Changed) on every event of it that may
// change what the passes read of it (for Nodes and Jobs, what
// NodeChangeMatters and JobChangeMatters compare; for the others, every
// event), before the event asks for a pass: a pass asked for by a change
// always derives afresh from a cache that holds it. The zero value is not usable; a nil *Reuse
// derives on every pass.
type Reuse struct {
	mu      sync.Mutex
	version [numKinds]uint64
	kept    map[string]reused
}

// reused is a derived value and the versions of the kinds it was derived
// from.
type reused struct {
	version [numKinds]uint64
	value   any
}

// NewReuse returns an empty Reuse.
func NewReuse() *Reuse { return &Reuse{kept: map[string]reused{}} }

// Changed records that an object of kind k changed in the cache.
func (r *Reuse) Changed(k Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.version[k]++
}

// Changes is how many changes of kind k were seen.
func (r *Reuse) Changes(k Kind) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version[k]
}

// reuse returns what derive gave for key when no object of kinds has changed
// since, else derive's new result. derive's result is shared by the passes
// that follow: nothing may change it.
func reuse[T any](r *Reuse, key string, derive func() (T, error), kinds ...Kind) (T, error) {
	if r == nil {
		return derive()
	}
	r.mu.Lock()
	now := r.version
	kept, ok := r.kept[key]
	r.mu.Unlock()
	if ok && sameVersions(kept.version, now, kinds) {
		return kept.value.(T), nil
	}
	// The versions are read before the lists: a change during derive makes
	// the next pass derive again.
	v, err := derive()
	if err != nil {
		return v, err
	}
	r.mu.Lock()
	r.kept[key] = reused{version: now, value: v}
	r.mu.Unlock()
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

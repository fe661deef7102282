package phase

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// jobSelection is a set of Jobs a phase reads on every pass (a plan's node
// Jobs, the Jobs of a system-upgrade-controller Plan), one per slot: a type
// of Job and a node.
type jobSelection struct {
	// name names the selection's kept index.
	name      string
	namespace string
	labels    client.MatchingLabels
	slotOf    func(labels map[string]string) jobSlot
}

type jobSlot struct{ jobType, node string }

// selects reports whether a Job of the selection's namespace carries its
// labels.
func (sel jobSelection) selects(j *batchv1.Job) bool {
	for k, v := range sel.labels {
		if j.Labels[k] != v {
			return false
		}
	}
	return true
}

// jobIndex is a selection's Jobs by type and node, kept between passes.
type jobIndex struct {
	byType map[string]map[string]*batchv1.Job
	// at is where each Job is in byType, by name.
	at map[string]jobSlot
	// ambiguous: two Jobs claim one slot (e.g. system-upgrade-controller
	// replacing one); the newer one is read, and only a list can say which
	// one is left when it goes.
	ambiguous bool
}

// readJobs reads a selection's Jobs by type and node, from the cache, kept
// from one pass to the next and brought up to date with the Jobs that
// changed: read them, never change them, and read only what
// JobChangeMatters compares.
func readJobs(ctx context.Context, s *Scope, sel jobSelection) (map[string]map[string]*batchv1.Job, error) {
	idx, err := reuseUpdating(s.Reuse, sel.name, KindJobs,
		func() (*jobIndex, error) { return listJobs(ctx, s, sel) },
		func(idx *jobIndex, changed []client.ObjectKey) (*jobIndex, error) {
			return idx.update(ctx, s, sel, changed)
		})
	if err != nil {
		return nil, err
	}
	return idx.byType, nil
}

func listJobs(ctx context.Context, s *Scope, sel jobSelection) (*jobIndex, error) {
	var jobs batchv1.JobList
	// Read-only lists of the cache's own objects: no copies.
	if err := s.Client.List(ctx, &jobs, client.InNamespace(sel.namespace), client.UnsafeDisableDeepCopy, sel.labels); err != nil {
		return nil, fmt.Errorf("listing the Jobs in %s with labels %v: %w", sel.namespace, map[string]string(sel.labels), err)
	}
	idx := &jobIndex{byType: map[string]map[string]*batchv1.Job{}, at: make(map[string]jobSlot, len(jobs.Items))}
	for i := range jobs.Items {
		idx.put(&jobs.Items[i], sel.slotOf(jobs.Items[i].Labels))
	}
	return idx, nil
}

// put records a Job in its slot; of two Jobs in one slot, the newer is
// read.
func (idx *jobIndex) put(j *batchv1.Job, at jobSlot) {
	if idx.byType[at.jobType] == nil {
		idx.byType[at.jobType] = map[string]*batchv1.Job{}
	}
	if held := idx.byType[at.jobType][at.node]; held != nil {
		idx.ambiguous = true
		if held.CreationTimestamp.After(j.CreationTimestamp.Time) {
			return
		}
	}
	idx.byType[at.jobType][at.node] = j
	idx.at[j.Name] = at
}

// update reads again the Jobs named in changed; when two Jobs claim one
// slot, it lists them all.
func (idx *jobIndex) update(ctx context.Context, s *Scope, sel jobSelection, changed []client.ObjectKey) (*jobIndex, error) {
	for _, key := range changed {
		if key.Namespace != sel.namespace {
			continue
		}
		j := &batchv1.Job{}
		found, err := s.get(ctx, key.Namespace, key.Name, j, client.UnsafeDisableDeepCopy)
		if err != nil {
			return nil, fmt.Errorf("reading Job %s: %w", key, err)
		}
		if at, ok := idx.at[key.Name]; ok {
			delete(idx.byType[at.jobType], at.node)
			delete(idx.at, key.Name)
		}
		if found && sel.selects(j) {
			idx.put(j, sel.slotOf(j.Labels))
		}
		if idx.ambiguous {
			return listJobs(ctx, s, sel)
		}
	}
	return idx, nil
}

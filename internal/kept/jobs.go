package kept

import (
	"context"
	"fmt"
	"maps"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// JobSelection is a set of Jobs a phase reads on every pass (a plan's node
// Jobs, the Jobs of a system-upgrade-controller Plan), one per slot: a type
// of Job and a node.
type JobSelection struct {
	// name names the selection's kept index.
	name      string
	namespace string
	labels    client.MatchingLabels
	slotOf    func(labels map[string]string) jobSlot
}

type jobSlot struct{ jobType, node string }

// NodeJobs selects a plan's node Jobs, by job type and node.
func NodeJobs(plan string) JobSelection {
	return JobSelection{
		name:      "node-jobs/" + plan,
		namespace: cluster.HarvesterNamespace,
		labels:    client.MatchingLabels{v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: v1beta1.ComponentNodeUpgrade},
		slotOf: func(labels map[string]string) jobSlot {
			return jobSlot{jobType: labels[v1beta1.LabelJobType], node: labels[v1beta1.LabelNode]}
		},
	}
}

// SUCJobs selects the Jobs system-upgrade-controller runs for a plan's
// Plan object sucPlan of the given component, by node (their type is "").
func SUCJobs(plan, sucPlan, component string) JobSelection {
	return JobSelection{
		name:      "suc-jobs/" + sucPlan,
		namespace: cluster.CattleNamespace,
		labels:    client.MatchingLabels{v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: component},
		slotOf:    func(labels map[string]string) jobSlot { return jobSlot{node: cluster.SUCJobNode(labels)} },
	}
}

// Key is what Forget lets go of when a phase is done with the selection.
func (sel JobSelection) Key() string { return sel.name }

// selects reports whether a Job of the selection's namespace carries its
// labels.
func (sel JobSelection) selects(j *batchv1.Job) bool {
	for k, v := range sel.labels {
		if j.Labels[k] != v {
			return false
		}
	}
	return true
}

// JobChangeMatters reports whether a Job's update changes what a plan reads
// of it (Jobs, the Jobs it keeps between passes): its outcome (conditions,
// counts, start and completion), suspension, deletion and labels. The Job
// controller's bookkeeping (pods not yet counted, pods terminating,
// finalizers) does not: with four Jobs per node, each such update would be a
// pass over every node.
func JobChangeMatters(o, n *batchv1.Job) bool {
	was, is := o.Status, n.Status
	return was.Active != is.Active || !ptr.Equal(was.Ready, is.Ready) || was.Succeeded != is.Succeeded || was.Failed != is.Failed ||
		(was.StartTime == nil) != (is.StartTime == nil) || !was.CompletionTime.Equal(is.CompletionTime) ||
		!ptr.Equal(o.Spec.Suspend, n.Spec.Suspend) || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
		!maps.Equal(o.Labels, n.Labels) ||
		!slices.EqualFunc(was.Conditions, is.Conditions, func(a, b batchv1.JobCondition) bool {
			return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
		})
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

// Jobs reads a selection's Jobs by type and node, from the cache, kept from
// one pass to the next and brought up to date with the Jobs that changed:
// read them, never change them, and read only what JobChangeMatters
// compares.
func (r *Lists) Jobs(ctx context.Context, c client.Reader, sel JobSelection) (map[string]map[string]*batchv1.Job, error) {
	idx, err := updating(r, sel.name, KindJobs,
		func() (*jobIndex, error) { return listJobs(ctx, c, sel) },
		func(idx *jobIndex, changed []client.ObjectKey) (*jobIndex, error) {
			return idx.update(ctx, c, sel, changed)
		})
	if err != nil {
		return nil, err
	}
	return idx.byType, nil
}

func listJobs(ctx context.Context, c client.Reader, sel JobSelection) (*jobIndex, error) {
	var jobs batchv1.JobList
	// Read-only lists of the cache's own objects: no copies.
	if err := c.List(ctx, &jobs, client.InNamespace(sel.namespace), client.UnsafeDisableDeepCopy, sel.labels); err != nil {
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
func (idx *jobIndex) update(ctx context.Context, c client.Reader, sel JobSelection, changed []client.ObjectKey) (*jobIndex, error) {
	for _, key := range changed {
		if key.Namespace != sel.namespace {
			continue
		}
		j := &batchv1.Job{}
		found, err := get(ctx, c, key, j)
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
			return listJobs(ctx, c, sel)
		}
	}
	return idx, nil
}

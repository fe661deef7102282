package phase

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
)

// A failure a retry can cure keeps the plan and everything it made; a retry
// first removes what would fail the step again at once (PrepareRetry), then
// moves the plan and its failed nodes back to the start of the failed step
// (Resume). Everything the plan recorded as done stays done: the phases
// before, the nodes that were upgraded, the cluster-upgrade steps.

// The retry deletes the plan's failed Jobs, which the phases (or
// system-upgrade-controller, for its Plans' Jobs) then create again, and a
// release ISO whose import failed.
//
// +kubebuilder:rbac:groups=batch,namespace=harvester-system,resources=jobs,verbs=delete
// +kubebuilder:rbac:groups=batch,namespace=cattle-system,resources=jobs,verbs=delete
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=harvester-system,resources=virtualmachineimages,verbs=delete

// PrepareRetry deletes what would fail the retried step again at once: the
// plan's failed Jobs and a release ISO whose import failed. It is done once
// the manager's cache no longer shows them, so that the step, run again,
// cannot see the old failure.
func PrepareRetry(ctx context.Context, s *Scope) (Result, error) {
	var stale []string
	for _, ns := range []string{cluster.HarvesterNamespace, cluster.CattleNamespace} {
		var jobs batchv1.JobList
		if err := s.Client.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{v1beta1.LabelUpgradePlan: s.Plan.Name}); err != nil {
			return Result{}, fmt.Errorf("listing the plan's Jobs in %s: %w", ns, err)
		}
		for i := range jobs.Items {
			j := &jobs.Items[i]
			if state, _, _ := JobOutcome(j); state != JobFailed {
				continue
			}
			stale = append(stale, fmt.Sprintf("Job %s/%s", j.Namespace, j.Name))
			if err := s.Client.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), sameObject(j)); ignoreGone(err) != nil {
				return Result{}, fmt.Errorf("deleting the failed Job %s/%s: %w", j.Namespace, j.Name, err)
			}
		}
	}
	if s.Plan.Spec.Image == nil {
		img := &harvesterv1beta1.VirtualMachineImage{}
		found, err := s.get(ctx, cluster.HarvesterNamespace, names.ISOImage(s.Plan.Name), img)
		if err != nil {
			return Result{}, err
		}
		if state, _ := cluster.ImageImport(img); found && state == cluster.ImportFailed {
			stale = append(stale, fmt.Sprintf("VirtualMachineImage %s/%s", img.Namespace, img.Name))
			if err := s.Client.Delete(ctx, img, sameObject(img)); ignoreGone(err) != nil {
				return Result{}, fmt.Errorf("deleting the failed release ISO %s/%s: %w", img.Namespace, img.Name, err)
			}
		}
	}
	if len(stale) > 0 {
		// The plan watches its Jobs and its ISO: their deletion brings the
		// next pass.
		return Wait("retrying: removing what failed (%s)", strings.Join(stale, ", ")), nil
	}
	return Done(), nil
}

// Resume moves a failed plan back to the phase it failed in, and its failed
// nodes back to the start of their failed step, recording in the failure
// when and by which retry annotation value. Health-gate waits start over. It
// reads what it needs first and changes the working copy only then: a read
// that fails leaves it as it was.
func Resume(ctx context.Context, s *Scope, retry string) error {
	st := &s.Plan.Status
	now := metav1.NewTime(s.Now())
	nodes := slices.Sorted(maps.Keys(st.NodeUpgradeStatuses))
	entries := make([]v1beta1.NodeUpgradeStatus, len(nodes))
	var moved []v1beta1.NodeRetry
	for i, node := range nodes {
		ns := st.NodeUpgradeStatuses[node]
		ns.HealthGateSince = nil
		if to, ok := nodestate.RetryState(ns.State, ns.Reason); ok {
			moved = append(moved, v1beta1.NodeRetry{Node: node, From: ns.State, To: to})
			ns.State, ns.Reason, ns.LastTransitionTime = to, "", &now
			ns.Message = fmt.Sprintf("retrying %s (was %s)", to, moved[len(moved)-1].From)
			if beginsOSUpgrade(to) {
				// Its Job reboots the node again: the boot to see next is
				// one after this one.
				n := &corev1.Node{}
				if err := s.Client.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
					return fmt.Errorf("reading node %s to retry its upgrade: %w", node, err)
				}
				ns.PreviousBootID, ns.PreviousOSImage = n.Status.NodeInfo.BootID, n.Status.NodeInfo.OSImage
			}
		}
		entries[i] = ns
	}
	for i, node := range nodes {
		s.putNode(node, entries[i])
	}
	f := s.Plan.LastFailure()
	f.RetriedAt, f.Retry, f.Nodes = &now, retry, moved
	st.ObservedRetry = retry
	pipeline.SetPhase(st, f.Phase, now.Time)
	return nil
}

// sameObject deletes obj only if it is still the object the cache showed:
// a later pass may see, in a cache not yet caught up, a failed Job that
// system-upgrade-controller (or a phase) has already made again under the
// same name, and must not delete the new one.
func sameObject(obj client.Object) client.Preconditions {
	uid := obj.GetUID()
	return client.Preconditions{UID: &uid}
}

// ignoreGone ignores the error of a deletion whose object is gone, or was
// replaced by another of the same name (sameObject's precondition).
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

package preflight

import (
	"fmt"
	"slices"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
)

// AdmitUpdate judges a change of a plan, given the names of the managed
// nodes. While the plan runs only spec.paused, spec.acceptRisks,
// spec.nodeUpgradeOption (its pauseNodes, excludeNodes, healthGate,
// maxUnavailableNodes) and the annotations may change (the CRD's rules already keep version, image and
// upgrade fixed). Names added to pauseNodes must be managed nodes; changed
// annotation values are validated as on create. What was there before is
// never judged again, so an update of the plan's metadata cannot fail on it.
// managedNodeNames may be nil when UpdateNeedsNodes is false.
func AdmitUpdate(before, after *v1beta1.UpgradePlan, managedNodeNames []string) AdmissionResult {
	r := judged(ReasonAnnotations, "the annotations are valid", admitAnnotations(before.Annotations, after.Annotations))
	r.add(judged(ReasonForce, "the eligibility check is not skipped", admissionForceWarning(before, after)))
	r.add(judged(ReasonRetry, "no retry asked for, or one the plan can take", admitRetry(before, after)))
	r.add(judged(ReasonAbort, "no abort asked for, or one the plan can honour", admitAbort(before, after)))
	r.add(judged(ReasonMaintenanceWindows, "the maintenance windows can be read", admitMaintenanceWindows(before, after)))
	r.add(judged(ReasonAcceptRisks, "every risk accepted is one of the catalogue", admitAcceptRisks(before, after)))
	// A plan that waits for a retry is judged as a running one: it goes on
	// from where it failed.
	if after.IsFinished() && !after.AwaitsRetry() {
		if after.IsPaused() && !before.IsPaused() {
			r.add(judged(ReasonChangeWhileRunning, "", admissionWarn("spec.paused has no effect: the plan has finished (phase %s)", after.Status.CurrentPhase)))
		}
		return r
	}
	var nodeLists AdmissionResult
	nodeLists.refuse(admissionNodeListErrors(admissionPauseNodesPath, after.PauseNodes(), before.PauseNodes(), managedNodeNames)...)
	nodeLists.refuse(admissionNodeListErrors(admissionExcludeNodesPath, after.ExcludeNodes(), before.ExcludeNodes(), managedNodeNames)...)
	if len(after.ExcludeNodes()) > len(before.ExcludeNodes()) && after.Status.SingleNode != nil {
		nodeLists.refuse(field.Forbidden(admissionExcludeNodesPath, "a single-node cluster cannot finish its upgrade without its only node: "+
			"bring the node back, or delete the plan"))
	}
	r.add(judged(ReasonPauseNodesManaged, "every node added to pauseNodes and excludeNodes is a managed node", nodeLists))
	if !before.IsStarted() {
		return r
	}
	detail := fmt.Sprintf("cannot be changed while the upgrade runs (phase %s); only spec.paused, "+
		"spec.nodeUpgradeOption.pauseNodes and the annotations can", before.Status.CurrentPhase)
	var changed AdmissionResult
	for _, f := range []struct {
		name          string
		before, after any
	}{
		{"force", before.Spec.Force, after.Spec.Force},
		{"restoreVM", before.Spec.RestoreVM, after.Spec.RestoreVM},
		{"imagePreloadOption", before.Spec.ImagePreloadOption, after.Spec.ImagePreloadOption},
	} {
		if !apiequality.Semantic.DeepEqual(f.before, f.after) {
			changed.refuse(field.Forbidden(admissionSpecPath.Child(f.name), detail))
		}
	}
	r.add(judged(ReasonChangeWhileRunning, "only what may change while the upgrade runs changed", changed))
	return r
}

// UpdateNeedsNodes reports whether AdmitUpdate needs the managed nodes: only
// when the update adds a name to pauseNodes or excludeNodes of a plan still
// running. Other
// updates, the manager's finalizer writes among them, are admitted without
// a read of every Node, and cannot be refused because that read failed.
func UpdateNeedsNodes(before, after *v1beta1.UpgradePlan) bool {
	added := func(after, before []string) bool {
		return slices.ContainsFunc(after, func(n string) bool { return !slices.Contains(before, n) })
	}
	return (!after.IsFinished() || after.AwaitsRetry()) &&
		(added(after.PauseNodes(), before.PauseNodes()) || added(after.ExcludeNodes(), before.ExcludeNodes()))
}

// admitRetry judges a new value of the retry annotation: only a plan that
// waits for a retry may be retried; any other says why not and what to do.
func admitRetry(before, after *v1beta1.UpgradePlan) AdmissionResult {
	var r AdmissionResult
	v := after.Annotations[v1beta1.AnnotationRetry]
	if v == "" || v == before.Annotations[v1beta1.AnnotationRetry] {
		return r
	}
	path := field.NewPath("metadata", "annotations").Key(v1beta1.AnnotationRetry)
	f := after.LastFailure()
	switch {
	case after.AwaitsRetry() && v == after.Status.ObservedRetry:
		r.refuse(field.Invalid(path, v, "this value was already used: set another one, e.g. the time (date +%s)"))
	case after.AwaitsRetry():
		r.warn("retrying from phase %s after: %s", f.Phase, f.Message)
	case after.Status.CurrentPhase != v1beta1.PhaseFailed:
		r.refuse(field.Forbidden(path, fmt.Sprintf("the plan has not failed (phase %q): there is nothing to retry", after.Status.CurrentPhase)))
	case f == nil || f.RetryDeadline == nil:
		r.refuse(field.Forbidden(path, "a retry cannot cure this failure; change what it names and create a new plan"))
	default:
		r.refuse(field.Forbidden(path, fmt.Sprintf("the plan was not retried by %s and has been cleaned up: create a new plan",
			f.RetryDeadline.UTC().Format(time.RFC3339))))
	}
	return r
}

// admitAbort judges spec.abort: an abort cannot be taken back, and only a
// plan that runs or waits can be aborted; before is nil on create.
func admitAbort(before, after *v1beta1.UpgradePlan) AdmissionResult {
	var r AdmissionResult
	path := admissionSpecPath.Child("abort")
	asked := func(p *v1beta1.UpgradePlan) bool { return p != nil && p.Spec.Abort != nil && *p.Spec.Abort }
	switch {
	case asked(before) && !asked(after):
		r.refuse(field.Forbidden(path, "an abort cannot be taken back: the plan stops at its next safe point and ends Aborted; "+
			"create a new plan to upgrade again"))
	case !asked(after) || asked(before):
	case before == nil:
		r.refuse(field.Forbidden(path, "a new plan cannot be aborted: create it without spec.abort, or do not create it"))
	case after.IsDryRun():
		r.refuse(field.Forbidden(path, "a dry run changes nothing and ends by itself: delete it instead"))
	case after.AwaitsRetry():
		r.refuse(field.Forbidden(path, fmt.Sprintf("the plan failed (%s) and waits for a retry: delete it, and what it made and changed is cleaned up",
			after.LastFailure().Message)))
	case after.IsFinished():
		r.refuse(field.Forbidden(path, fmt.Sprintf("the plan has ended (phase %s): there is nothing to abort; delete it instead", after.Status.CurrentPhase)))
	case pipeline.NodesDone(after.Status.CurrentPhase):
		r.refuse(field.Forbidden(path, fmt.Sprintf("every node is upgraded (phase %s): the plan only removes old images and verifies the cluster; "+
			"let it finish, or pause it (spec.paused)", after.Status.CurrentPhase)))
	case after.Status.CurrentPhase != "" && !pipeline.BeforeClusterUpgrade(after.Status.CurrentPhase):
		r.warn("the cluster's components already run the new release, and there is no downgrade: the plan stops at its next safe point " +
			"(the node under way finishes), ends Aborted naming the nodes upgraded and not, and cleans up; a new plan for the same version finishes the upgrade")
	}
	return r
}

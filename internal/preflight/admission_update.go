package preflight

import (
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// AdmitUpdate judges a change of a plan, given the names of the managed
// nodes. While the plan runs only spec.paused, spec.nodeUpgradeOption
// .pauseNodes and the annotations may change (the CRD's rules already keep version, image and
// upgrade fixed). Names added to pauseNodes must be managed nodes; changed
// annotation values are validated as on create. What was there before is
// never judged again, so an update of the plan's metadata cannot fail on it.
// managedNodeNames may be nil when UpdateNeedsNodes is false.
func AdmitUpdate(before, after *v1beta1.UpgradePlan, managedNodeNames []string) AdmissionResult {
	r := admitAnnotations(before.Annotations, after.Annotations)
	r.add(admissionForceWarning(before, after))
	if after.IsFinished() {
		if after.IsPaused() && !before.IsPaused() {
			r.add(admissionWarn("spec.paused has no effect: the plan has finished (phase %s)", after.Status.CurrentPhase))
		}
		return r
	}
	r.Errors = append(r.Errors, admissionPauseNodeErrors(after.PauseNodes(), before.PauseNodes(), managedNodeNames)...)
	if !before.IsStarted() {
		return r
	}
	detail := fmt.Sprintf("cannot be changed while the upgrade runs (phase %s); only spec.paused, "+
		"spec.nodeUpgradeOption.pauseNodes and the annotations can", before.Status.CurrentPhase)
	for _, f := range []struct {
		name          string
		before, after any
	}{
		{"force", before.Spec.Force, after.Spec.Force},
		{"restoreVM", before.Spec.RestoreVM, after.Spec.RestoreVM},
		{"imagePreloadOption", before.Spec.ImagePreloadOption, after.Spec.ImagePreloadOption},
	} {
		if !apiequality.Semantic.DeepEqual(f.before, f.after) {
			r.Errors = append(r.Errors, field.Forbidden(admissionSpecPath.Child(f.name), detail))
		}
	}
	return r
}

// UpdateNeedsNodes reports whether AdmitUpdate needs the managed nodes: only
// when the update adds a name to pauseNodes of a plan still running. Other
// updates, the manager's finalizer writes among them, are admitted without
// a read of every Node, and cannot be refused because that read failed.
func UpdateNeedsNodes(before, after *v1beta1.UpgradePlan) bool {
	return !after.IsFinished() && slices.ContainsFunc(after.PauseNodes(), func(n string) bool {
		return !slices.Contains(before.PauseNodes(), n)
	})
}

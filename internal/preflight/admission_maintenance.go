package preflight

import (
	"errors"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/window"
)

// ReasonMaintenanceWindows is the check of
// spec.nodeUpgradeOption.maintenanceWindows.
const ReasonMaintenanceWindows Reason = "MaintenanceWindows"

var admissionWindowsPath = field.NewPath("spec", "nodeUpgradeOption", "maintenanceWindows")

// admitMaintenanceWindows judges the maintenance windows of a new plan, or
// of a changed one when they changed (before is nil on create): the CRD
// checks their form, only the manager knows its time zones. A window the
// manager cannot read would hold every node.
func admitMaintenanceWindows(before, after *v1beta1.UpgradePlan) AdmissionResult {
	var r AdmissionResult
	ws := after.MaintenanceWindows()
	if before != nil && apiequality.Semantic.DeepEqual(before.MaintenanceWindows(), ws) {
		return r
	}
	_, err := window.Parse(ws)
	var problems window.Problems
	if errors.As(err, &problems) {
		for _, p := range problems {
			r.refuse(field.Invalid(admissionWindowsPath.Index(p.Index).Child(p.Field), p.Value, p.Detail))
		}
	}
	return r
}

package preflight

import (
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// TestAdmitMaintenanceWindows: a time zone the manager does not know is
// refused on create and when the windows change, naming the field and what
// to write; windows that did not change are not judged again.
func TestAdmitMaintenanceWindows(t *testing.T) {
	plan := func(ws ...v1beta1.MaintenanceWindow) *v1beta1.UpgradePlan {
		p := &v1beta1.UpgradePlan{}
		p.Name = "hvst-upgrade-x"
		p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{MaintenanceWindows: ws}
		p.Status.CurrentPhase = v1beta1.PhaseNodeUpgrading
		return p
	}
	good := v1beta1.MaintenanceWindow{Days: []string{"Sat"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}
	typo := v1beta1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Europe/Berln"}
	const refusal = `spec.nodeUpgradeOption.maintenanceWindows[1].timeZone: Invalid value: "Europe/Berln": is not a known time zone: use an IANA time zone name, e.g. Europe/Berlin`

	created := plan(good, typo)
	created.Status.CurrentPhase = ""
	if errs := AdmitCreate(created, nil).Errors(); len(errs) != 1 || !strings.Contains(errs.ToAggregate().Error(), refusal) {
		t.Errorf("create with an unknown time zone: %v, want %q", errs, refusal)
	}
	if errs := AdmitCreate(plan(good), nil).Errors(); len(errs) != 0 {
		t.Errorf("create with a good window refused: %v", errs)
	}
	if errs := AdmitUpdate(plan(good), plan(good, typo), nil).Errors(); len(errs) != 1 || !strings.Contains(errs.ToAggregate().Error(), refusal) {
		t.Errorf("an unknown time zone added while running: %v, want %q", errs, refusal)
	}
	if errs := AdmitUpdate(plan(good, typo), plan(good, typo), nil).Errors(); len(errs) != 0 {
		t.Errorf("windows that did not change were judged again: %v", errs)
	}
	if errs := AdmitUpdate(plan(good, typo), plan(), nil).Errors(); len(errs) != 0 {
		t.Errorf("removing the windows while running refused: %v", errs)
	}
}

package helper

import (
	"errors"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// ErrEligibilityUnknown is returned for a plan whose running or target
// version is not recorded yet (status.previousVersion and
// status.releaseMetadata are filled by the Initialize and MetadataPopulate
// phases).
var ErrEligibilityUnknown = errors.New("the upgrade eligibility cannot be checked: the running or the target version is unknown")

// PlanEligibility checks whether the plan may upgrade the cluster from its
// status.previousVersion to the release in status.releaseMetadata, by
// release.CheckEligibility in strict mode, unless spec.force says to skip
// the check. The manager's ImagePreload gate and the version-guard command
// both decide with it.
func PlanEligibility(p *v1beta1.UpgradePlan) error {
	if p.Forced() {
		return nil
	}
	rm, prev := p.Status.ReleaseMetadata, p.Status.PreviousVersion
	if rm == nil || prev == nil {
		return ErrEligibilityUnknown
	}
	return release.CheckEligibility(*prev, rm.Harvester, rm.MinUpgradableVersion, true)
}

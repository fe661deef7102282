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
// status.previousVersion to the release in status.releaseMetadata: the
// toolkit must support the path (release.CheckSupportedPath, which
// spec.force does not skip: the steps older paths need are not there), and
// the version rules must allow it (release.CheckEligibility in strict mode,
// which spec.force skips). The manager's ImagePreload gate, the
// version-guard command and the node prepare Job all decide with it.
func PlanEligibility(p *v1beta1.UpgradePlan) error {
	rm, prev := p.Status.ReleaseMetadata, p.Status.PreviousVersion
	if prev != nil {
		if err := release.CheckSupportedPath(*prev); err != nil {
			return err
		}
	}
	if p.Forced() {
		return nil
	}
	if rm == nil || prev == nil {
		return ErrEligibilityUnknown
	}
	return release.CheckEligibility(*prev, rm.Harvester, rm.MinUpgradableVersion, true)
}

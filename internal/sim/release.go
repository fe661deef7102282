package sim

import (
	"io/fs"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
)

// releaseTree is the content of the release ISO the repo serves by default:
// releasetest's realistic ISO, with the versions of the simulated upgrade.
func releaseTree(from, to v1beta1.ReleaseMetadata) fs.FS {
	r := releasetest.New()
	rel := &r.Release
	rel.Harvester, rel.HarvesterChart, rel.OS, rel.Kubernetes = to.Harvester, to.HarvesterChart, to.OS, to.Kubernetes
	rel.Rancher, rel.MonitoringChart, rel.MinUpgradableVersion = to.Rancher, to.MonitoringChart, to.MinUpgradableVersion
	if prev, ok := r.PreviousImages[releasetest.PreviousVersion]; ok && from.Harvester != releasetest.PreviousVersion {
		delete(r.PreviousImages, releasetest.PreviousVersion)
		r.PreviousImages[from.Harvester] = prev
	}
	return r.Files()
}

package sim

import (
	"io/fs"
	"path"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
)

// ReleaseTree is the content of the release ISO a simulator of cfg serves:
// cfg.ReleaseTree, else releasetest's at cfg's versions (defaults filled).
func ReleaseTree(cfg Config) fs.FS {
	if cfg.ReleaseTree != nil {
		return cfg.ReleaseTree
	}
	cfg.setDefaults()
	return releaseTree(cfg.From, cfg.To)
}

// releaseTree is the content of the release ISO the repo serves by default:
// releasetest's realistic ISO, with the versions of the simulated upgrade.
// Its image lists name the images of the components of each release at
// those versions, as a release's lists do: the toolkit's, the cluster
// repo's and Rancher's.
func releaseTree(from, to v1beta1.ReleaseMetadata) fs.FS {
	r := releasetest.New()
	rel := &r.Release
	rel.Harvester, rel.HarvesterChart, rel.OS, rel.Kubernetes = to.Harvester, to.HarvesterChart, to.OS, to.Kubernetes
	rel.Rancher, rel.MonitoringChart, rel.MinUpgradableVersion = to.Rancher, to.MonitoringChart, to.MinUpgradableVersion
	for _, list := range r.Lists {
		retag(list, to)
	}
	if prev, ok := r.PreviousImages[releasetest.PreviousVersion]; ok {
		retag(prev, from)
		if from.Harvester != releasetest.PreviousVersion {
			delete(r.PreviousImages, releasetest.PreviousVersion)
			r.PreviousImages[from.Harvester] = prev
		}
	}
	return r.Files()
}

// retag gives the images of a release's components in an image list the
// tags of the release's versions.
func retag(list []string, rel v1beta1.ReleaseMetadata) {
	tags := map[string]string{
		"harvester-upgrade-toolkit": rel.Harvester,
		"harvester-cluster-repo":    rel.Harvester,
		"rancher":                   rel.Rancher,
	}
	for i, ref := range list {
		repo, _ := images.Split(ref)
		if tag := tags[path.Base(repo)]; tag != "" {
			list[i] = repo + ":" + tag
		}
	}
}

package sim

import (
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"

	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// minimalReleaseTree is the smallest release ISO content the toolkit reads
// from the repo: harvester-release.yaml, bundle/metadata.yaml with its image
// lists and archives, rootfs.squashfs, and the image lists of the running and
// the target version under bundle/harvester/images-lists-archive/. Callers
// with a richer model of a release pass their own tree in Config.ReleaseTree.
func minimalReleaseTree(from, to v1beta1.ReleaseMetadata) fs.FS {
	release, _ := yaml.Marshal(map[string]any{
		"harvester":                        to.Harvester,
		"harvesterChart":                   to.HarvesterChart,
		"os":                               to.OS,
		"kubernetes":                       to.Kubernetes,
		"rancher":                          to.Rancher,
		"monitoringChart":                  to.MonitoringChart,
		"minUpgradableVersion":             to.MinUpgradableVersion,
		"kubevirt":                         "1.6.0-150600.5.21.1",
		"loggingChart":                     "108.0.1+up4.10.0-rancher.13",
		"loggingChartHarvesterEventRouter": "0.4.1",
		"rancherDependencies": map[string]any{
			"fleet":           map[string]string{"chart": "107.0.0+up0.13.0", "app": "0.13.0"},
			"fleet-crd":       map[string]string{"chart": "107.0.0+up0.13.0", "app": "0.13.0"},
			"rancher-webhook": map[string]string{"chart": "107.0.0+up0.8.0", "app": "0.8.0"},
		},
	})
	groups := map[string]string{"common": "harvester", "rke2": "rke2", "agent": "agent"}
	images := map[string][]map[string]string{}
	tree := fstest.MapFS{
		"harvester-release.yaml": {Data: release},
		"rootfs.squashfs":        {Data: []byte("hsqs simulated root filesystem of " + to.OS)},
	}
	for group, prefix := range groups {
		list := fmt.Sprintf("images/%s-images-%s.txt", prefix, to.Harvester)
		archive := strings.TrimSuffix(list, ".txt") + ".tar.zst"
		images[group] = append(images[group], map[string]string{"list": list, "archive": archive})
		tree["bundle/"+list] = &fstest.MapFile{Data: []byte(strings.Join(imageList(prefix, to.Harvester), "\n") + "\n")}
		tree["bundle/"+archive] = &fstest.MapFile{Data: []byte("(\xb5/\xfd simulated image archive")}
	}
	metadata, _ := yaml.Marshal(map[string]any{"images": images})
	tree["bundle/metadata.yaml"] = &fstest.MapFile{Data: metadata}
	for _, v := range []string{from.Harvester, to.Harvester} {
		all := append(imageList("harvester", v), imageList("rke2", v)...)
		tree["bundle/harvester/images-lists-archive/"+v+"/image_list_all.txt"] = &fstest.MapFile{Data: []byte(strings.Join(all, "\n") + "\n")}
	}
	return tree
}

// imageList is a release's images of one group: some change with the
// version, some do not, so that an image cleanup has something to remove and
// something to keep.
func imageList(group, version string) []string {
	return []string{
		fmt.Sprintf("docker.io/rancher/%s-controller:%s", group, version),
		fmt.Sprintf("docker.io/rancher/%s-webhook:%s", group, version),
		"docker.io/rancher/harvester-upgrade:" + version,
		"docker.io/longhornio/longhorn-engine:v1.9.1",
		"docker.io/library/busybox:1.36",
	}
}

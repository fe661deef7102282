// Package releasetest builds the content of a release ISO, as the upgrade
// repo serves it, for tests and the simulator: harvester-release.yaml,
// bundle/metadata.yaml with its image lists and (fake) archives, the image
// lists of the previous and the current release, and rootfs.squashfs.
//
//	repo := releasetest.New()          // v1.7.1 -> v1.8.0, realistic
//	repo.Release.Kubernetes = "v1.36.0+rke2r1"
//	srv := httptest.NewServer(releasetest.Handler(repo.Files()))
//	client, _ := release.NewClient(srv.URL + release.RepoRoot)
//
// Files returns an fstest.MapFS; os.CopyFS writes it to a directory (for
// example to build an ISO from it).
package releasetest

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing/fstest"

	"go.yaml.in/yaml/v3"

	"github.com/harvester/upgrade-toolkit/internal/release"
)

// Versions of the default repo.
const (
	// Version is the release in the ISO.
	Version = "v1.8.0"
	// PreviousVersion is the release the cluster runs before the upgrade.
	PreviousVersion = "v1.7.1"
)

// Repo describes the content of a release ISO. Change its fields, then call
// Files.
type Repo struct {
	// Release is written to harvester-release.yaml.
	Release release.Release
	// Bundle is written to bundle/metadata.yaml. Each entry's list file holds
	// Lists[entry.List] and its archive ArchiveSize bytes.
	Bundle release.BundleMetadata
	// Lists are the images of each list in the bundle, by the list's path
	// relative to bundle/. The release's own image_list_all.txt ("current")
	// is their union, as the release build makes it.
	Lists map[string][]string
	// PreviousImages are the image_list_all.txt files of earlier versions,
	// by version. A version left out has no list (like non-GA ISOs).
	PreviousImages map[string][]string
	// ArchiveSize and RootfsSize are the sizes of the fake archives and of
	// rootfs.squashfs. Their bytes are pseudo-random, derived from the path,
	// so that they do not compress and are the same on every run.
	ArchiveSize int
	RootfsSize  int
}

// New returns the repo of a realistic v1.8.0 ISO that upgrades from v1.7.1.
func New() *Repo {
	const (
		harvesterList = "harvester/images-lists/harvester-images-v1.8.0.txt"
		rancherList   = "harvester/images-lists/rancher-images-v2.14.0.txt"
		rke2List      = "harvester/images-lists/rke2-images.linux-amd64-v1.35.2-rke2r1.txt"
		agentList     = "rancherd/images/rancherd-bootstrap-images-v1.8.0.txt"
	)
	archive := func(list string) release.ImageArchive {
		name := strings.TrimSuffix(list[strings.LastIndexByte(list, '/')+1:], ".txt")
		dir := strings.Replace(list[:strings.LastIndexByte(list, '/')], "images-lists", "images", 1)
		return release.ImageArchive{List: list, Archive: dir + "/" + name + release.ArchiveSuffix}
	}
	return &Repo{
		Release: release.Release{
			Harvester:                        Version,
			HarvesterChart:                   "1.8.0",
			OS:                               release.OSPrefix + Version,
			Kubernetes:                       "v1.35.2+rke2r1",
			Rancher:                          "v2.14.0",
			MonitoringChart:                  "108.0.2+up77.9.1-rancher.11",
			MinUpgradableVersion:             "v1.7.0",
			KubeVirt:                         "1.7.4-150700.3.24.2",
			LoggingChart:                     "108.0.1+up4.10.0",
			LoggingChartHarvesterEventRouter: Version,
			RancherDependencies: release.RancherDependencies{
				Fleet:          release.ChartVersion{Chart: "108.0.0+up0.14.0", App: "0.14.0"},
				FleetCRD:       release.ChartVersion{Chart: "108.0.0+up0.14.0", App: "0.14.0"},
				RancherWebhook: release.ChartVersion{Chart: "108.0.0+up0.9.0", App: "0.9.0"},
			},
		},
		Bundle: release.BundleMetadata{Images: release.BundleImages{
			Common: []release.ImageArchive{archive(harvesterList), archive(rancherList)},
			RKE2:   []release.ImageArchive{archive(rke2List)},
			Agent:  []release.ImageArchive{archive(agentList)},
		}},
		Lists: map[string][]string{
			harvesterList: {
				"docker.io/rancher/harvester:v1.8.0",
				"docker.io/rancher/harvester-webhook:v1.8.0",
				"docker.io/rancher/harvester-upgrade:v1.8.0",
				"docker.io/rancher/harvester-upgrade-toolkit:v1.8.0",
				"docker.io/rancher/harvester-cluster-repo:v1.8.0",
				"docker.io/longhornio/longhorn-manager:v1.11.0",
				"docker.io/longhornio/longhorn-engine:v1.11.0",
				"docker.io/longhornio/longhorn-instance-manager:v1.11.0",
				"registry.suse.com/suse/sles/15.7/virt-operator:1.7.4-150700.3.24.2",
				"registry.suse.com/suse/sles/15.7/virt-launcher:1.7.4-150700.3.24.2",
			},
			rancherList: {
				"docker.io/rancher/rancher:v2.14.0",
				"docker.io/rancher/fleet:v0.14.0",
				"docker.io/rancher/fleet-agent:v0.14.0",
				"docker.io/rancher/rancher-webhook:v0.9.0",
				"docker.io/rancher/mirrored-fluent-fluent-bit:4.0.3",
				"docker.io/rancher/mirrored-banzaicloud-fluentd:v1.16.2-alpine-1",
			},
			rke2List: {
				"docker.io/rancher/rke2-runtime:v1.35.2-rke2r1",
				"docker.io/rancher/hardened-kubernetes:v1.35.2-rke2r1-build20260211",
				"docker.io/rancher/mirrored-pause:3.6",
			},
			agentList: {
				"docker.io/rancher/system-agent-installer-rke2:v1.35.2-rke2r1",
			},
		},
		PreviousImages: map[string][]string{
			PreviousVersion: {
				"docker.io/rancher/harvester:v1.7.1",
				"docker.io/rancher/harvester-webhook:v1.7.1",
				"docker.io/rancher/harvester-upgrade:v1.7.1",
				"docker.io/rancher/harvester-upgrade-toolkit:v1.7.1",
				"docker.io/rancher/harvester-cluster-repo:v1.7.1",
				"docker.io/longhornio/longhorn-manager:v1.10.1",
				"docker.io/longhornio/longhorn-engine:v1.10.1",
				"docker.io/longhornio/longhorn-instance-manager:v1.10.1",
				"registry.suse.com/suse/sles/15.7/virt-operator:1.6.2-150700.3.5.1",
				"docker.io/rancher/rancher:v2.12.3",
				"docker.io/rancher/rancher-webhook:v0.8.0",
				"docker.io/rancher/fleet:v0.13.0",
				"docker.io/rancher/fleet-agent:v0.13.0",
				"docker.io/rancher/mirrored-fluent-fluent-bit:3.1.8",
				"docker.io/rancher/mirrored-banzaicloud-fluentd:v1.14.6-alpine-5",
				"docker.io/rancher/rke2-runtime:v1.33.5-rke2r1",
				"docker.io/rancher/mirrored-pause:3.6",
				"docker.io/rancher/system-agent-installer-rke2:v1.33.5-rke2r1",
			},
		},
		ArchiveSize: 64 << 10,
		RootfsSize:  256 << 10,
	}
}

// CurrentImages is the release's own image_list_all.txt: every image of
// every list in Lists, sorted, without duplicates.
func (r *Repo) CurrentImages() []string {
	var all []string
	for _, images := range r.Lists {
		all = append(all, images...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// Files returns the repo's files by their path in the repo (relative to
// release.RepoRoot). It panics if the Release or Bundle cannot be encoded,
// which cannot happen for these types.
func (r *Repo) Files() fstest.MapFS {
	files := fstest.MapFS{}
	put := func(path string, data []byte) { files[path] = &fstest.MapFile{Data: data, Mode: 0o444} }
	put(release.ReleaseFile, mustYAML(&r.Release))
	put(release.BundleMetadataFile, mustYAML(&r.Bundle))
	for list, images := range r.Lists {
		put(release.BundleDir+"/"+list, imageList(images))
	}
	for _, group := range [][]release.ImageArchive{r.Bundle.Images.Common, r.Bundle.Images.RKE2, r.Bundle.Images.Agent} {
		for _, a := range group {
			put(a.ArchivePath(), Bytes(a.ArchivePath(), r.ArchiveSize))
		}
	}
	put(release.ImageListPath(release.CurrentImageList), imageList(r.CurrentImages()))
	for version, images := range r.PreviousImages {
		put(release.ImageListPath(version), imageList(images))
	}
	put(release.RootfsFile, Bytes(release.RootfsFile, r.RootfsSize))
	return files
}

// Handler serves fsys under release.RepoRoot, as the upgrade repo does.
func Handler(fsys fs.FS) http.Handler {
	return http.StripPrefix(strings.TrimSuffix(release.RepoRoot, "/"), http.FileServerFS(fsys))
}

// Bytes returns n pseudo-random bytes derived from name: the same name and
// size always give the same bytes.
func Bytes(name string, n int) []byte {
	rng := rand.NewChaCha8(sha256.Sum256([]byte(name)))
	data := make([]byte, n)
	_, _ = rng.Read(data)
	return data
}

func imageList(images []string) []byte {
	if len(images) == 0 {
		return nil
	}
	return []byte(strings.Join(images, "\n") + "\n")
}

func mustYAML(v any) []byte {
	data, err := yaml.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("releasetest: encoding %T: %v", v, err))
	}
	return data
}

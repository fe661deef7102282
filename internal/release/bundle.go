package release

import (
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// BundleMetadataFile is the path of the image archive index in the repo.
const BundleMetadataFile = "bundle/metadata.yaml"

// BundleDir is the directory the paths in the bundle metadata are relative to.
const BundleDir = "bundle"

// ArchiveSuffix ends every image archive: a tar of images compressed with
// zstd, which the node imports with `ctr images import`.
const ArchiveSuffix = ".tar.zst"

// BundleMetadata is bundle/metadata.yaml: the image archives of the release
// and the list of images in each, by the way the node jobs use them.
type BundleMetadata struct {
	Images BundleImages `yaml:"images"`
}

// BundleImages groups the archives. All three groups are required and must
// not be empty.
type BundleImages struct {
	// Common archives are imported into containerd on every node before the
	// upgrade (ImagePreload).
	Common []ImageArchive `yaml:"common"`
	// RKE2 archives are imported too, and also copied to
	// /var/lib/rancher/rke2/agent/images so that RKE2 finds them when it
	// restarts on the new version.
	RKE2 []ImageArchive `yaml:"rke2"`
	// Agent archives are copied to /var/lib/rancher/agent/images for the
	// rancher-system-agent.
	Agent []ImageArchive `yaml:"agent"`
}

// ImageArchive is one archive and the text file that lists its images, both
// as paths relative to the bundle directory, e.g.
// harvester/images/harvester-images-v1.8.0.tar.zst and
// harvester/images-lists/harvester-images-v1.8.0.txt.
type ImageArchive struct {
	List    string `yaml:"list"`
	Archive string `yaml:"archive"`
}

// ListPath is the list's path in the repo.
func (a ImageArchive) ListPath() string { return path.Join(BundleDir, a.List) }

// ArchivePath is the archive's path in the repo.
func (a ImageArchive) ArchivePath() string { return path.Join(BundleDir, a.Archive) }

// ParseBundleMetadata parses and validates bundle/metadata.yaml. The error,
// a *ContentError matching ErrMalformed, lists every problem.
func ParseBundleMetadata(data []byte) (*BundleMetadata, error) {
	m := &BundleMetadata{}
	if p := decodeYAML(data, m); len(p) > 0 {
		return nil, p.err(BundleMetadataFile)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Validate checks the groups and every entry; see ParseBundleMetadata.
func (m *BundleMetadata) Validate() error {
	var p problems
	seen := map[string]string{}
	check := func(group string, entries []ImageArchive) {
		key := "images." + group
		if len(entries) == 0 {
			p.addf("%s: missing or empty, expected a list of {list, archive} entries", key)
			return
		}
		for i, e := range entries {
			at := func(f string) string { return key + "[" + strconv.Itoa(i) + "]." + f }
			switch {
			case e.List == "":
				p.addf("%s: missing, expected the path of the image list relative to %s/", at("list"), BundleDir)
			case !isRepoPath(e.List):
				p.addf("%s: got %q, expected a relative path inside %s/ without \"..\", spaces or control characters", at("list"), e.List, BundleDir)
			}
			switch {
			case e.Archive == "":
				p.addf("%s: missing, expected the path of a %s archive relative to %s/", at("archive"), ArchiveSuffix, BundleDir)
			case !isRepoPath(e.Archive) || !strings.HasSuffix(e.Archive, ArchiveSuffix) || e.Archive == ArchiveSuffix:
				p.addf("%s: got %q, expected a relative path inside %s/ ending in %s", at("archive"), e.Archive, BundleDir, ArchiveSuffix)
			case seen[e.Archive] != "":
				p.addf("%s: %q is already listed at %s", at("archive"), e.Archive, seen[e.Archive])
			default:
				seen[e.Archive] = at("archive")
			}
		}
	}
	check("common", m.Images.Common)
	check("rke2", m.Images.RKE2)
	check("agent", m.Images.Agent)
	return p.err(BundleMetadataFile)
}

// isRepoPath reports whether p is a clean relative path that stays inside
// its directory and can be put into a URL as is.
func isRepoPath(p string) bool {
	if !fs.ValidPath(p) || p == "." || len(p) > 1024 || !printable(p) {
		return false
	}
	return !strings.ContainsAny(p, " \\?#%")
}

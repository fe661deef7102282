package release

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// validBundle is a bundle/metadata.yaml as the release build writes it (yq
// appends one {list, archive} entry per archive, paths relative to bundle/).
const validBundle = `images:
  agent:
    - list: rancherd/images/rancherd-bootstrap-images-v1.8.0.txt
      archive: rancherd/images/rancherd-bootstrap-images-v1.8.0.tar.zst
  common:
    - list: harvester/images-lists/rancher-images-v2.14.0.txt
      archive: harvester/images/rancher-images-v2.14.0.tar.zst
    - list: harvester/images-lists/harvester-images-v1.8.0.txt
      archive: harvester/images/harvester-images-v1.8.0.tar.zst
  rke2:
    - list: harvester/images-lists/rke2-images.linux-amd64-v1.35.2-rke2r1.txt
      archive: harvester/images/rke2-images.linux-amd64-v1.35.2-rke2r1.tar.zst
    - list: harvester/images-lists/rke2-images-multus.linux-amd64-v1.35.2-rke2r1.txt
      archive: harvester/images/rke2-images-multus.linux-amd64-v1.35.2-rke2r1.tar.zst
`

func TestParseBundleMetadata(t *testing.T) {
	m, err := ParseBundleMetadata([]byte(validBundle))
	if err != nil {
		t.Fatal(err)
	}
	want := BundleImages{
		Agent: []ImageArchive{{List: "rancherd/images/rancherd-bootstrap-images-v1.8.0.txt", Archive: "rancherd/images/rancherd-bootstrap-images-v1.8.0.tar.zst"}},
		Common: []ImageArchive{
			{List: "harvester/images-lists/rancher-images-v2.14.0.txt", Archive: "harvester/images/rancher-images-v2.14.0.tar.zst"},
			{List: "harvester/images-lists/harvester-images-v1.8.0.txt", Archive: "harvester/images/harvester-images-v1.8.0.tar.zst"},
		},
		RKE2: []ImageArchive{
			{List: "harvester/images-lists/rke2-images.linux-amd64-v1.35.2-rke2r1.txt", Archive: "harvester/images/rke2-images.linux-amd64-v1.35.2-rke2r1.tar.zst"},
			{List: "harvester/images-lists/rke2-images-multus.linux-amd64-v1.35.2-rke2r1.txt", Archive: "harvester/images/rke2-images-multus.linux-amd64-v1.35.2-rke2r1.tar.zst"},
		},
	}
	if diff := cmp.Diff(want, m.Images); diff != "" {
		t.Errorf("ParseBundleMetadata (-want +got):\n%s", diff)
	}
	a := m.Images.Common[1]
	if a.ListPath() != "bundle/harvester/images-lists/harvester-images-v1.8.0.txt" ||
		a.ArchivePath() != "bundle/harvester/images/harvester-images-v1.8.0.tar.zst" {
		t.Errorf("paths in the repo: %q, %q", a.ListPath(), a.ArchivePath())
	}
}

func TestParseBundleMetadataInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []string
	}{
		{"empty", "", []string{"the file is empty"}},
		{"no images", "other: 1\n", []string{"images.common: missing or empty", "images.rke2: missing or empty", "images.agent: missing or empty"}},
		{"empty group", strings.Replace(validBundle, "  agent:\n    - list: rancherd/images/rancherd-bootstrap-images-v1.8.0.txt\n      archive: rancherd/images/rancherd-bootstrap-images-v1.8.0.tar.zst\n", "  agent: []\n", 1),
			[]string{"images.agent: missing or empty, expected a list of {list, archive} entries"}},
		{"missing list", strings.Replace(validBundle, "- list: harvester/images-lists/harvester-images-v1.8.0.txt\n      archive", "- archive", 1),
			[]string{"images.common[1].list: missing, expected the path of the image list relative to bundle/"}},
		{"missing archive", strings.Replace(validBundle, "      archive: harvester/images/rancher-images-v2.14.0.tar.zst\n", "", 1),
			[]string{"images.common[0].archive: missing, expected the path of a .tar.zst archive"}},
		{"escaping path", strings.Replace(validBundle, "harvester/images/harvester-images-v1.8.0.tar.zst", "../../etc/shadow.tar.zst", 1),
			[]string{`images.common[1].archive: got "../../etc/shadow.tar.zst", expected a relative path inside bundle/ ending in .tar.zst`}},
		{"absolute path", strings.Replace(validBundle, "list: rancherd/images/rancherd-bootstrap-images-v1.8.0.txt", "list: /etc/passwd", 1),
			[]string{`images.agent[0].list: got "/etc/passwd", expected a relative path inside bundle/`}},
		{"unclean path", strings.Replace(validBundle, "list: rancherd/images/", "list: rancherd//images/", 1),
			[]string{`images.agent[0].list: got "rancherd//images/`}},
		{"space in path", strings.Replace(validBundle, "list: rancherd/images/", "list: 'rancherd/my images/", 1) + "'",
			[]string{"images.agent[0].list: got"}},
		{"not zstd", strings.Replace(validBundle, "rancher-images-v2.14.0.tar.zst", "rancher-images-v2.14.0.tar.gz", 1),
			[]string{`images.common[0].archive: got "harvester/images/rancher-images-v2.14.0.tar.gz", expected a relative path inside bundle/ ending in .tar.zst`}},
		{"duplicate archive", strings.Replace(validBundle, "rke2-images-multus.linux-amd64-v1.35.2-rke2r1.tar.zst", "rke2-images.linux-amd64-v1.35.2-rke2r1.tar.zst", 1),
			[]string{`images.rke2[1].archive: "harvester/images/rke2-images.linux-amd64-v1.35.2-rke2r1.tar.zst" is already listed at images.rke2[0].archive`}},
		{"group not a list", "images:\n  agent:\n    list: a.txt\n    archive: a.tar.zst\n",
			[]string{"images.agent: expected a list, found a mapping (line 3)"}},
		{"entry not a mapping", "images:\n  common: [a]\n  rke2: [b]\n  agent: [c]\n",
			[]string{"images.common[0]: expected a mapping, found a text value (line 2)"}},
	} {
		_, err := ParseBundleMetadata([]byte(tc.data))
		if !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "bundle/metadata.yaml: ") {
			t.Errorf("%s: err = %v, want a content error of bundle/metadata.yaml", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
}

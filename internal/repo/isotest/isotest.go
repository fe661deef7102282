// Package isotest builds real ISO 9660 images with xorriso for tests and
// benchmarks, from a small but realistic release tree.
package isotest

import (
	"bytes"
	"encoding/binary"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Xorriso returns the path of the xorriso binary. A test that needs it
// fails, rather than skips, when it is missing.
func Xorriso(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("xorriso")
	if err != nil {
		tb.Fatalf("xorriso is not installed; these tests build real ISO images with it: run hack/install-deps.sh (Debian package xorriso)")
	}
	return p
}

// Build writes an ISO image of the directory src to dst with xorriso in its
// native mode (Rock Ridge on, Joliet off unless args say otherwise); args
// are extra xorriso commands placed before the tree is added, e.g.
// "-joliet", "on".
func Build(tb testing.TB, src, dst string, args ...string) {
	tb.Helper()
	cmdArgs := append([]string{"-no_rc", "-report_about", "SORRY", "-outdev", dst, "-volid", "HARVESTER"}, args...)
	cmdArgs = append(cmdArgs, "-map", src, "/", "-commit")
	cmd := exec.Command(Xorriso(tb), cmdArgs...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Fatalf("xorriso %s: %v\n%s", strings.Join(cmdArgs, " "), err, out.String())
	}
}

// Release versions in the tree.
const (
	Version         = "v1.8.0"
	PreviousVersion = "v1.7.1"
)

// LongName is a file name longer than any plain ISO 9660 or Joliet name.
var LongName = "harvester-images-" + strings.Repeat("very-long-rock-ridge-name-", 7) + Version + ".tar.zst"

// DeepDir is a directory nested deeper than ISO 9660's eight levels.
const DeepDir = "bundle/deep/l3/l4/l5/l6/l7/l8/l9/l10/l11/l12"

// WriteReleaseTree writes a release tree like the one in a Harvester ISO
// under dir: the release file, the bundle metadata, image lists and
// archives (archiveSize random bytes each), the OS image, a deep directory,
// a long name, a name with spaces and non-ASCII letters, an empty file and a
// symbolic link.
func WriteReleaseTree(tb testing.TB, dir string, archiveSize int) {
	tb.Helper()
	rng := rand.New(rand.NewChaCha8([32]byte{'h', 'a', 'r', 'v', 'e', 's', 't', 'e', 'r'}))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := 0; i+8 <= n; i += 8 {
			v := rng.Uint64()
			for j := range 8 {
				b[i+j] = byte(v >> (8 * j))
			}
		}
		return b
	}
	files := map[string][]byte{
		"harvester-release.yaml": []byte(`harvester: ` + Version + `
harvesterChart: 1.8.0
os: Harvester ` + Version + `
kubernetes: v1.35.2+rke2r1
rancher: v2.14.0
monitoringChart: 108.0.2+up77.9.1-rancher.11
loggingChart: 108.0.1+up4.10.0-rancher.10
loggingChartHarvesterEventRouter: 0.4.0
kubevirt: 1.7.1-150700.3.5.1
minUpgradableVersion: ` + PreviousVersion + `
rancherDependencies:
  fleet:
    chart: 108.0.0+up0.14.0
    app: 0.14.0
  fleet-crd:
    chart: 108.0.0+up0.14.0
    app: 0.14.0
  rancher-webhook:
    chart: 108.0.0+up0.9.0
    app: 0.9.0
`),
		"bundle/metadata.yaml": []byte(`images:
  common:
  - list: harvester/images-lists/harvester-images-` + Version + `.txt
    archive: harvester/images/harvester-images-` + Version + `.tar.zst
  rke2:
  - list: rke2/images-lists/rke2-images.linux-amd64-v1.35.2+rke2r1.txt
    archive: rke2/images/rke2-images.linux-amd64-v1.35.2+rke2r1.tar.zst
  agent:
  - list: rancherd/images-lists/rancher-images-v2.14.0.txt
    archive: rancherd/images/rancher-images-v2.14.0.tar.zst
`),
		"bundle/harvester/images-lists/harvester-images-" + Version + ".txt":               []byte("docker.io/rancher/harvester:" + Version + "\ndocker.io/rancher/harvester-webhook:" + Version + "\n"),
		"bundle/harvester/images/harvester-images-" + Version + ".tar.zst":                 random(archiveSize),
		"bundle/rke2/images-lists/rke2-images.linux-amd64-v1.35.2+rke2r1.txt":              []byte("docker.io/rancher/rke2-runtime:v1.35.2-rke2r1\n"),
		"bundle/rke2/images/rke2-images.linux-amd64-v1.35.2+rke2r1.tar.zst":                random(archiveSize / 2),
		"bundle/rancherd/images-lists/rancher-images-v2.14.0.txt":                          []byte("docker.io/rancher/rancher:v2.14.0\n"),
		"bundle/rancherd/images/rancher-images-v2.14.0.tar.zst":                            random(archiveSize/4 + 12345),
		"bundle/harvester/images-lists-archive/" + PreviousVersion + "/image_list_all.txt": []byte("docker.io/rancher/harvester:" + PreviousVersion + "\n"),
		"bundle/harvester/images-lists-archive/" + Version + "/image_list_all.txt":         []byte("docker.io/rancher/harvester:" + Version + "\n"),
		"rootfs.squashfs":                 random(archiveSize + 2048*3 + 17),
		"bundle/" + LongName:              random(4096),
		DeepDir + "/deep file.txt":        []byte("eleven levels down\n"),
		"bundle/Spaces and ünïcode é.txt": []byte("names with spaces and non-ASCII letters\n"),
		"bundle/empty":                    nil,
		"boot/x86_64/loader/eltorito.img": random(2048),
	}
	for p, b := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	// "current" names the new release's image list, as a link.
	if err := os.Symlink(Version, filepath.Join(dir, "bundle/harvester/images-lists-archive/current")); err != nil {
		tb.Fatal(err)
	}
}

// Files returns the slash-separated paths of the regular files under dir.
func Files(tb testing.TB, dir string) []string {
	tb.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// ReleaseISO writes a release tree with archives of archiveSize bytes into
// a temporary directory, builds its ISO and returns the tree's directory and
// the ISO's path.
func ReleaseISO(tb testing.TB, archiveSize int, args ...string) (tree, iso string) {
	tb.Helper()
	base := tb.TempDir()
	tree = filepath.Join(base, "tree")
	iso = filepath.Join(base, "release.iso")
	WriteReleaseTree(tb, tree, archiveSize)
	Build(tb, tree, iso, args...)
	return tree, iso
}

// MustRead reads a file of the tree.
func MustRead(tb testing.TB, tree, rel string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(tree, filepath.FromSlash(rel)))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// MultiExtentImage returns an ISO 9660 image with the file big.bin stored
// as one extent per part, as xorriso stores files of 4 GiB and more, and
// the file small.txt after it. It is made by hand so that tests do not need
// gigabytes. The layout: system area, primary volume descriptor (16),
// terminator (17), root directory (18), then each part in its own blocks
// followed by a junk block, then small.txt.
func MultiExtentImage(parts [][]byte) []byte {
	const ss = 2048
	var recs []byte
	blocks := 19
	var data []byte
	rec := func(lba, size int, flags byte, id string) []byte {
		n := 33 + len(id)
		if len(id)%2 == 0 {
			n++
		}
		r := make([]byte, n)
		r[0] = byte(n)
		binary.LittleEndian.PutUint32(r[2:], uint32(lba))
		binary.BigEndian.PutUint32(r[6:], uint32(lba))
		binary.LittleEndian.PutUint32(r[10:], uint32(size))
		binary.BigEndian.PutUint32(r[14:], uint32(size))
		copy(r[18:], []byte{125, 1, 2, 3, 4, 5, 0})
		r[25] = flags
		r[32] = byte(len(id))
		copy(r[33:], id)
		return r
	}
	recs = append(recs, rec(18, ss, 2, "\x00")...)
	recs = append(recs, rec(18, ss, 2, "\x01")...)
	for i, p := range parts {
		var flags byte = 0x80
		if i == len(parts)-1 {
			flags = 0
		}
		recs = append(recs, rec(blocks, len(p), flags, "BIG.BIN;1")...)
		block := make([]byte, (len(p)+ss-1)/ss*ss+ss)
		copy(block, p)
		for j := (len(p) + ss - 1) / ss * ss; j < len(block); j++ {
			block[j] = 0xEE // junk between extents
		}
		data = append(data, block...)
		blocks += len(block) / ss
	}
	recs = append(recs, rec(blocks, 5, 0, "SMALL.TXT;1")...)
	small := make([]byte, ss)
	copy(small, "small")
	data = append(data, small...)
	blocks++

	img := make([]byte, 19*ss)
	pvd := img[16*ss:]
	pvd[0] = 1
	copy(pvd[1:], "CD001")
	pvd[6] = 1
	binary.LittleEndian.PutUint32(pvd[80:], uint32(blocks))
	binary.LittleEndian.PutUint16(pvd[128:], ss)
	copy(pvd[156:], rec(18, ss, 2, "\x00"))
	term := img[17*ss:]
	term[0] = 255
	copy(term[1:], "CD001")
	term[6] = 1
	copy(img[18*ss:], recs)
	return append(img, data...)
}

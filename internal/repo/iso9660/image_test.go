package iso9660_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/harvester/upgrade-toolkit/internal/repo/iso9660"
	"github.com/harvester/upgrade-toolkit/internal/repo/isotest"
)

func open(t *testing.T, iso string) *iso9660.Image {
	t.Helper()
	img, err := iso9660.OpenFile(iso)
	if err != nil {
		t.Fatalf("OpenFile: %v", err)
	}
	t.Cleanup(func() { _ = img.Close() })
	return img
}

// TestRockRidgeReleaseTree reads every file of an xorriso-built release ISO
// by its Rock Ridge name and checks bytes, sizes, times and modes, then runs
// the standard fs.FS conformance checks.
func TestRockRidgeReleaseTree(t *testing.T) {
	tree, iso := isotest.ReleaseISO(t, 1<<20)
	img := open(t, iso)
	if img.Names() != "Rock Ridge" {
		t.Fatalf("Names() = %q, want Rock Ridge", img.Names())
	}
	files := isotest.Files(t, tree)
	for _, p := range files {
		want := isotest.MustRead(t, tree, p)
		got, err := fs.ReadFile(img, p)
		if err != nil {
			t.Errorf("ReadFile(%q): %v", p, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes differ from the %d-byte source", p, len(got), len(want))
		}
		src, _ := os.Stat(filepath.Join(tree, p))
		info, err := img.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() != src.Size() || info.Mode() != src.Mode().Perm() || !info.ModTime().Equal(src.ModTime().Truncate(time.Second)) {
			t.Errorf("Stat(%q) = size %d mode %v time %v; source has %d %v %v", p, info.Size(), info.Mode(), info.ModTime(), src.Size(), src.Mode(), src.ModTime())
		}
	}
	for _, p := range []string{isotest.DeepDir + "/deep file.txt", "bundle/" + isotest.LongName, "bundle/Spaces and ünïcode é.txt"} {
		if _, err := img.Stat(p); err != nil {
			t.Errorf("Stat(%q): %v", p, err)
		}
	}
	// The symbolic link "current" leads to the new release's list.
	got, err := fs.ReadFile(img, "bundle/harvester/images-lists-archive/current/image_list_all.txt")
	if err != nil || !strings.Contains(string(got), isotest.Version) {
		t.Errorf("reading through the link current: %q, %v", got, err)
	}
	if err := fstest.TestFS(img, files...); err != nil {
		t.Error(err)
	}
}

func TestRockRidgeIsPreferredToJoliet(t *testing.T) {
	_, iso := isotest.ReleaseISO(t, 4096, "-joliet", "on")
	img := open(t, iso)
	if img.Names() != "Rock Ridge" {
		t.Fatalf("Names() = %q, want Rock Ridge", img.Names())
	}
	if _, err := img.Stat("bundle/" + isotest.LongName); err != nil {
		t.Error(err)
	}
}

func TestJolietNamesWithoutRockRidge(t *testing.T) {
	tree, iso := isotest.ReleaseISO(t, 4096, "-rockridge", "off", "-joliet", "on")
	img := open(t, iso)
	if img.Names() != "Joliet" {
		t.Fatalf("Names() = %q, want Joliet", img.Names())
	}
	for _, p := range isotest.Files(t, tree) {
		if strings.Contains(p, isotest.LongName) {
			continue // longer than Joliet's 64 characters
		}
		got, err := fs.ReadFile(img, p)
		if err != nil || !bytes.Equal(got, isotest.MustRead(t, tree, p)) {
			t.Errorf("ReadFile(%q): %d bytes, %v", p, len(got), err)
		}
	}
	entries, err := img.ReadDir("bundle")
	if err != nil {
		t.Fatal(err)
	}
	var truncated bool
	for _, e := range entries {
		truncated = truncated || strings.HasPrefix(e.Name(), "harvester-images-very-long") && len(e.Name()) < len(isotest.LongName)
	}
	if !truncated {
		t.Errorf("the long name is not listed in its Joliet form: %v", entries)
	}
}

func TestPlainNamesAreShownAsLinuxShowsThem(t *testing.T) {
	tree, iso := isotest.ReleaseISO(t, 4096, "-rockridge", "off")
	img := open(t, iso)
	if img.Names() != "ISO 9660" {
		t.Fatalf("Names() = %q, want ISO 9660", img.Names())
	}
	for plain, src := range map[string]string{
		"rootfs.squashfs":        "rootfs.squashfs",
		"harvester_release.yaml": "harvester-release.yaml",
		"bundle/metadata.yaml":   "bundle/metadata.yaml",
	} {
		got, err := fs.ReadFile(img, plain)
		if err != nil || !bytes.Equal(got, isotest.MustRead(t, tree, src)) {
			t.Errorf("ReadFile(%q): %d bytes, %v", plain, len(got), err)
		}
	}
}

func TestRelocatedDeepDirectories(t *testing.T) {
	tree, iso := isotest.ReleaseISO(t, 4096, "-compliance", "deep_paths_off", "-rr_reloc_dir", "RR_MOVED")
	raw, err := os.ReadFile(iso)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("CL\x0c\x01")) {
		t.Fatal("xorriso did not relocate the deep directory (no Rock Ridge CL entry): the test proves nothing")
	}
	img := open(t, iso)
	p := isotest.DeepDir + "/deep file.txt"
	got, err := fs.ReadFile(img, p)
	if err != nil || !bytes.Equal(got, isotest.MustRead(t, tree, p)) {
		t.Errorf("ReadFile(%q): %q, %v", p, got, err)
	}
	if _, err := img.Stat("RR_MOVED"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the relocation directory is visible: %v", err)
	}
	if err := fstest.TestFS(img, p); err != nil {
		t.Error(err)
	}
}

func TestSymbolicLinksStayInsideTheImage(t *testing.T) {
	tree := t.TempDir()
	mustWrite(t, filepath.Join(tree, "etc", "passwd"), "inside the image")
	for link, target := range map[string]string{
		"up":       "../../../../../etc",
		"absolute": "/etc/passwd",
		"loop-a":   "loop-b",
		"loop-b":   "loop-a",
		"dangling": "nowhere",
	} {
		if err := os.Symlink(target, filepath.Join(tree, link)); err != nil {
			t.Fatal(err)
		}
	}
	iso := filepath.Join(t.TempDir(), "links.iso")
	isotest.Build(t, tree, iso)
	img := open(t, iso)
	for _, p := range []string{"up/passwd", "absolute"} {
		got, err := fs.ReadFile(img, p)
		if err != nil || string(got) != "inside the image" {
			t.Errorf("ReadFile(%q) = %q, %v; want the image's own etc/passwd", p, got, err)
		}
	}
	if _, err := img.Open("loop-a"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("Open(loop-a) = %v, want a loop error", err)
	}
	if _, err := img.Open("dangling"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(dangling) = %v, want not exist", err)
	}
	entries, _ := img.ReadDir(".")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, ","); got != "absolute,etc,up" {
		t.Errorf("ReadDir(.) = %s; links are listed as their targets, broken ones left out", got)
	}
}

func TestTruncatedOrForeignImagesFailAtOpen(t *testing.T) {
	_, iso := isotest.ReleaseISO(t, 1<<20)
	raw, err := os.ReadFile(iso)
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 1<<20)
	for i := range garbage {
		garbage[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"half of the image", raw[:len(raw)/2], iso9660.ErrTruncated, "did not complete"},
		{"cut after the primary descriptor", raw[:17*iso9660.SectorSize], iso9660.ErrTruncated, "without a terminator"},
		{"only the system area", raw[:10*iso9660.SectorSize], iso9660.ErrNotISO9660, "too short"},
		{"empty", nil, iso9660.ErrNotISO9660, "too short"},
		{"not an ISO", garbage, iso9660.ErrNotISO9660, "CD001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "disk.img")
			if err := os.WriteFile(p, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			img, err := iso9660.OpenFile(p)
			if err == nil {
				_ = img.Close()
				t.Fatal("OpenFile succeeded")
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %q: want %v mentioning %q and the path", err, tc.want, tc.msg)
			}
		})
	}
}

func TestConcurrentRandomReads(t *testing.T) {
	tree, iso := isotest.ReleaseISO(t, 2<<20)
	img := open(t, iso)
	const p = "rootfs.squashfs"
	want := isotest.MustRead(t, tree, p)
	f, err := img.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	ra := f.(io.ReaderAt)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			buf := make([]byte, 70000)
			for range 200 {
				off := rng.Int64N(int64(len(want)))
				n, err := ra.ReadAt(buf, off)
				end := min(off+int64(len(buf)), int64(len(want)))
				if int64(n) != end-off || (err != nil && err != io.EOF) || (end == off+int64(len(buf)) && err != nil) {
					t.Errorf("ReadAt(%d) = %d, %v", off, n, err)
					return
				}
				if !bytes.Equal(buf[:n], want[off:end]) {
					t.Errorf("ReadAt(%d): wrong bytes", off)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestMultiExtentFile reads a file stored as several extents, as xorriso
// writes files of 4 GiB and more. The image is made by hand so that the
// test does not need gigabytes; its extents are not contiguous.
func TestMultiExtentFile(t *testing.T) {
	parts := [][]byte{bytes.Repeat([]byte("a"), 2048), bytes.Repeat([]byte("b"), 4096), []byte("the last, short extent")}
	raw := isotest.MultiExtentImage(parts)
	img, err := iso9660.New(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Join(parts, nil)
	got, err := fs.ReadFile(img, "big.bin")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadFile(big.bin) = %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	f, _ := img.Open("big.bin")
	if n := len(f.(*iso9660.File).Extents()); n != 3 {
		t.Errorf("%d extents, want 3", n)
	}
	buf := make([]byte, 10)
	if n, err := f.(io.ReaderAt).ReadAt(buf, 6140); n != 10 || err != nil || string(buf) != "bbbbthe la" {
		t.Errorf("ReadAt across extents = %q, %d, %v", buf, n, err)
	}
	small, err := fs.ReadFile(img, "small.txt")
	if err != nil || string(small) != "small" {
		t.Errorf("the entry after the multi-extent file: %q, %v", small, err)
	}
	// An image cut inside the file's last extent.
	cut := raw[:len(raw)-iso9660.SectorSize]
	if _, err := iso9660.New(bytes.NewReader(cut), int64(len(cut))); !errors.Is(err, iso9660.ErrTruncated) {
		t.Errorf("truncated multi-extent image: %v, want ErrTruncated", err)
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

package releasetest

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/harvester/upgrade-toolkit/internal/release"
)

// TestFilesRoundTrip reads every file back through the parsers.
func TestFilesRoundTrip(t *testing.T) {
	repo := New()
	files := repo.Files()

	r, err := release.ParseRelease(files[release.ReleaseFile].Data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&repo.Release, r); diff != "" {
		t.Errorf("release (-want +got):\n%s", diff)
	}
	if err := release.CheckEligibility(PreviousVersion, r.Harvester, r.MinUpgradableVersion, true); err != nil {
		t.Errorf("the default repo is not an eligible upgrade: %v", err)
	}

	m, err := release.ParseBundleMetadata(files[release.BundleMetadataFile].Data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&repo.Bundle, m); diff != "" {
		t.Errorf("bundle metadata (-want +got):\n%s", diff)
	}
	for _, group := range [][]release.ImageArchive{m.Images.Common, m.Images.RKE2, m.Images.Agent} {
		for _, a := range group {
			list, ok := files[a.ListPath()]
			if !ok {
				t.Errorf("no %s", a.ListPath())
				continue
			}
			images, err := release.ParseImageList(list.Data)
			if err != nil || len(images) == 0 {
				t.Errorf("%s: %v, %v", a.ListPath(), images, err)
			}
			if archive := files[a.ArchivePath()]; archive == nil || len(archive.Data) != repo.ArchiveSize {
				t.Errorf("%s missing or not %d bytes", a.ArchivePath(), repo.ArchiveSize)
			}
		}
	}

	current, err := release.ParseImageList(files[release.ImageListPath(release.CurrentImageList)].Data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(repo.CurrentImages(), current); diff != "" {
		t.Errorf("current image list (-want +got):\n%s", diff)
	}
	if len(current) != 20 {
		t.Errorf("current list has %d images, want the 20 of the lists", len(current))
	}
	previous, err := release.ParseImageList(files[release.ImageListPath(PreviousVersion)].Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(previous) != len(repo.PreviousImages[PreviousVersion]) {
		t.Errorf("previous list has %d images, want %d", len(previous), len(repo.PreviousImages[PreviousVersion]))
	}
	if stale := release.StaleImages(previous, current, release.RetainedImageNames); len(stale) == 0 {
		t.Error("the default repo leaves no stale image to clean up")
	}
	if len(files[release.RootfsFile].Data) != repo.RootfsSize {
		t.Errorf("rootfs is %d bytes", len(files[release.RootfsFile].Data))
	}
	if err := fstest.TestFS(files, release.ReleaseFile, release.BundleMetadataFile, release.RootfsFile); err != nil {
		t.Error(err)
	}
}

func TestFilesAreDeterministic(t *testing.T) {
	a, b := New().Files(), New().Files()
	if len(a) != len(b) {
		t.Fatalf("%d files, then %d", len(a), len(b))
	}
	for name, f := range a {
		if !bytes.Equal(f.Data, b[name].Data) {
			t.Errorf("%s differs between runs", name)
		}
	}
	if bytes.Equal(Bytes("a", 64), Bytes("b", 64)) {
		t.Error("different names give the same bytes")
	}
}

func TestChangedRepo(t *testing.T) {
	repo := New()
	repo.Release.Kubernetes = "v1.36.0+rke2r2"
	delete(repo.PreviousImages, PreviousVersion)
	repo.ArchiveSize = 3 << 20
	files := repo.Files()
	r, err := release.ParseRelease(files[release.ReleaseFile].Data)
	if err != nil || r.Kubernetes != "v1.36.0+rke2r2" {
		t.Errorf("release: %+v, %v", r, err)
	}
	if _, ok := files[release.ImageListPath(PreviousVersion)]; ok {
		t.Error("a removed previous list is still there")
	}
	if len(files[repo.Bundle.Images.Common[0].ArchivePath()].Data) != 3<<20 {
		t.Error("archive size not applied")
	}
}

func TestHandlerAndCopyFS(t *testing.T) {
	files := New().Files()
	srv := httptest.NewServer(Handler(files))
	defer srv.Close()
	resp, err := http.Get(srv.URL + release.RepoRoot + release.ReleaseFile)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, files[release.ReleaseFile].Data) {
		t.Errorf("GET release file: %s, %q", resp.Status, body)
	}
	resp, err = http.Get(srv.URL + "/" + release.ReleaseFile)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("outside %s: %s, want 404", release.RepoRoot, resp.Status)
	}

	dir := t.TempDir()
	if err := os.CopyFS(dir, files); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(release.ImageListPath(PreviousVersion))))
	if err != nil || !bytes.Equal(onDisk, files[release.ImageListPath(PreviousVersion)].Data) {
		t.Errorf("copied list: %v", err)
	}
	if _, err := fs.Stat(os.DirFS(dir), release.RootfsFile); err != nil {
		t.Error(err)
	}
}

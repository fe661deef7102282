package release

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// The fuzz tests run their seeds as part of `go test`; run one for longer
// with, e.g., go test -fuzz=FuzzParseRelease -fuzztime=30s ./internal/release/

func FuzzParseRelease(f *testing.F) {
	f.Add(validRelease)
	f.Add("")
	f.Add("harvester: v1.8.0\n")
	f.Add("- a\n- b\n")
	f.Add("harvester: &a v1\nos: *a\n")
	f.Add(validRelease + "---\n")
	f.Add(strings.Replace(validRelease, "kubernetes: v1.35.2+rke2r1", "kubernetes: {a: [1, 2]}", 1))
	f.Add(strings.Replace(validRelease, "rancherDependencies:", "rancherDependencies: !!binary aGVsbG8=\nx:", 1))
	f.Fuzz(func(t *testing.T, data string) {
		r, err := ParseRelease([]byte(data))
		if err != nil {
			if !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), ReleaseFile+": ") {
				t.Fatalf("error %v is not a content error of %s", err, ReleaseFile)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("parsed release does not validate: %v", err)
		}
		out, err := yaml.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseRelease(out)
		if err != nil {
			t.Fatalf("re-encoded release does not parse: %v\n%s", err, out)
		}
		if diff := cmp.Diff(r, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		if m := r.Metadata(); m.Harvester != r.Harvester || m.Kubernetes != r.Kubernetes {
			t.Fatal("metadata differs from the release")
		}
		if !rke2Version.MatchString(r.KubeletVersion()) || strings.Contains(r.KubeletVersion(), "-rc") {
			t.Fatalf("kubelet version %q of %q", r.KubeletVersion(), r.Kubernetes)
		}
	})
}

func FuzzParseBundleMetadata(f *testing.F) {
	f.Add(validBundle)
	f.Add("")
	f.Add("images: {common: [{list: a.txt, archive: a.tar.zst}], rke2: [{list: b, archive: b.tar.zst}], agent: [{list: c, archive: c.tar.zst}]}")
	f.Add("images:\n  common:\n  - list: ../a\n    archive: /b.tar.zst\n")
	f.Add("images: [1, 2]\n")
	f.Fuzz(func(t *testing.T, data string) {
		m, err := ParseBundleMetadata([]byte(data))
		if err != nil {
			if !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), BundleMetadataFile+": ") {
				t.Fatalf("error %v is not a content error of %s", err, BundleMetadataFile)
			}
			return
		}
		for _, group := range [][]ImageArchive{m.Images.Common, m.Images.RKE2, m.Images.Agent} {
			if len(group) == 0 {
				t.Fatal("an empty group was accepted")
			}
			for _, a := range group {
				if !isRepoPath(a.ListPath()) || !isRepoPath(a.ArchivePath()) || !strings.HasPrefix(a.ArchivePath(), BundleDir+"/") {
					t.Fatalf("entry %+v leaves the bundle", a)
				}
			}
		}
		out, err := yaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseBundleMetadata(out)
		if err != nil {
			t.Fatalf("re-encoded metadata does not parse: %v\n%s", err, out)
		}
		if diff := cmp.Diff(m, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

func FuzzParseImageList(f *testing.F) {
	f.Add("docker.io/rancher/harvester:v1.7.1\n\n# comment\n  rancher/fleet:v0.13.1 # inline\r\nbusybox\n")
	f.Add("")
	f.Add("localhost:5000/a/b:c@sha256:" + strings.Repeat("0", 64))
	f.Add("a b\n")
	f.Add("UPPER/case:1\n")
	f.Fuzz(func(t *testing.T, data string) {
		images, err := ParseImageList([]byte(data))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if !slices.IsSorted(images) || len(slices.Compact(slices.Clone(images))) != len(images) {
			t.Fatalf("not sorted and unique: %q", images)
		}
		for _, ref := range images {
			if imageName(ref) == "" {
				t.Fatalf("%q has no name", ref)
			}
		}
		again, err := ParseImageList([]byte(strings.Join(images, "\n")))
		if err != nil {
			t.Fatalf("normalized list does not parse: %v", err)
		}
		if !slices.Equal(images, again) {
			t.Fatalf("normalizing twice changed %q to %q", images, again)
		}
		if stale := StaleImages(images, images, nil); len(stale) != 0 {
			t.Fatalf("a list is stale against itself: %q", stale)
		}
		if stale := StaleImages(images, nil, nil); !slices.Equal(stale, images) {
			t.Fatalf("against nothing, %q are stale, want all of %q", stale, images)
		}
	})
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"v1.8.0", "v1.8.0-rc1", "1.2.3", "v1.2-ab12cd34", "master-head", "v", "", "v01.2.3", "v1.2.3-rc.01", "vv1.2.3", "v1.2.3+b", "v18446744073709551616.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidVersion) {
				t.Fatalf("error %v is not ErrInvalidVersion", err)
			}
			return
		}
		if v.String() != s {
			t.Fatalf("String() = %q, want %q", v.String(), s)
		}
		if v.IsDev() && v.IsPrerelease() {
			t.Fatal("both dev and prerelease")
		}
		if c, err := v.Compare(v); err != nil || c != 0 {
			t.Fatalf("Compare with itself = %d, %v", c, err)
		}
		if err := CheckEligibility(s, s, "", true); err != nil {
			t.Fatalf("the same version is not eligible: %v", err)
		}
		if !isRepoPath(ImageListPath(s)) {
			t.Fatalf("image list path %q is not a repo path", ImageListPath(s))
		}
	})
}

func FuzzCheckEligibility(f *testing.F) {
	f.Add("v1.7.1", "v1.8.0", "v1.7.0", true)
	f.Add("v1.8.0-rc1", "v1.9.0", "", true)
	f.Add("v1.8-head", "v1.8.0", "x", false)
	f.Add("", "v1", "v1.0.0", true)
	f.Fuzz(func(t *testing.T, current, target, minimum string, strict bool) {
		err := CheckEligibility(current, target, minimum, strict)
		var ee *EligibilityError
		switch {
		case err == nil:
			cv, _ := ParseVersion(current)
			tv, _ := ParseVersion(target)
			if order, cmpErr := cv.Compare(tv); cmpErr == nil && order > 0 {
				t.Fatalf("downgrade %s -> %s allowed", current, target)
			}
		case errors.As(err, &ee):
			if !strings.Contains(err.Error(), current) || !strings.Contains(err.Error(), target) {
				t.Fatalf("message %q does not name both versions", err)
			}
		case !errors.Is(err, ErrInvalidVersion):
			t.Fatalf("unexpected error %v", err)
		}
	})
}

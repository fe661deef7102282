package preflight_test

import (
	"context"
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
)

// TestImages: the verdicts on where the upgrade's images come from, over
// the realistic release: every image found passes; one no node has and
// nothing pulls fails, naming it, its workloads and the fix; one that is
// not known, or that a skipped preload leaves to the nodes' registries, is
// a warning; a mirror that containerd-registry does not name is a warning.
func TestImages(t *testing.T) {
	rel, err := images.Read(context.Background(), images.FS{FS: releasetest.New().Files()}, releasetest.PreviousVersion)
	if err != nil {
		t.Fatal(err)
	}
	base := images.Facts{
		Toolkit:       images.Toolkit{Repository: "rancher/harvester-upgrade-toolkit", Running: "v1.7.1", Target: "v1.8.0", Fallback: "v0.0.0-dev"},
		RunningImages: rel.Running, Archives: rel.Archives,
	}
	mirror, err := images.ParseMirror("registry.example.com:5000")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		facts func(*images.Facts)
		// want is the worst verdict, and what its message must say.
		want v1beta1.CheckResult
		says []string
	}{
		{"both releases ship the toolkit", nil, v1beta1.CheckPassed,
			[]string{"image docker.io/rancher/harvester-upgrade-toolkit:v1.7.1 (repo, image-preload): on every node: v1.7.1 installed it"}},
		{"the running release does not ship it", func(f *images.Facts) { f.RunningImages = []string{"docker.io/rancher/harvester:v1.7.1"} }, v1beta1.CheckFailed,
			[]string{"image docker.io/rancher/harvester-upgrade-toolkit:v1.7.1 (repo, image-preload) is not on the nodes", "--image-mirror", "upgrade-toolkit images --version v1.8.0 --push-list"}},
		{"no list of the running release", func(f *images.Facts) { f.RunningImages = nil }, v1beta1.CheckWarning,
			[]string{"the image list of the running release v1.7.1 was not read", "ImagePullBackOff"}},
		{"preload skipped", func(f *images.Facts) { f.PreloadSkipped = true }, v1beta1.CheckWarning,
			[]string{"ImagePreload is skipped", "an air-gapped cluster cannot pull them"}},
		{"preload skipped, containerd-registry mirrors everything", func(f *images.Facts) {
			f.PreloadSkipped = true
			f.Registries, _ = images.ParseRegistries(`{"Mirrors":{"*":{"Endpoints":["https://m.example.com"]}}}`)
		}, v1beta1.CheckPassed, []string{"the nodes pull the new release's 20 images through containerd-registry"}},
		{"a mirror containerd-registry does not name", func(f *images.Facts) {
			f.RunningImages = []string{}
			f.Toolkit.Mirror = mirror
		}, v1beta1.CheckWarning, []string{"pulled from the mirror registry.example.com:5000", "add it under Configs of containerd-registry"}},
		{"a mirror containerd-registry names", func(f *images.Facts) {
			f.RunningImages = []string{}
			f.Toolkit.Mirror = mirror
			f.Registries, _ = images.ParseRegistries(`{"Configs":{"registry.example.com:5000":{}}}`)
		}, v1beta1.CheckPassed, []string{"pulled from the mirror registry.example.com:5000"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := base
			if c.facts != nil {
				c.facts(&f)
			}
			verdicts := preflight.Images(f, rel.Images())
			worst, msgs := v1beta1.CheckPassed, make([]string, 0, len(verdicts))
			for _, v := range verdicts {
				if v.Reason != preflight.ReasonImagesAvailable {
					t.Errorf("verdict reason %s", v.Reason)
				}
				msgs = append(msgs, string(v.Result)+": "+v.Message)
				if v.Result == v1beta1.CheckFailed || (v.Result == v1beta1.CheckWarning && worst == v1beta1.CheckPassed) {
					worst = v.Result
				}
			}
			all := strings.Join(msgs, "\n")
			if worst != c.want {
				t.Errorf("worst verdict %s, want %s:\n%s", worst, c.want, all)
			}
			for _, s := range c.says {
				if !strings.Contains(all, s) {
					t.Errorf("verdicts do not say %q:\n%s", s, all)
				}
			}
		})
	}
}

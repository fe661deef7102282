package images_test

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
)

const (
	oldToolkit = "docker.io/rancher/harvester-upgrade-toolkit:v1.7.1"
	newToolkit = "docker.io/rancher/harvester-upgrade-toolkit:v1.8.0"
)

func toolkit() images.Toolkit {
	return images.Toolkit{Repository: "rancher/harvester-upgrade-toolkit", Running: "v1.7.1", Target: "v1.8.0", Fallback: "v0.0.0-dev"}
}

func mustMirror(t *testing.T, s string) images.Mirror {
	t.Helper()
	m, err := images.ParseMirror(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestToolkitImageByStage: before the import a workload runs the running
// release's toolkit, after it the new release's; spec.upgrade's tag wins;
// the manager's version stands in for an unknown release; a mirror rewrites
// the image but not what must be pushed to it.
func TestToolkitImageByStage(t *testing.T) {
	tk := toolkit()
	for _, c := range []struct {
		name     string
		tk       func(*images.Toolkit)
		stage    images.Stage
		src, img string
	}{
		{"before", nil, images.BeforeImport, oldToolkit, oldToolkit},
		{"after", nil, images.AfterImport, newToolkit, newToolkit},
		{"spec.upgrade", func(t *images.Toolkit) { t.Tag = "main-head" }, images.BeforeImport,
			"docker.io/rancher/harvester-upgrade-toolkit:main-head", "docker.io/rancher/harvester-upgrade-toolkit:main-head"},
		{"target unknown", func(t *images.Toolkit) { t.Target = "" }, images.AfterImport,
			"docker.io/rancher/harvester-upgrade-toolkit:v0.0.0-dev", "docker.io/rancher/harvester-upgrade-toolkit:v0.0.0-dev"},
		{"annotation repository", func(t *images.Toolkit) { t.Repository = "registry.example.com:5000/toolkit" }, images.AfterImport,
			"registry.example.com:5000/toolkit:v1.8.0", "registry.example.com:5000/toolkit:v1.8.0"},
		{"mirror", func(tk *images.Toolkit) { tk.Mirror = mustMirror(t, "registry.example.com:5000") }, images.BeforeImport,
			oldToolkit, "registry.example.com:5000/rancher/harvester-upgrade-toolkit:v1.7.1"},
		{"mirror with a path", func(tk *images.Toolkit) { tk.Mirror = mustMirror(t, "harbor.example.com/harvester/") }, images.AfterImport,
			newToolkit, "harbor.example.com/harvester/rancher/harvester-upgrade-toolkit:v1.8.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := tk
			if c.tk != nil {
				c.tk(&x)
			}
			if got := x.Source(c.stage); got != c.src {
				t.Errorf("Source = %q, want %q", got, c.src)
			}
			if got := x.Image(c.stage); got != c.img {
				t.Errorf("Image = %q, want %q", got, c.img)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	for ref, want := range map[string][2]string{
		"rancher/x:v1":                                {"docker.io/rancher/x", "v1"},
		"registry.example.com:5000/x:v1":              {"registry.example.com:5000/x", "v1"},
		"rancher/x@sha256:" + strings.Repeat("a", 64): {"docker.io/rancher/x", "@sha256:" + strings.Repeat("a", 64)},
	} {
		if r, tag := images.Split(ref); r != want[0] || tag != want[1] {
			t.Errorf("Split(%q) = %q, %q, want %q, %q", ref, r, tag, want[0], want[1])
		}
	}
}

// TestParseMirror: a mirror is a registry host with an optional port and
// path; anything else is refused with what is wrong and an example.
func TestParseMirror(t *testing.T) {
	for s, want := range map[string]string{
		"":                                    "",
		"registry.example.com":                "registry.example.com",
		"registry.example.com:5000":           "registry.example.com:5000",
		"localhost:5000":                      "localhost:5000",
		"10.0.0.5:5000/harvester":             "10.0.0.5:5000/harvester",
		"harbor.example.com/proxy/dockerhub/": "harbor.example.com/proxy/dockerhub",
	} {
		m, err := images.ParseMirror(s)
		if err != nil || m.String() != want {
			t.Errorf("ParseMirror(%q) = %q, %v, want %q", s, m, err, want)
		}
	}
	for s, want := range map[string]string{
		"https://registry.example.com": "drop the scheme",
		"mirror":                       "is not a registry host",
		"mirror/harvester":             "is not a registry host",
		"registry.example.com:":        "empty port",
		"Registry.Example.com/X":       "e.g. registry.example.com:5000",
		"registry.example.com/a:v1":    "e.g. registry.example.com:5000",
	} {
		if _, err := images.ParseMirror(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMirror(%q) = %v, want an error saying %q", s, err, want)
		}
	}
}

// TestRegistries reads Harvester's containerd-registry setting as Harvester
// stores it.
func TestRegistries(t *testing.T) {
	const value = `{"Mirrors":{"docker.io":{"Endpoints":["https://mirror.example.com:5000/v2/dockerhub"],"Rewrites":null}},` +
		`"Configs":{"mirror.example.com:5000":{"Auth":null,"TLS":{"InsecureSkipVerify":true}},"registry.suse.com":{"Auth":{"Username":"u"}}}}`
	r, err := images.ParseRegistries(value)
	if err != nil {
		t.Fatal(err)
	}
	if how, ok := r.Pulls(oldToolkit); !ok || !strings.Contains(how, "mirror of docker.io (https://mirror.example.com:5000/v2/dockerhub)") {
		t.Errorf("Pulls(docker.io image) = %q, %v", how, ok)
	}
	if how, ok := r.Pulls("registry.suse.com/suse/sles/15.7/virt-operator:1"); !ok || !strings.Contains(how, "registry.suse.com, which containerd-registry configures") {
		t.Errorf("Pulls(registry.suse.com image) = %q, %v", how, ok)
	}
	if _, ok := r.Pulls("quay.io/x/y:1"); ok {
		t.Error("quay.io is neither mirrored nor configured, yet pulled")
	}
	if !r.Knows("mirror.example.com:5000") || r.Knows("other.example.com") {
		t.Error("Knows: the mirror endpoint and configured host are known, nothing else")
	}
	if got := r.MirrorHosts("docker.io"); !cmp.Equal(got, []string{"mirror.example.com:5000"}) {
		t.Errorf("MirrorHosts(docker.io) = %v", got)
	}
	star, err := images.ParseRegistries(`{"Mirrors":{"*":{"Endpoints":["http://10.0.0.5:5000"]}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := star.Pulls("quay.io/x/y:1"); !ok || !cmp.Equal(star.MirrorHosts("quay.io"), []string{"10.0.0.5:5000"}) {
		t.Error(`a mirror of "*" mirrors every registry`)
	}
	if empty, err := images.ParseRegistries(""); err != nil || len(empty.Mirrors) != 0 {
		t.Errorf("an empty setting: %+v, %v", empty, err)
	}
	if _, err := images.ParseRegistries("mirrors: {}"); err == nil || !strings.Contains(err.Error(), "not the JSON Harvester writes") {
		t.Errorf("YAML instead of JSON: %v", err)
	}
}

// TestResolve: where each workload gets its image, for every source the
// model knows.
func TestResolve(t *testing.T) {
	rel := releasetest.New()
	running, err := release.ParseImageList([]byte(strings.Join(rel.PreviousImages[releasetest.PreviousVersion], "\n")))
	if err != nil {
		t.Fatal(err)
	}
	r, err := images.Read(context.Background(), images.FS{FS: rel.Files()}, releasetest.PreviousVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(r.Running, running) {
		t.Fatalf("Read's running list: %v", r.Running)
	}
	origins := func(f images.Facts) string {
		var out []string
		for _, e := range images.Resolve(f, images.Workloads) {
			out = append(out, e.Name+"="+string(e.Origin))
		}
		return strings.Join(out, " ")
	}
	base := images.Facts{Toolkit: toolkit(), RunningImages: r.Running, Archives: r.Archives}
	for _, c := range []struct {
		name  string
		facts func(*images.Facts)
		want  string
	}{
		{"both releases ship the toolkit", nil,
			"repo=running-release image-preload=running-release cluster-upgrade=preload pre-drain=preload post-drain=preload single-node-upgrade=preload restore-vm=preload image-cleanup=preload"},
		{"the running release does not ship it", func(f *images.Facts) { f.RunningImages = []string{"docker.io/rancher/harvester:v1.7.1"} },
			"repo=missing image-preload=missing cluster-upgrade=preload pre-drain=preload post-drain=preload single-node-upgrade=preload restore-vm=preload image-cleanup=preload"},
		{"no list of the running release", func(f *images.Facts) { f.RunningImages = nil },
			"repo=unknown image-preload=unknown cluster-upgrade=preload pre-drain=preload post-drain=preload single-node-upgrade=preload restore-vm=preload image-cleanup=preload"},
		{"preload skipped", func(f *images.Facts) { f.PreloadSkipped = true },
			"repo=running-release image-preload=running-release cluster-upgrade=unknown pre-drain=unknown post-drain=unknown single-node-upgrade=unknown restore-vm=unknown image-cleanup=unknown"},
		{"a development tag", func(f *images.Facts) { f.Toolkit.Tag = "main-head" },
			"repo=missing image-preload=missing cluster-upgrade=missing pre-drain=missing post-drain=missing single-node-upgrade=missing restore-vm=missing image-cleanup=missing"},
		{"a development tag through containerd-registry", func(f *images.Facts) {
			f.Toolkit.Tag = "main-head"
			f.Registries, _ = images.ParseRegistries(`{"Mirrors":{"docker.io":{"Endpoints":["https://m.example.com"]}}}`)
		}, "repo=registry image-preload=registry cluster-upgrade=registry pre-drain=registry post-drain=registry single-node-upgrade=registry restore-vm=registry image-cleanup=registry"},
		{"a mirror", func(f *images.Facts) { f.Toolkit.Mirror = mustMirror(t, "m.example.com:5000") },
			"repo=mirror image-preload=mirror cluster-upgrade=mirror pre-drain=mirror post-drain=mirror single-node-upgrade=mirror restore-vm=mirror image-cleanup=mirror"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := base
			if c.facts != nil {
				c.facts(&f)
			}
			if got := origins(f); got != c.want {
				t.Errorf("origins:\n got %s\nwant %s", got, c.want)
			}
		})
	}
	e := images.Resolve(base, images.Workloads)
	if e[0].Detail != "on every node: v1.7.1 installed it (its image list)" ||
		e[2].Detail != "imported on every node by ImagePreload from bundle/harvester/images/harvester-images-v1.8.0.tar.zst" {
		t.Errorf("details: %q, %q", e[0].Detail, e[2].Detail)
	}
}

// TestReport: the report of the demo's release names what a mirror must
// hold: the two toolkit images, and every release image when the preload
// is skipped.
func TestReport(t *testing.T) {
	r, err := images.Read(context.Background(), images.FS{FS: releasetest.New().Files()}, releasetest.PreviousVersion)
	if err != nil {
		t.Fatal(err)
	}
	f := images.Facts{Toolkit: toolkit()}
	f.Toolkit.Mirror = mustMirror(t, "registry.example.com:5000")
	rep := images.NewReport(f, r)
	want := []images.Copy{
		{Image: oldToolkit, Mirror: "registry.example.com:5000/rancher/harvester-upgrade-toolkit:v1.7.1", For: "the toolkit's repo and image-preload"},
		{Image: newToolkit, Mirror: "registry.example.com:5000/rancher/harvester-upgrade-toolkit:v1.8.0",
			For: "the toolkit's cluster-upgrade, pre-drain, post-drain, single-node-upgrade, restore-vm and image-cleanup"},
	}
	if diff := cmp.Diff(want, rep.Push); diff != "" {
		t.Errorf("push list (-want +got):\n%s", diff)
	}
	if len(rep.Release) != 4 || rep.Release[3].Imported || !rep.Release[0].Imported {
		t.Errorf("release archives: %+v", rep.Release)
	}
	f.PreloadSkipped = true
	if n := len(images.NewReport(f, r).Push); n != 2+len(r.Images()) {
		t.Errorf("with the preload skipped, the push list has %d images, want the toolkit's 2 and the release's %d", n, len(r.Images()))
	}
}

// TestReadWithoutRunningList: an ISO without the running release's list
// (non-GA ISOs) reads fine, with the list unknown; a malformed list is an
// error naming it.
func TestReadWithoutRunningList(t *testing.T) {
	files := releasetest.New().Files()
	r, err := images.Read(context.Background(), images.FS{FS: files}, "v1.6.0")
	if err != nil || r.Running != nil {
		t.Fatalf("Read: %+v, %v", r, err)
	}
	bad := fstest.MapFS{}
	for k, v := range files {
		bad[k] = v
	}
	bad[release.ImageListPath(releasetest.PreviousVersion)] = &fstest.MapFile{Data: []byte("not an image!\n")}
	if _, err := images.Read(context.Background(), images.FS{FS: bad}, releasetest.PreviousVersion); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a malformed running list: %v", err)
	}
}

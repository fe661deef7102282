package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
	"github.com/harvester/upgrade-toolkit/internal/repo/isotest"
	"github.com/harvester/upgrade-toolkit/internal/sim"
)

// demoISO builds the ISO of the demo's release (the simulator's default
// release tree, v1.7.1 to v1.8.0) and returns its path.
func demoISO(t *testing.T, tree fs.FS) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.CopyFS(dir, tree); err != nil {
		t.Fatal(err)
	}
	iso := filepath.Join(t.TempDir(), "harvester.iso")
	isotest.Build(t, dir, iso)
	return iso
}

// runImagesCommand runs `images` with args, as the binary does, and
// returns its output and exit code.
func runImagesCommand(t *testing.T, args ...string) (string, int) {
	t.Helper()
	code, out := runCLI(t, append([]string{"images"}, args...)...)
	return out, code
}

const (
	toolkitRunning = "docker.io/rancher/harvester-upgrade-toolkit:v1.7.1"
	toolkitTarget  = "docker.io/rancher/harvester-upgrade-toolkit:v1.8.0"
)

// TestImagesCommandOnTheDemoRelease reads the demo's release from its ISO
// (a file, and a URL read with range requests) and from a repo, and checks
// where each workload's image comes from: the repo and the preload run the
// running release's toolkit, which its image list puts on every node; the
// rest the new release's, which the preload imports.
func TestImagesCommandOnTheDemoRelease(t *testing.T) {
	tree := sim.ReleaseTree(sim.Config{})
	iso := demoISO(t, tree)
	isoServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, iso) }))
	defer isoServer.Close()
	repoServer := httptest.NewServer(releasetest.Handler(tree))
	defer repoServer.Close()

	for _, source := range [][]string{
		{"--iso", iso},
		{"--iso", isoServer.URL + "/harvester.iso"},
		{"--repo-url", repoServer.URL + release.RepoRoot},
	} {
		t.Run(source[0]+" "+source[1], func(t *testing.T) {
			out, code := runImagesCommand(t, append(source, "--from", "v1.7.1", "-o", "json")...)
			if code != 0 {
				t.Fatalf("exit code %d: %s", code, out)
			}
			var rep imagesJSON
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			checkDemoReport(t, rep)
		})
	}

	out, code := runImagesCommand(t, "--iso", iso, "--from", "v1.7.1")
	t.Log(out)
	for _, want := range []string{
		"Images of the upgrade from v1.7.1 to v1.8.0",
		"repo", toolkitRunning, "running-release: on every node: v1.7.1 installed it",
		"cluster-upgrade", toolkitTarget, "preload: imported on every node by ImagePreload",
		"TO PUSH TO A MIRROR", "PASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output does not say %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Errorf("exit code %d", code)
	}
}

func checkDemoReport(t *testing.T, rep imagesJSON) {
	t.Helper()
	if rep.Running != "v1.7.1" || rep.Target != "v1.8.0" {
		t.Errorf("running %s, target %s", rep.Running, rep.Target)
	}
	if len(rep.Workloads) != len(images.Workloads) {
		t.Fatalf("%d workloads, want %d", len(rep.Workloads), len(images.Workloads))
	}
	for _, e := range rep.Workloads {
		want, origin := toolkitTarget, images.FromPreload
		if e.Stage == images.BeforeImport {
			want, origin = toolkitRunning, images.FromRunningRelease
		}
		if e.Image != want || e.Origin != origin {
			t.Errorf("%s runs %s from %s, want %s from %s", e.Name, e.Image, e.Origin, want, origin)
		}
	}
	if len(rep.Release) == 0 || !slices.ContainsFunc(rep.Release, func(a images.Archive) bool { return slices.Contains(a.Images, toolkitTarget) && a.Imported }) {
		t.Errorf("no imported archive of the release holds %s: %+v", toolkitTarget, rep.Release)
	}
	var push []string
	for _, c := range rep.Push {
		push = append(push, c.Image)
	}
	if !slices.Equal(push, []string{toolkitRunning, toolkitTarget}) {
		t.Errorf("push list %v", push)
	}
	for _, c := range rep.Checks {
		if c.Verdict != "PASS" {
			t.Errorf("check %s: %s", c.Verdict, c.Message)
		}
	}
}

// TestImagesCommandFromAVersion reads the ISO of a Version of the cluster
// over HTTP, the running release and the containerd-registry setting from
// the cluster, and lists what a mirror must hold.
func TestImagesCommandFromAVersion(t *testing.T) {
	iso := demoISO(t, sim.ReleaseTree(sim.Config{}))
	isoServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, iso) }))
	defer isoServer.Close()
	version := &harvesterv1beta1.Version{}
	version.Namespace, version.Name = cluster.HarvesterNamespace, "v1.8.0"
	version.Spec.ISOURL = isoServer.URL + "/harvester.iso"
	serverVersion := &harvesterv1beta1.Setting{Value: "v1.7.1"}
	serverVersion.Name = cluster.ServerVersionSetting
	registry := &harvesterv1beta1.Setting{Value: `{"Mirrors":{"docker.io":{"Endpoints":["https://registry.example.test:5000"]}},"Configs":{"registry.example.test:5000":{"Auth":{"Username":"u"}}}}`}
	registry.Name = cluster.ContainerdRegistrySetting
	c := fake.NewClientBuilder().WithScheme(cluster.Scheme()).WithObjects(version, serverVersion, registry).Build()
	reach := func() (client.Reader, error) { return c, nil }

	mirror, err := images.ParseMirror("registry.example.test:5000")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o := imagesOptions{version: "v1.8.0", repository: "rancher/harvester-upgrade-toolkit", mirror: mirror, pushList: true}
	if err := runImages(t.Context(), o, reach, &out); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	want := toolkitRunning + " registry.example.test:5000/rancher/harvester-upgrade-toolkit:v1.7.1\n" +
		toolkitTarget + " registry.example.test:5000/rancher/harvester-upgrade-toolkit:v1.8.0\n"
	if out.String() != want {
		t.Errorf("push list:\n%s\nwant:\n%s", out.String(), want)
	}

	out.Reset()
	o.pushList, o.printer = false, &printers.JSONPrinter{}
	if err := runImages(t.Context(), o, reach, &out); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	var rep imagesJSON
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Running != "v1.7.1" || rep.Mirror != "registry.example.test:5000" || !strings.Contains(rep.Source, "Version v1.8.0") {
		t.Errorf("report running %s, mirror %s, source %s", rep.Running, rep.Mirror, rep.Source)
	}
	for _, e := range rep.Workloads {
		if e.Origin != images.FromMirror || !strings.HasPrefix(e.Image, "registry.example.test:5000/rancher/harvester-upgrade-toolkit:") {
			t.Errorf("%s runs %s from %s, want the mirror's copy", e.Name, e.Image, e.Origin)
		}
	}
}

// TestImagesCommandRefusesAMissingImage: a running release whose image list
// does not name the toolkit (a release from before it shipped it) leaves
// the repo and the preload without an image: the command says which and
// what to do, and exits as a pre-flight that would refuse to start.
func TestImagesCommandRefusesAMissingImage(t *testing.T) {
	tree := sim.ReleaseTree(sim.Config{}).(fstest.MapFS)
	listPath := release.ImageListPath("v1.7.1")
	list, err := release.ParseImageList(tree[listPath].Data)
	if err != nil {
		t.Fatal(err)
	}
	list = slices.DeleteFunc(list, func(s string) bool { return s == toolkitRunning })
	tree[listPath] = &fstest.MapFile{Data: []byte(strings.Join(list, "\n") + "\n")}
	iso := demoISO(t, tree)

	out, code := runImagesCommand(t, "--iso", iso, "--from", "v1.7.1")
	if code != exitCheckFailed {
		t.Errorf("exit code %d, want %d", code, exitCheckFailed)
	}
	for _, want := range []string{
		"FAIL  image " + toolkitRunning + " (repo, image-preload) is not on the nodes",
		"--image-mirror", "missing",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	// The mirror cures it.
	if out, code := runImagesCommand(t, "--iso", iso, "--from", "v1.7.1", "--image-mirror", "registry.example.test:5000"); code != 0 {
		t.Errorf("with a mirror: exit code %d:\n%s", code, out)
	}
	for _, args := range [][]string{{"--iso", iso, "--version", "v1.8.0"}, {"--iso", iso, "-o", "table"}, {"--iso", iso, "--image-mirror", "https://r.example.test"}} {
		if out, code := runImagesCommand(t, args...); code != usageExitCode {
			t.Errorf("%v: exit code %d, want %d:\n%s", args, code, usageExitCode, out)
		}
	}
}

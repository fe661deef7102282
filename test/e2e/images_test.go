package e2e

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
)

// testMirror is the private registry of the mirror scenarios.
const testMirror = "registry.example.test:5000"

// releaseWithoutRunningToolkit is the default release, but the running
// release's image list does not name the toolkit (a release from before it
// shipped it): no node has the image the repo and the preload run.
func releaseWithoutRunningToolkit(t *testing.T) fs.FS {
	t.Helper()
	tree := sim.ReleaseTree(sim.Config{Nodes: 1}).(fstest.MapFS)
	p := release.ImageListPath(fromRelease)
	list, err := release.ParseImageList(tree[p].Data)
	if err != nil {
		t.Fatal(err)
	}
	n := len(list)
	list = slices.DeleteFunc(list, func(ref string) bool { return strings.Contains(ref, "/harvester-upgrade-toolkit:") })
	if len(list) == n {
		t.Fatalf("the running release's image list %s has no toolkit image", p)
	}
	tree[p] = &fstest.MapFile{Data: []byte(strings.Join(list, "\n") + "\n")}
	return tree
}

// The simulator's default releases.
const fromRelease, toRelease = "v1.7.1", "v1.8.0"

// mirrorCopies are the mirror's copies of the toolkit images of both
// releases.
func mirrorCopies() []string {
	var out []string
	for _, v := range []string{fromRelease, toRelease} {
		out = append(out, testMirror+"/rancher/harvester-upgrade-toolkit:"+v)
	}
	return out
}

// TestImageMirror: on an air-gapped cluster whose nodes lack the toolkit
// image of the running release, the manager's --image-mirror makes every
// workload pull its image from the mirror, which the nodes reach through
// Harvester's containerd-registry setting; the upgrade succeeds and every
// node pulled both toolkit images from it.
func TestImageMirror(t *testing.T) {
	p := scenario{
		sim:  sim.Config{Nodes: 2, ReleaseTree: releaseWithoutRunningToolkit(t), RegistryImages: mirrorCopies()},
		want: v1beta1.PhaseSucceeded,
		beforePlan: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			m, err := images.ParseMirror(testMirror)
			if err != nil {
				t.Fatal(err)
			}
			run.PhaseConfig().ImageMirror = m
			setRegistries(t, ctx, run, `{"Mirrors":{},"Configs":{"`+testMirror+`":{"Auth":null,"TLS":{"InsecureSkipVerify":true}}}}`)
		},
		after: func(t *testing.T, _ context.Context, run *simrun.Run) {
			for _, node := range []string{"node-1", "node-2"} {
				have := run.Sim.Images(node)
				for _, ref := range mirrorCopies() {
					if !slices.Contains(have, ref) {
						t.Errorf("node %s did not pull %s from the mirror; it has %v", node, ref, have)
					}
				}
			}
		},
	}.run(t)
	if c := findCheck(p, string(preflight.ReasonImagesAvailable)); !strings.Contains(c, "pulled from the mirror "+testMirror) {
		t.Errorf("the images check says %q, not that the mirror serves the images", c)
	}
}

// TestToolkitImageMissing: the same cluster without a mirror: the repo's
// pods cannot pull the running release's toolkit image, and the plan fails
// at once in RepoCreate, before any node was touched, saying what to do.
func TestToolkitImageMissing(t *testing.T) {
	scenario{
		sim:     sim.Config{Nodes: 2, ReleaseTree: releaseWithoutRunningToolkit(t)},
		want:    v1beta1.PhaseFailed,
		failure: "no mirror is configured, so no node can pull it",
		broken:  sim.RuleImageOnNode,
		during: func(t *testing.T, _ context.Context, _ *simrun.Run, p *v1beta1.UpgradePlan) {
			if p.Status.CurrentPhase == v1beta1.PhaseRepoCreated || p.Status.CurrentPhase == v1beta1.PhaseImagePreloading {
				t.Errorf("the plan went on to %s although the repo never started", p.Status.CurrentPhase)
			}
		},
	}.run(t)
}

// setRegistries writes Harvester's containerd-registry setting.
func setRegistries(t *testing.T, ctx context.Context, run *simrun.Run, value string) {
	t.Helper()
	s := &harvesterv1beta1.Setting{}
	if err := run.Client.Get(ctx, client.ObjectKey{Name: cluster.ContainerdRegistrySetting}, s); err != nil {
		t.Fatal(err)
	}
	s.Value = value
	if err := run.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// findCheck returns the message of a pre-flight check of the plan whose
// name ends in suffix.
func findCheck(p *v1beta1.UpgradePlan, suffix string) string {
	for _, c := range p.Status.Checks {
		if strings.HasSuffix(c.Name, suffix) {
			return c.Message
		}
	}
	return ""
}

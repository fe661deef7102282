package clusterupgrade_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/host"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
)

// helmScript plays wharfie and helm: wharfie leaves a chart and a helm
// binary, helm reports the running release's values.
type helmScript struct {
	cmds []string
	dir  string
}

func (s *helmScript) Run(_ context.Context, c host.Command) ([]byte, error) {
	line := strings.ReplaceAll(c.String(), s.dir, "WORK")
	s.cmds = append(s.cmds, line)
	switch {
	case c.Name == "wharfie":
		out := c.Args[len(c.Args)-1]
		if err := os.MkdirAll(out, 0o755); err != nil {
			return nil, err
		}
		for _, f := range []string{"rancher-2.14.0.tgz", "helm"} {
			if err := os.WriteFile(filepath.Join(out, f), []byte(f), 0o755); err != nil {
				return nil, err
			}
		}
	case strings.Contains(line, " get values "):
		return []byte("hostname: rancher.example\nrancherImageTag: v2.12.3\nextraEnv:\n- name: HTTP_PROXY\n  value: http://proxy:3128\n"), nil
	}
	return nil, nil
}

func TestHelmRancher(t *testing.T) {
	repo := releasetest.New()
	srv := httptest.NewServer(releasetest.Handler(repo.Files()))
	defer srv.Close()
	client, err := release.NewClient(srv.URL + release.RepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	run := &helmScript{dir: work}
	h := &clusterupgrade.HelmRancher{Repo: client, Run: run, WorkDir: work}
	if err := h.Upgrade(t.Context(), &repo.Release, clusterupgrade.RancherOptions{Replicas: ptr.To(-2)}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"wharfie --images-dir WORK/images rancher/system-agent-installer-rancher:v2.14.0 WORK/rancher",
		"WORK/rancher/helm get values rancher --namespace cattle-system --output yaml",
		"WORK/rancher/helm upgrade rancher WORK/rancher/rancher-2.14.0.tgz --namespace cattle-system --values WORK/values.yaml --wait --timeout 15m",
	}
	if !slices.Equal(run.cmds, want) {
		t.Errorf("commands\n%s\nwant\n%s", strings.Join(run.cmds, "\n"), strings.Join(want, "\n"))
	}
	agent := repo.Bundle.Images.Agent[0]
	if b, err := os.ReadFile(filepath.Join(work, "images", path.Base(agent.Archive))); err != nil || len(b) != repo.ArchiveSize {
		t.Errorf("the agent archive was not downloaded for wharfie: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(work, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	image, _ := values["image"].(map[string]any)
	if image["tag"] != "v2.14.0" || values["hostname"] != "rancher.example" || values["extraEnv"] == nil || values["replicas"] != float64(-2) {
		t.Errorf("values %v: want the new tag, the hostname and extraEnv kept, two replicas fewer than nodes", values)
	}
}

func TestRancherValues(t *testing.T) {
	for _, tc := range []struct {
		name, current, target string
		replicas              *int
		want                  map[string]any
		err                   string
	}{
		{name: "the legacy layout moves to image", current: "rancherImage: registry.example/rancher/rancher\nrancherImagePullPolicy: Always\nrancherImageTag: v2.12.3\nhostname: h\n",
			target: "v1.8.0", want: map[string]any{"hostname": "h", "image": map[string]any{"repository": "registry.example/rancher/rancher", "pullPolicy": "IfNotPresent", "tag": "v2.14.0"},
				"features": "multi-cluster-management=false,multi-cluster-management-agent=false,managed-system-upgrade-controller=false"}},
		{name: "the new layout keeps its image", current: "image:\n  repository: rancher/rancher\n  pullPolicy: Always\n  tag: v2.13.1\nextraEnv:\n- name: HTTP_PROXY\n  value: http://proxy:3128\n",
			target: "v1.9.0", replicas: ptr.To(-2),
			want: map[string]any{"image": map[string]any{"repository": "rancher/rancher", "pullPolicy": "Always", "tag": "v2.14.0"}, "replicas": float64(-2),
				"extraEnv": []any{map[string]any{"name": "HTTP_PROXY", "value": "http://proxy:3128"}},
				"features": "multi-cluster-management=false,multi-cluster-management-agent=false,managed-system-upgrade-controller=false,crt-token-ttl-rotation=false"}},
		{name: "not Harvester's Rancher", current: "hostname: x\n", target: "v1.8.0", err: "neither rancherImageTag nor image.tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := clusterupgrade.RancherValues([]byte(tc.current), "v2.14.0", tc.target, clusterupgrade.RancherOptions{Replicas: tc.replicas})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err = %v, want %q", err, tc.err)
				}
				return
			}
			var got map[string]any
			if err != nil || yaml.Unmarshal(out, &got) != nil {
				t.Fatalf("%v: %s", err, out)
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tc.want)
			if string(gb) != string(wb) {
				t.Errorf("values\n%s\nwant\n%s", gb, wb)
			}
		})
	}
}

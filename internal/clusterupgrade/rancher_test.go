package clusterupgrade_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
		return []byte("hostname: rancher.example\nrancherImageTag: v2.12.3\nextraEnv:\n- name: CATTLE_SHELL_IMAGE\n  value: rancher/shell:v0.1.26\n"), nil
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
	if err := h.Upgrade(t.Context(), &repo.Release); err != nil {
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
	if values["rancherImageTag"] != "v2.14.0" || values["hostname"] != "rancher.example" || values["extraEnv"] != nil {
		t.Errorf("values %v: want the new tag, the hostname kept and extraEnv dropped", values)
	}
}

func TestRancherValuesRefusesForeignReleases(t *testing.T) {
	if _, err := clusterupgrade.RancherValues([]byte("hostname: x\n"), "v2.14.0"); err == nil || !strings.Contains(err.Error(), "rancherImageTag") {
		t.Errorf("err = %v, want a refusal naming rancherImageTag", err)
	}
}

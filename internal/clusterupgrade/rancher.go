package clusterupgrade

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/host"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// +kubebuilder:rbac:groups=management.cattle.io,resources=settings,verbs=get

// rancherVersion is the version the running Rancher reports.
func (u *Upgrade) rancherVersion(ctx context.Context) (string, error) {
	s := &managementv3.Setting{}
	if err := u.Client.Get(ctx, client.ObjectKey{Name: cluster.RancherServerVersionSetting}, s); err != nil {
		return "", fmt.Errorf("reading Rancher's setting %s: %w", cluster.RancherServerVersionSetting, err)
	}
	return s.Value, nil
}

// upgradeRancher upgrades the embedded Rancher unless it runs the release's
// version, and waits until the new one runs.
func (u *Upgrade) upgradeRancher(ctx context.Context, r *run) error {
	want := r.rel.Rancher
	running, err := u.rancherVersion(ctx)
	if err != nil {
		return err
	}
	if running == want {
		log.FromContext(ctx).Info("Rancher runs the release's version already", "version", want)
	} else {
		if u.Rancher == nil {
			return fmt.Errorf("the embedded Rancher runs %s and must be upgraded to %s, but the job has no way to upgrade it", running, want)
		}
		if err := u.Rancher.Upgrade(ctx, r.rel); err != nil {
			return fmt.Errorf("upgrading Rancher from %s to %s: %w", running, want, err)
		}
	}
	w := u.wait("Rancher to report version "+want, u.Timeouts.Rancher,
		fmt.Sprintf("check Rancher's pods (kubectl -n %s get pods -l app=rancher) and the Helm release (helm -n %s history rancher)", cluster.CattleNamespace, cluster.CattleNamespace))
	if err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		v, err := u.rancherVersion(ctx)
		return v == want, "Rancher reports " + v, err
	}); err != nil {
		return err
	}
	return u.waitDeployment(ctx, client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.RancherDeployment}, u.Timeouts.Rancher)
}

// HelmRancher upgrades Rancher as Harvester's upgrade does: the Rancher
// chart and a helm binary come from the rancher/system-agent-installer-rancher
// image of the release's agent image archives, which wharfie extracts
// without a container runtime; the release keeps Rancher's values, with the
// new image tag, and without extraEnv (which would override settings such
// as the shell image). Helm acts with the job's service account, which
// must be allowed to install Rancher's chart (in practice cluster-admin,
// which Harvester's "harvester" service account is).
type HelmRancher struct {
	// Repo is the upgrade repo.
	Repo *release.Client
	// Run runs wharfie and helm in the job's container.
	Run host.Runner
	// WorkDir is a scratch directory.
	WorkDir string
}

// InstallerImage is the image that carries the Rancher chart of a version.
func InstallerImage(version string) string {
	return "rancher/system-agent-installer-rancher:" + version
}

// rancherRelease is Rancher's Helm release.
const rancherRelease = "rancher"

// Upgrade implements RancherUpgrader.
func (h *HelmRancher) Upgrade(ctx context.Context, rel *release.Release) error {
	images := filepath.Join(h.WorkDir, "images")
	chartDir := filepath.Join(h.WorkDir, "rancher")
	if err := os.MkdirAll(images, 0o755); err != nil {
		return err
	}
	bundle, err := h.Repo.BundleMetadata(ctx)
	if err != nil {
		return err
	}
	for _, a := range bundle.Images.Agent {
		for _, p := range []string{a.ListPath(), a.ArchivePath()} {
			if err := h.download(ctx, p, filepath.Join(images, path.Base(p))); err != nil {
				return err
			}
		}
	}
	if err := os.RemoveAll(chartDir); err != nil {
		return err
	}
	if _, err := h.Run.Run(ctx, host.Command{Name: "wharfie", Args: []string{"--images-dir", images, InstallerImage(rel.Rancher), chartDir}}); err != nil {
		return fmt.Errorf("extracting the Rancher chart from %s: %w", InstallerImage(rel.Rancher), err)
	}
	helm := filepath.Join(chartDir, "helm")
	out, err := h.Run.Run(ctx, host.Command{Name: helm, Args: []string{"get", "values", rancherRelease, "--namespace", cluster.CattleNamespace, "--output", "yaml"}})
	if err != nil {
		return fmt.Errorf("reading the values of the Rancher release: %w", err)
	}
	values, err := RancherValues(out, rel.Rancher)
	if err != nil {
		return err
	}
	valuesFile := filepath.Join(h.WorkDir, "values.yaml")
	if err := os.WriteFile(valuesFile, values, 0o600); err != nil {
		return err
	}
	charts, err := filepath.Glob(filepath.Join(chartDir, "*.tgz"))
	if err != nil || len(charts) != 1 {
		return fmt.Errorf("expected one Rancher chart (*.tgz) in %s, found %v", InstallerImage(rel.Rancher), charts)
	}
	_, err = h.Run.Run(ctx, host.Command{Name: helm, Args: []string{
		"upgrade", rancherRelease, charts[0], "--namespace", cluster.CattleNamespace,
		"--values", valuesFile, "--wait", "--timeout", "15m",
	}})
	return err
}

// RancherValues turns the running release's values (helm get values) into
// the new release's: the same, with rancherImageTag set to version and
// without extraEnv.
func RancherValues(current []byte, version string) ([]byte, error) {
	values := map[string]any{}
	if err := yaml.Unmarshal(current, &values); err != nil {
		return nil, fmt.Errorf("reading the Rancher release's values: %w", err)
	}
	if values == nil {
		values = map[string]any{}
	}
	if values["rancherImageTag"] == nil {
		return nil, fmt.Errorf("the Rancher release's values have no rancherImageTag: this is not Harvester's embedded Rancher")
	}
	delete(values, "extraEnv")
	values["rancherImageTag"] = version
	return yaml.Marshal(values)
}

// download copies a repo file to the work directory unless it is there.
func (h *HelmRancher) download(ctx context.Context, repoPath, file string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	body, err := h.Repo.Open(ctx, repoPath)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	tmp := file + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(body); err != nil {
		_ = f.Close()
		return fmt.Errorf("downloading %s: %w", repoPath, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

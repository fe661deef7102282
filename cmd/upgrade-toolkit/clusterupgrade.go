package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/host"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

func init() { subcommands = append(subcommands, newClusterUpgradeCommand) }

func newClusterUpgradeCommand() *cobra.Command {
	var repoURL, addonsDir, crdsDir, manifestsDir, workDir string
	cmd := &cobra.Command{
		Use:   jobspec.CommandClusterUpgrade,
		Short: "Upgrade the cluster's components (the cluster-upgrade Job)",
		Long: `cluster-upgrade upgrades the cluster's components to the release the upgrade
repo serves, in the steps of Harvester's upgrade_manifests.sh that apply to
an upgrade from a release this toolkit supports (docs/cluster-upgrade.md):

  rke2-multus-failure-policy        RKE2 aborts, not reinstalls, a failed multus upgrade
  preserve-overcommit-config        (from v1.7) pin the overcommit the cluster runs with
  pause-charts                      pause the ManagedCharts that are not paused
  disable-cluster-version-management  turn Rancher's version management of local off
  tls-internal-cn-allowed-services  (from v1.8) Rancher's internal certificate services
  provisioning-administrated        (from v1.8) mark the local cluster administrated
  upgrade-rancher                   upgrade the embedded Rancher with Helm (chart and helm
                                    from the release's agent images, extracted with wharfie)
                                    and wait until it reports the release's version
  wait-rancher-dependencies         Fleet's and the webhook's Helm releases and rollouts
  redeploy-fleet-agent              have Fleet redeploy its agent, wait for it
  wait-fleet                        the new Fleet, its restored settings, the import
  patch-local-cluster               the provisioning Cluster's management name, workspace
  check-local-rke-state             refuse an RKE state Secret older than Rancher v2.7
  upgrade-harvester-cluster-repo    run the release's harvester-cluster-repo image and make
                                    Rancher re-read the harvester-charts index
  ingress-class-name                give rancher-expose an ingress class
  apply-crds                        apply the CRDs of --crds-dir (CDI's)
  upgrade-harvester-crd-chart       the release's harvester-crd chart, deployed by Fleet
  upgrade-harvester-chart           the release's harvester chart, deployed by Fleet
  wait-kubevirt                     KubeVirt runs the release's version
  sync-containerd-registry          have Harvester sync its registries to Rancher
  wait-longhorn                     Longhorn's manager and instance managers run the release
  upgrade-monitoring-logging-crds   the monitoring and logging CRD charts
  apply-versioned-manifests         the manifests of --manifests-dir/<previous version>
  upgrade-addons                    the release's add-ons
  resume-charts                     unpause the charts the upgrade paused
  wait-fleet-bundles                Fleet's bundles ready (reported, not blocking)
  rke2-traefik-config               (from v1.8) Harvester's values for RKE2's Traefik

Finished steps are recorded in the ConfigMap <plan>-cluster-upgrade in
harvester-system; a restarted job resumes after them. Every wait has a
deadline and says what it waits for.

Environment:
  ` + jobspec.EnvPlan + `   the UpgradePlan (required)
` + exitCodeHelp(waitfor.ErrTimeout),
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&repoURL, "repo-url", "", "the upgrade repo's base URL (default: http://<plan>-repo.harvester-system.svc/harvester-iso/)")
	f.StringVar(&addonsDir, "addons-dir", "/usr/local/share/addons", "directory of the release's add-on manifests (Addon objects, *.yaml); skipped when missing")
	f.StringVar(&crdsDir, "crds-dir", "/usr/local/share/extra_manifests/cdi", "directory of CRDs the release's charts need but Helm does not upgrade (*.yaml); skipped when missing")
	f.StringVar(&manifestsDir, "manifests-dir", "/usr/local/share/extra_manifests", "directory with, per release upgraded from, a directory of manifests to apply (<version>/*.yaml); skipped when missing")
	f.StringVar(&workDir, "work-dir", filepath.Join(os.TempDir(), "upgrade"), "scratch directory for the Rancher chart")
	return jobCommand(cmd, func(ctx context.Context, kube *clusterFlags, _ []string) error {
		plan, err := requireEnv(jobspec.EnvPlan, "the UpgradePlan")
		if err != nil {
			return err
		}
		c, err := kube.client()
		if err != nil {
			return err
		}
		if repoURL == "" {
			repoURL = release.BaseURL(cluster.HarvesterNamespace, names.Repo(plan))
		}
		repo, err := release.NewClient(repoURL)
		if err != nil {
			return usageError("%v", err)
		}
		u := &clusterupgrade.Upgrade{
			Client: c, Plan: plan, RepoURL: repoURL,
			Rancher: &clusterupgrade.HelmRancher{Repo: repo, Run: host.Exec{}, WorkDir: filepath.Join(workDir, "rancher")},
		}
		u.Addons, u.CRDs, u.Manifests = dirFS(addonsDir), dirFS(crdsDir), dirFS(manifestsDir)
		return u.Run(ctx)
	})
}

// dirFS is the directory as a file system, nil when there is none.
func dirFS(dir string) fs.FS {
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return os.DirFS(dir)
	}
	return nil
}

package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/host"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodejob"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

func init() { subcommands = append(subcommands, newClusterUpgradeCommand) }

func newClusterUpgradeCommand() *cobra.Command {
	var repoURL, addonsDir, workDir string
	cmd := &cobra.Command{
		Use:   "cluster-upgrade",
		Short: "Upgrade the cluster's components (the cluster-upgrade Job)",
		Long: `cluster-upgrade upgrades the cluster's components to the release the upgrade
repo serves, in these steps:

  pause-charts                      pause the ManagedCharts (harvester, harvester-crd, the
                                    monitoring and logging CRD charts) that are not paused
  upgrade-rancher                   upgrade the embedded Rancher with Helm (chart and helm from
                                    the release's rancher/system-agent-installer-rancher image,
                                    extracted with wharfie) and wait until it runs
  upgrade-harvester-cluster-repo    run the release's harvester-cluster-repo image and make
                                    Rancher re-read the harvester-charts index
  upgrade-harvester-charts          set the release's chart version on harvester-crd and
                                    harvester (with Harvester's Longhorn defaults) and wait
                                    until Fleet deployed them
  wait-kubevirt, wait-longhorn      wait until KubeVirt and Longhorn's manager run the release
  upgrade-monitoring-logging-crds   move the monitoring and logging CRD charts to the release
  upgrade-addons                    move the monitoring and logging Addons to the release's
                                    versions and apply the add-on manifests of --addons-dir
  resume-charts                     unpause the charts the upgrade paused

Finished steps are recorded in the ConfigMap <plan>-cluster-upgrade in
harvester-system; a restarted job resumes after them. Every wait has a
deadline and says what it waits for.

Environment:
  ` + nodejob.EnvPlan + `   the UpgradePlan (required)
` + exitCodeHelp(waitfor.ErrTimeout),
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&repoURL, "repo-url", "", "the upgrade repo's base URL (default: http://<plan>-repo.harvester-system.svc/harvester-iso/)")
	f.StringVar(&addonsDir, "addons-dir", "/usr/local/share/addons", "directory of the release's add-on manifests (Addon objects, *.yaml); skipped when missing")
	f.StringVar(&workDir, "work-dir", filepath.Join(os.TempDir(), "upgrade"), "scratch directory for the Rancher chart")
	return jobCommand(cmd, func(ctx context.Context, _ []string) error {
		plan, err := requireEnv(nodejob.EnvPlan, "the UpgradePlan")
		if err != nil {
			return err
		}
		c, err := newClient()
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
		if st, err := os.Stat(addonsDir); err == nil && st.IsDir() {
			u.Addons = os.DirFS(addonsDir)
		}
		return u.Run(ctx)
	})
}

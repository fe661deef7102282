package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/host"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/nodejob"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

func init() { subcommands = append(subcommands, newNodeCommand) }

const nodeEnvHelp = `
Environment:
  ` + jobspec.EnvPlan + `   the UpgradePlan (required)
  ` + jobspec.EnvNode + `  the node (else ` + jobspec.EnvSUCNode + `, which system-upgrade-controller sets)
  ` + jobspec.EnvPod + `   the job's pod, whose container "apply" must exit before the node reboots
                               (else ` + jobspec.EnvSUCPod + `)
`

func newNodeCommand() *cobra.Command {
	var hostRoot, repoURL string
	cmd := &cobra.Command{
		Use:   jobspec.CommandNode + " TYPE",
		Short: "The upgrade's work on one node, run by the node Jobs",
		Long: `node runs one node job of an UpgradePlan on the node it runs on. Jobs run in a
privileged pod with the host's root file system mounted at --host-root. Each
step can run again, so a job whose pod restarts resumes; every wait has a
deadline and says what it waits for.` + nodeEnvHelp,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&hostRoot, "host-root", "/host", "where the host's root file system is mounted")
	cmd.PersistentFlags().StringVar(&repoURL, "repo-url", "", "the upgrade repo's base URL (default: http://<plan>-repo.harvester-system.svc/harvester-iso/)")
	for _, t := range []struct {
		name, short, long string
		errs              []error
	}{
		{jobspec.Prepare, "Preload the release's images on the node (image-preload Plan)",
			`prepare checks the upgrade eligibility (as version-guard does, unless the plan
says spec.force: true), waits for the upgrade repo, imports the release's
common and RKE2 image archives into containerd (skipping archives whose images
are all there), stages the RKE2 and agent archives under
/var/lib/rancher/rke2/agent/images and /var/lib/rancher/agent/images, and keeps
rancher-system-agent from restarting RKE2 while Rancher is upgraded.`,
			append([]error{waitfor.ErrTimeout}, eligibilityErrors...)},
		{jobspec.PreDrain, "Prepare the node for Rancher's drain (pre-drain Job)",
			`pre-drain lets rancher-system-agent restart RKE2 again, waits until every
running Longhorn volume can lose this node's replica, records and stops the VMs
that cannot live-migrate (see vm-live-migrate-detector; a paused one, which
it cannot stop, fails the job at once), taints the node
kubevirt.io/drain=draining:NoSchedule so that KubeVirt live-migrates the
others, waits until no VM is left (stopping, and recording for restore, a VM
whose migration failed), waits for KubeVirt's evacuation
PodDisruptionBudgets to go, and updates RKE2's configuration.`,
			[]error{waitfor.ErrTimeout, helper.ErrVMShutdown, helper.ErrVMCannotLeave}},
		{jobspec.PostDrain, "Upgrade the node's OS after Rancher upgraded RKE2 (post-drain Job)",
			`post-drain writes the kubelet configuration of the release, waits until the
node runs the release's RKE2, removes the staged RKE2 archives and the
evacuation taint, and, unless the node runs the release's OS already,
installs the new OS image (elemental upgrade) and reboots the node once this
job has completed.`,
			[]error{waitfor.ErrTimeout}},
		{jobspec.SingleNodeUpgrade, "Upgrade the only node of a single-node cluster",
			`single-node-upgrade does the work of pre-drain and post-drain on a cluster
with one node: it downloads the new OS image first (the repo runs on this
node), records and stops every VM, sets the release's kubernetesVersion on the
provisioning Cluster fleet-local/local, waits for the new RKE2, then installs
the new OS and reboots the node once this job has completed.`,
			[]error{waitfor.ErrTimeout, helper.ErrVMShutdown}},
		{jobspec.ImageCleanup, "Remove the previous release's images from the node (image-cleanup Plan)",
			`image-cleanup removes from containerd the previous release's images that the
new release no longer uses (the repo's image lists of both releases, as the
manager compares them), keeping the upgrade, Longhorn engine and logging
images. An image still in use is kept and logged.`,
			[]error{waitfor.ErrTimeout}},
	} {
		jobType := t.name
		sub := &cobra.Command{
			Use:   jobType,
			Short: t.short,
			Long:  t.long + "\n" + nodeEnvHelp + exitCodeHelp(t.errs...),
			Args:  cobra.NoArgs,
		}
		cmd.AddCommand(jobCommand(sub, func(ctx context.Context, kube *clusterFlags, _ []string) error {
			j := &nodejob.Job{Host: host.NewChroot(hostRoot), RepoURL: repoURL}
			if err := j.FromEnv(os.Getenv); err != nil {
				return usageError("%v", err)
			}
			c, err := kube.client()
			if err != nil {
				return err
			}
			j.Client = c
			return j.Run(ctx, jobType)
		}))
	}
	return cmd
}

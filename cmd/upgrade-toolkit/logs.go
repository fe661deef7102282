package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/upgradelog"
	"github.com/harvester/upgrade-toolkit/internal/version"
)

func init() { subcommands = append(subcommands, newLogsCommand) }

func newLogsCommand() *cobra.Command {
	var job, node, archive string
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs PLAN",
		Short: "Print the logs an upgrade's pods wrote, or write them all into a support bundle",
		Long: `logs reads the logs the manager kept of the pods an UpgradePlan ran (its own
Jobs and the system-upgrade-controller Jobs of its Plans), from the plan's
UpgradeLog: they outlive the pods, and stay until the plan is deleted.

Without a flag it lists the captured logs. --job prints one Job's log (its
name, or namespace/name; every pod of it in turn when it was retried),
--node every log of the pods that ran on a node, oldest first; --follow then
goes on printing what a pod still running writes, until it ends.

--archive FILE writes one .tar.gz support bundle: the plan, its events, every
captured log, the Jobs and system-upgrade-controller Plans, each node's
timeline, the Harvester Version, the release metadata, Rancher's
machine-plan Secrets with every value redacted, this toolkit's version, the
Nodes, VMs and their instances, Longhorn volumes, the provisioning Cluster,
CAPI Machines, and the last lines of the manager's log.

-o prints the plan's UpgradeLog (the list) as data, as kubectl does: json,
yaml, name, jsonpath=, go-template=, custom-columns=.` + exitCodesHelp(0, exitFailure, usageExitCode, exitUnreachable),
		Example: `  upgrade-toolkit logs hvst-upgrade-x7k2p
  upgrade-toolkit logs hvst-upgrade-x7k2p --node node-2
  upgrade-toolkit logs hvst-upgrade-x7k2p --job hvst-upgrade-x7k2p-cluster-upgrade --follow
  upgrade-toolkit logs hvst-upgrade-x7k2p --archive upgrade.tar.gz
  upgrade-toolkit logs hvst-upgrade-x7k2p -o custom-columns=PLAN:.metadata.name,LOGS:.status.logs[*].pod`,
		Args: usageArgs(cobra.ExactArgs(1)),
	}
	kube := addClusterFlags(cmd, true)
	output := addOutputFlags(cmd, "", true)
	cmd.SetFlagErrorFunc(flagUsageError)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		plan := args[0]
		if archive != "" && (job != "" || node != "" || follow) {
			return usageError("--archive writes every log; leave out --job, --node and --follow")
		}
		if follow && job == "" && node == "" {
			return usageError("--follow needs --job or --node: which log to follow")
		}
		p, err := output.printer()
		if err != nil {
			return err
		}
		if p != nil && (archive != "" || job != "" || node != "") {
			return usageError("-o prints the list of logs; leave out --archive, --job and --node, or -o for the logs themselves")
		}
		if err := kube.check(cmd); err != nil {
			return err
		}
		cfg, err := kube.config()
		if err != nil {
			return err
		}
		c, err := client.New(cfg, client.Options{Scheme: cluster.Scheme()})
		if err != nil {
			return err
		}
		ctx, out := cmd.Context(), cmd.OutOrStdout()
		if archive != "" {
			f, err := os.Create(archive) //nolint:gosec // the user names the file
			if err != nil {
				return err
			}
			kubeClient, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				_ = f.Close()
				return err
			}
			managerLog := upgradelog.ManagerLogOf(kubeClient, cluster.HarvesterNamespace)
			if err := upgradelog.Archive(ctx, c, managerLog, plan, version.String(), time.Now(), f); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(out, "wrote %s\n", archive)
			return err
		}
		ul, err := upgradelog.Get(ctx, c, plan)
		if err != nil {
			return err
		}
		switch {
		case p != nil:
			ul.SetGroupVersionKind(v1beta1.GroupVersion.WithKind("UpgradeLog"))
			ul.ManagedFields = nil // as kubectl shows objects
			return printData(out, p, ul, ul)
		case job == "" && node == "":
			return upgradelog.List(out, ul)
		}
		logs := upgradelog.Select(ul.Status.Logs, job, node)
		if len(logs) == 0 {
			return fmt.Errorf("plan %s kept no log of job %q node %q; `upgrade-toolkit logs %s` lists them", plan, job, node, plan)
		}
		at, err := upgradelog.Print(ctx, c, out, logs)
		if err != nil {
			return err
		}
		if !follow {
			return nil
		}
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		for i, l := range logs {
			if !at[i].Complete {
				if err := upgradelog.Follow(ctx, c, kube, l, at[i], out); err != nil {
					return err
				}
			}
		}
		return nil
	}
	f := cmd.Flags()
	f.StringVar(&job, "job", "", "print this Job's log (name or namespace/name)")
	f.StringVar(&node, "node", "", "print the logs of the pods that ran on this node")
	f.BoolVarP(&follow, "follow", "f", false, "with --job or --node: go on printing what a running pod writes until it ends")
	f.StringVar(&archive, "archive", "", "write a .tar.gz support bundle of the plan to this file")
	return cmd
}

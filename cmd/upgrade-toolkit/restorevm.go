package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

func init() { subcommands = append(subcommands, newRestoreVMCommand) }

func newRestoreVMCommand() *cobra.Command {
	var node, planName string
	var kubevirtTimeout time.Duration
	cmd := &cobra.Command{
		Use:   jobspec.CommandRestoreVM + " --" + jobspec.FlagNode + " NODE --" + jobspec.FlagUpgrade + " PLAN",
		Short: "Start the VMs that were shut down for a node's upgrade",
		Long: `restore-vm starts exactly the VMs that vm-live-migrate-detector recorded for
NODE in the ConfigMap <PLAN>-restore-vm in harvester-system, once KubeVirt is
healthy (the KubeVirt object harvester-system/kubevirt in phase Deployed and
not Available=False; it gives up after --kubevirt-timeout). Each VM gets back
the run strategy it had (Manual and Once VMs are started with Always); VMs
deleted since are reported. It records RestoreVMCompleted and, on failure,
RestoreVMFailed on the plan. The manager runs it after a node's upgrade when
the plan says spec.restoreVM: true.` + exitCodeHelp(waitfor.ErrTimeout, helper.ErrVMRestore),
		Example: "  upgrade-toolkit restore-vm --node node-2 --upgrade hvst-upgrade-abcde",
		Args:    cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&node, jobspec.FlagNode, "", "the node whose VMs to start")
	f.StringVar(&planName, jobspec.FlagUpgrade, "", "the UpgradePlan that shut them down")
	f.DurationVar(&kubevirtTimeout, "kubevirt-timeout", helper.DefaultKubeVirtTimeout, "how long to wait for KubeVirt to be healthy")
	return jobCommand(cmd, func(ctx context.Context, kube *clusterFlags, _ []string) error {
		if node == "" || planName == "" {
			return usageError("--%s and --%s are required", jobspec.FlagNode, jobspec.FlagUpgrade)
		}
		c, err := kube.client()
		if err != nil {
			return err
		}
		r := &helper.Restorer{Client: c, Power: helper.RunStrategyPower{Client: c}, KubeVirtTimeout: kubevirtTimeout,
			Events: &helper.Recorder{Client: c, Component: helper.ComponentRestoreVM, Host: node}}
		res, err := r.Restore(ctx, planName, node)
		var out strings.Builder
		fmt.Fprintf(&out, "recorded for node %s: %d VM(s)\n", node, len(res.Recorded))
		for _, l := range []struct {
			what string
			vms  []string
		}{{"started", res.Started}, {"failed", res.Failed}, {"deleted since", res.Gone}} {
			if len(l.vms) > 0 {
				fmt.Fprintf(&out, "%s: %s\n", l.what, strings.Join(l.vms, ", "))
			}
		}
		if _, werr := fmt.Fprint(cmd.OutOrStdout(), out.String()); werr != nil && err == nil {
			err = werr
		}
		return err
	})
}

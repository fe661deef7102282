package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/harvester/upgrade-toolkit/internal/helper"
)

func init() { subcommands = append(subcommands, newDetectorCommand) }

func newDetectorCommand() *cobra.Command {
	var shutdown bool
	var planName string
	cmd := &cobra.Command{
		Use:   "vm-live-migrate-detector NODE [--upgrade PLAN [--shutdown]]",
		Short: "List, record and stop the VMs on a node that cannot be live-migrated",
		Long: `vm-live-migrate-detector lists the VMs running on NODE that cannot be
live-migrated to another node: those pinned by a nodeSelector, passing host
devices or GPUs through, or whose required node affinity matches no other
Ready, schedulable, non-witness node (with no such node at all, none can
move). It uses the rule the admission webhook uses. Paused VMs and VMs of an
old upgrade repo are left alone.

With --upgrade PLAN it records them in the ConfigMap <PLAN>-restore-vm in
harvester-system (data[NODE] = "namespace/name,..."; VMs recorded earlier
stay recorded), which restore-vm reads after the node's upgrade.

With --shutdown, once they are recorded, it stops them: it sets their
spec.runStrategy to Halted and remembers the strategy they had in the
annotation management.harvesterhci.io/restore-run-strategy. --shutdown
needs --upgrade, so that no VM is stopped without a record. It records the
events RestoreVMConfigMapCreated, VMShutdownCompleted and, on failure,
RestoreVMConfigMapFailed or VMShutdownFailed on the plan.` + exitCodeHelp(helper.ErrVMShutdown),
		Example: "  upgrade-toolkit vm-live-migrate-detector node-2 --upgrade hvst-upgrade-abcde --shutdown",
		Args:    cobra.ExactArgs(1),
	}
	cmd.Flags().BoolVar(&shutdown, "shutdown", false, "stop the VMs (requires --upgrade)")
	cmd.Flags().StringVar(&planName, "upgrade", "", "the UpgradePlan whose restore list records the VMs")
	return jobCommand(cmd, func(ctx context.Context, kube *clusterFlags, args []string) error {
		node := args[0]
		if shutdown && planName == "" {
			return usageError("--shutdown needs --upgrade PLAN: the VMs must be recorded for restore before they are stopped")
		}
		c, err := kube.client()
		if err != nil {
			return err
		}
		d := &helper.Detector{Client: c, Power: helper.RunStrategyPower{Client: c},
			Events: &helper.Recorder{Client: c, Component: helper.ComponentDetector, Host: node}}
		var out strings.Builder
		switch {
		case shutdown:
			var res helper.ShutdownResult
			res, err = d.Shutdown(ctx, planName, node)
			printFound(&out, node, res.Found)
			if len(res.Stopped) > 0 {
				fmt.Fprintf(&out, "stopped: %s\n", strings.Join(res.Stopped, ", "))
			}
		case planName != "":
			var found helper.NodeVMs
			found, err = recordOnly(ctx, d, planName, node)
			printFound(&out, node, found)
		default:
			var found helper.NodeVMs
			found, err = d.Detect(ctx, node)
			printFound(&out, node, found)
		}
		if _, werr := fmt.Fprint(cmd.OutOrStdout(), out.String()); werr != nil && err == nil {
			err = werr
		}
		return err
	})
}

func recordOnly(ctx context.Context, d *helper.Detector, planName, node string) (helper.NodeVMs, error) {
	plan, err := helper.Plan(ctx, d.Client, planName)
	if err != nil {
		return helper.NodeVMs{}, err
	}
	found, err := d.Record(ctx, plan, node)
	return found, err
}

func printFound(out *strings.Builder, node string, found helper.NodeVMs) {
	fmt.Fprintf(out, "%d VM(s) on node %s cannot be live-migrated\n", len(found.NonMigratable), node)
	for _, v := range found.NonMigratable {
		fmt.Fprintf(out, "  %s\n", v)
	}
	for _, s := range found.Skipped {
		fmt.Fprintf(out, "  left alone: %s\n", s)
	}
}

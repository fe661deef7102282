package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/harvester/upgrade-toolkit/internal/helper"
)

func init() { subcommands = append(subcommands, newVersionGuardCommand) }

func newVersionGuardCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version-guard PLAN",
		Short: "Check that an UpgradePlan may upgrade the cluster from its version to the release's",
		Long: `version-guard checks the upgrade eligibility of the UpgradePlan PLAN, with the
same rules the manager applies before it preloads images: from the plan's
status.previousVersion to status.releaseMetadata.harvester, given the
release's minUpgradableVersion.

  - upgrading to a development build is allowed;
  - upgrading from a development build to anything else is refused;
  - re-running an upgrade to the same version is allowed;
  - a downgrade is refused;
  - a running version older than minUpgradableVersion is refused;
  - a prerelease may only move to a later build of the same version.

A plan with spec.force: true skips the check. The node prepare job runs the
same check.` + exitCodeHelp(eligibilityErrors...),
		Example: "  upgrade-toolkit version-guard hvst-upgrade-abcde",
		Args:    cobra.ExactArgs(1),
	}
	return jobCommand(cmd, func(ctx context.Context, kube *clusterFlags, args []string) error {
		c, err := kube.client()
		if err != nil {
			return err
		}
		plan, err := helper.Plan(ctx, c, args[0])
		if err != nil {
			return err
		}
		if err := helper.PlanEligibility(plan); err != nil {
			return err
		}
		if plan.Forced() {
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "UpgradePlan %s: spec.force is set, the upgrade eligibility is not checked\n", plan.Name)
			return err
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "UpgradePlan %s may upgrade the cluster from %s to %s\n",
			plan.Name, *plan.Status.PreviousVersion, plan.Status.ReleaseMetadata.Harvester)
		return err
	})
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/preview"
)

func init() { subcommands = append(subcommands, newPreflightCommand) }

// preflightFailedExitCode: the cluster was read, and a check failed.
const preflightFailedExitCode = 7

// errPreflightFailed is returned when a check failed.
var errPreflightFailed = errors.New("a pre-flight check failed: a plan with this spec would not start (see the checks above)")

func newPreflightCommand() *cobra.Command {
	var version, image, output string
	var restoreVM bool
	var pauseNodes []string
	cmd := &cobra.Command{
		Use:   "preflight (--version VERSION | --image IMAGE) [--restore-vm] [--pause-nodes N1,N2] [-o text|json]",
		Short: "Preview an upgrade: run its checks and show what it would do, changing nothing",
		Long: `preflight previews the upgrade an UpgradePlan with these settings would run.
It reads the cluster (get and list requests only; it writes nothing) and:

  - runs the checks the admission webhook runs when a plan is created (nodes,
    Rancher, Longhorn, backups, VMs, charts, addons);
  - checks the version rules: the running version (setting server-version)
    against the Version's name and spec.minUpgradableVersion;
  - lists the managed nodes in the order Rancher upgrades them (etcd and
    control-plane machines first, then workers, each by machine name), with
    their role and whether they are paused;
  - per node: the VMs live-migrated away and the nodes they can go to, the
    VMs shut down (and whether restoreVM restarts them), the at-risk
    volumes attached there;
  - the Longhorn volumes at risk: degraded, faulted, single-replica;
  - a rough estimate of the duration, with the figures it is made of.

What needs the ISO or the nodes' kubelets (the release metadata, disk
space, certificates) is listed as not checked: the upgrade checks it.

Exit codes:
  0   every check passed or warned: a plan with this spec would start
  1   the cluster could not be read; the message says why
  2   invalid command line
  7   a check failed: a plan with this spec would not start`,
		Example: `  upgrade-toolkit preflight --version v1.8.0 --restore-vm
  upgrade-toolkit preflight --version v1.8.0 --pause-nodes node-2 -o json | jq .nodes`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&version, "version", "", "the Version (harvester-system) to upgrade to, as spec.version")
	f.StringVar(&image, "image", "", "the VirtualMachineImage (harvester-system) of the release ISO, as spec.image")
	f.BoolVar(&restoreVM, "restore-vm", false, "as spec.restoreVM: shut down the VMs that cannot move and restart them afterwards")
	f.StringSliceVar(&pauseNodes, "pause-nodes", nil, "as spec.nodeUpgradeOption.pauseNodes: nodes the upgrade waits at")
	f.StringVarP(&output, "output", "o", "text", "text or json")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: usageExitCode, err: err} })
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if (version == "") == (image == "") {
			return usageError("give exactly one of --version and --image")
		}
		if output != "text" && output != "json" {
			return usageError("-o %q: use text or json", output)
		}
		plan := &v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{RestoreVM: &restoreVM}}
		if version != "" {
			plan.Spec.Version = &version
		} else {
			plan.Spec.Image = &image
		}
		if len(pauseNodes) > 0 {
			plan.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: pauseNodes}
		}
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return fmt.Errorf("reaching the Kubernetes API: %w", err)
		}
		return runPreflight(c.Context(), cfg, plan, output, c.OutOrStdout())
	}
	return cmd
}

// runPreflight previews plan on the cluster cfg reaches and prints the
// report; errPreflightFailed (exit code 7) when a check failed.
func runPreflight(ctx context.Context, cfg *rest.Config, plan *v1beta1.UpgradePlan, output string, w io.Writer) error {
	c, err := client.New(cfg, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return fmt.Errorf("reaching the Kubernetes API: %w", err)
	}
	facts, err := preview.Gather(ctx, c, plan)
	if err != nil {
		return err
	}
	rep := preview.Build(plan, facts)
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = preview.WriteText(w, rep)
	}
	if err != nil {
		return err
	}
	if !rep.WouldRun {
		return &exitError{code: preflightFailedExitCode, err: errPreflightFailed}
	}
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/preview"
)

func init() { subcommands = append(subcommands, newPreflightCommand) }

// errPreflightFailed is returned when a check failed.
var errPreflightFailed = errors.New("a pre-flight check failed: a plan with this spec would not start (see the checks above)")

func newPreflightCommand() *cobra.Command {
	var version, image, alertmanagerURL string
	var restoreVM bool
	var pauseNodes, acceptRisks []string
	cmd := &cobra.Command{
		Use:   "preflight (--version VERSION | --image IMAGE) [--restore-vm] [--pause-nodes N1,N2] [-o text|json|yaml|...]",
		Short: "Preview an upgrade: run its checks and show what it would do, changing nothing",
		Long: `preflight previews the upgrade an UpgradePlan with these settings would run.
It reads the cluster (get and list requests only; it writes nothing) and:

  - runs the checks the admission webhook runs when a plan is created, and
    lists the risks of the catalogue (docs/risks.md) it finds, each by its
    name, level (Error or Warning), the objects involved and what to do: a
    plan does not start with an Error-level risk it does not accept by name
    (spec.acceptRisks, here --accept-risks);
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

-o prints the report as data, as kubectl does: json, yaml, jsonpath=,
go-template=, custom-columns=.` + exitCodesHelp(0, exitFailure, usageExitCode, exitCheckFailed, exitUnreachable),
		Example: `  upgrade-toolkit preflight --version v1.8.0 --restore-vm
  upgrade-toolkit preflight --version v1.8.0 --pause-nodes node-2 -o json | jq .nodes
  upgrade-toolkit preflight --version v1.8.0 --context prod -o jsonpath='{.wouldRun}'`,
		Args: usageArgs(cobra.NoArgs),
	}
	kube := addClusterFlags(cmd, true)
	output := addOutputFlags(cmd, "text", false)
	f := cmd.Flags()
	f.StringVar(&version, "version", "", "the Version (harvester-system) to upgrade to, as spec.version")
	f.StringVar(&image, "image", "", "the VirtualMachineImage (harvester-system) of the release ISO, as spec.image")
	f.BoolVar(&restoreVM, "restore-vm", false, "as spec.restoreVM: shut down the VMs that cannot move and restart them afterwards")
	f.StringSliceVar(&pauseNodes, "pause-nodes", nil, "as spec.nodeUpgradeOption.pauseNodes: nodes the upgrade waits at")
	f.StringSliceVar(&acceptRisks, "accept-risks", nil, "as spec.acceptRisks: the risks, by name, the upgrade goes on with")
	f.StringVar(&alertmanagerURL, "alertmanager-url", "", "an Alertmanager's base address: a critical alert firing is then the risk CriticalAlertFiring")
	cmd.SetFlagErrorFunc(flagUsageError)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if (version == "") == (image == "") {
			return usageError("give exactly one of --version and --image")
		}
		p, err := output.printer()
		if err != nil {
			return err
		}
		if err := kube.check(c); err != nil {
			return err
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
		plan.Spec.AcceptRisks = acceptRisks
		var alerts preflight.AlertSource
		if alertmanagerURL != "" {
			alerts = preflight.Alertmanager{URL: alertmanagerURL}
		}
		cfg, err := kube.config()
		if err != nil {
			return err
		}
		return runPreflight(c.Context(), cfg, plan, alerts, p, c.OutOrStdout())
	}
	return cmd
}

// runPreflight previews plan on the cluster cfg reaches and prints the
// report, as data with p when it is not nil; errPreflightFailed (exit code
// 7) when a check failed.
func runPreflight(ctx context.Context, cfg *rest.Config, plan *v1beta1.UpgradePlan, alerts preflight.AlertSource, p printers.ResourcePrinter, w io.Writer) error {
	c, err := client.New(cfg, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return fmt.Errorf("reaching the Kubernetes API: %w", err)
	}
	facts, err := preview.Gather(ctx, c, plan, alerts)
	if err != nil {
		return err
	}
	rep := preview.Build(plan, facts)
	if p != nil {
		err = printData(w, p, rep, nil)
	} else {
		err = preview.WriteText(w, rep)
	}
	if err != nil {
		return err
	}
	if !rep.WouldRun {
		return &exitError{code: exitCheckFailed, err: errPreflightFailed}
	}
	return nil
}

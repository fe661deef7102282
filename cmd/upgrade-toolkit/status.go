package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/status"
)

func init() { subcommands = append(subcommands, newStatusCommand) }

// kubectlPlugin is the name under which the binary runs `status` as a
// kubectl plugin: kubectl upgrade-status.
const kubectlPlugin = "kubectl-upgrade_status"

func newStatusCommand() *cobra.Command {
	var output string
	var watch bool
	interval := time.Second
	cmd := &cobra.Command{
		Use:   "status [PLAN]",
		Short: "Show an upgrade's progress: phases, nodes, what it waits for, why it failed, the time left",
		Long: `status shows an UpgradePlan (the newest one when none is named) of the cluster
of --kubeconfig (the current context by default): the time spent in each phase,
every node's state and how long its upgrade took, what the plan waits for and
since when, the last warning events, for a failed plan the failed Job, its
node and the last lines of its log, and an estimate of the time left.

The estimate is the nodes still to upgrade times the mean time of the node
upgrades that finished, plus each phase still to run at the time it took in
the newest earlier plan that succeeded; phases measured nowhere are named, not
guessed, and no estimate is shown before anything was measured.

--watch redraws the view until the plan finishes (on a terminal; otherwise it
prints the lines that changed) and exits 1 if the plan failed.

Installed as kubectl-upgrade_status on the PATH, it is the kubectl plugin
kubectl upgrade-status.`,
		Example: `  upgrade-toolkit status
  upgrade-toolkit status hvst-upgrade-x7k2p --watch
  upgrade-toolkit status -o json --kubeconfig ~/.kube/harvester.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("--output %q: use json or yaml, or leave it out for text", output)
			}
			if output != "" && watch {
				return errors.New("--watch shows the text view; leave out --output, or leave out --watch for one snapshot as data")
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			c, logs, err := statusClients()
			if err != nil {
				return err
			}
			return showStatus(cmd.Context(), cmd, c, logs, name, output, watch, interval)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "", "print the status as json or yaml")
	f.BoolVarP(&watch, "watch", "w", false, "keep showing the status until the plan finishes")
	f.DurationVar(&interval, "interval", interval, "how often --watch reads the plan")
	return cmd
}

func statusClients() (client.Reader, status.LogReader, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("no cluster to ask: %w (pass --kubeconfig or set KUBECONFIG)", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	logs := func(ctx context.Context, namespace, job string) string {
		return phase.LastLogLines(ctx, kube, namespace, job)
	}
	return c, logs, nil
}

// showStatus prints the plan's status once, or with watch until it
// finishes.
func showStatus(ctx context.Context, cmd *cobra.Command, c client.Reader, logs status.LogReader, name, output string, watch bool, interval time.Duration) error {
	out := cmd.OutOrStdout()
	view := &status.View{Out: out, Terminal: watch && status.IsTerminal(out)}
	for {
		s, err := status.Compute(ctx, c, logs, name, time.Now())
		if err != nil {
			return err
		}
		name = s.Plan // a watch follows the plan it started with
		if output != "" {
			return status.Write(out, s, output)
		}
		if err := view.Show(s); err != nil {
			return err
		}
		if !watch {
			return nil
		}
		if v1beta1.UpgradePlanPhase(s.Phase).IsTerminal() {
			if s.Failure != nil {
				return &exitError{code: 1, err: errors.New("the upgrade failed")}
			}
			if s.Aborted != "" {
				return &exitError{code: 1, err: errors.New("the upgrade was aborted")}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

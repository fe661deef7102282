package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
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
	var watch bool
	interval := time.Second
	cmd := &cobra.Command{
		Use:   "status [PLAN]",
		Short: "Show an upgrade's progress: phases, nodes, what it waits for, why it failed, the time left",
		Long: `status shows an UpgradePlan (the newest one when none is named) of the cluster
of --kubeconfig and --context (kubectl's flags; the current context by
default): the time spent in each phase, every node's state and how long its
upgrade took, what the plan waits for and since when, the last warning
events, for a failed plan the failed Job, its node and the last lines of its
log, and an estimate of the time left.

The estimate is the nodes still to upgrade times the mean time of the node
upgrades that finished, plus each phase still to run at the time it took in
the newest earlier plan that succeeded; phases measured nowhere are named, not
guessed, and no estimate is shown before anything was measured.

--watch redraws the view until the plan finishes (on a terminal; otherwise it
prints the lines that changed) and exits 8 if the plan failed.

-o prints the same as data, as kubectl does: json, yaml, name (the plan),
jsonpath=, go-template=, custom-columns=.

Installed as kubectl-upgrade_status on the PATH, it is the kubectl plugin
kubectl upgrade-status.` + exitCodesHelp(0, exitFailure, usageExitCode, exitPlanFailed, exitUnreachable),
		Example: `  upgrade-toolkit status
  upgrade-toolkit status hvst-upgrade-x7k2p --watch
  upgrade-toolkit status -o json --kubeconfig ~/.kube/harvester.yaml --context prod
  upgrade-toolkit status -o jsonpath='{.phase}'
  upgrade-toolkit status -o custom-columns=PLAN:.plan,PHASE:.phase,LEFT:.estimate.left`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
	}
	kube := addClusterFlags(cmd, true)
	output := addOutputFlags(cmd, "", true)
	f := cmd.Flags()
	f.BoolVarP(&watch, "watch", "w", false, "keep showing the status until the plan finishes")
	f.DurationVar(&interval, "interval", interval, "how often --watch reads the plan")
	cmd.SetFlagErrorFunc(flagUsageError)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		p, err := output.printer()
		if err != nil {
			return err
		}
		if p != nil && watch {
			return usageError("--watch shows the text view; leave out --output, or leave out --watch for one snapshot as data")
		}
		if err := kube.check(cmd); err != nil {
			return err
		}
		name := ""
		if len(args) == 1 {
			name = args[0]
		}
		c, logs, err := statusClients(kube)
		if err != nil {
			return err
		}
		return showStatus(cmd.Context(), cmd, c, logs, name, p, watch, interval)
	}
	return cmd
}

func statusClients(kube *clusterFlags) (client.Reader, status.LogReader, error) {
	cfg, err := kube.config()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		return nil, nil, err
	}
	kubeClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	logs := func(ctx context.Context, namespace, job string) string {
		return phase.LastLogLines(ctx, kubeClient, namespace, job)
	}
	return c, logs, nil
}

// showStatus prints the plan's status once, as data with p, or with watch
// until it finishes.
func showStatus(ctx context.Context, cmd *cobra.Command, c client.Reader, logs status.LogReader, name string, p printers.ResourcePrinter, watch bool, interval time.Duration) error {
	out := cmd.OutOrStdout()
	view := &status.View{Out: out, Terminal: watch && status.IsTerminal(out)}
	for {
		s, err := status.Compute(ctx, c, logs, name, time.Now())
		if err != nil {
			return err
		}
		name = s.Plan // a watch follows the plan it started with
		if p != nil {
			return printData(out, p, s, planRef(s.Plan))
		}
		if err := view.Show(s); err != nil {
			return err
		}
		if !watch {
			return nil
		}
		if v1beta1.UpgradePlanPhase(s.Phase).IsTerminal() {
			if s.Failure != nil {
				return &exitError{code: exitPlanFailed, err: fmt.Errorf("the upgrade %s failed", s.Plan)}
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

// planRef is the plan as -o name names it.
func planRef(name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: "UpgradePlan"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
}

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
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
	var interval time.Duration
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

--watch redraws the view at each change of the plan, as a watch of the API
server reports it (it reads nothing in between), until the plan finishes
(on a terminal; otherwise it prints the lines that changed) and exits 8 if
the plan failed.

-o prints the same as data, as kubectl does: json, yaml, name (the plan),
jsonpath=, go-template=, custom-columns=.

Installed as kubectl-upgrade_status on the PATH, it is the kubectl plugin
kubectl upgrade-status.` + exitCodesHelp(0, exitFailure, usageExitCode, exitPlanFailed, exitUnreachable, exitPlanAborted),
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
	f.DurationVar(&interval, "interval", 0, "ignored")
	_ = f.MarkDeprecated("interval", "--watch follows the plan's changes as the API server reports them, and reads nothing in between")
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
		return showStatus(cmd.Context(), cmd, c, logs, name, p, watch)
	}
	return cmd
}

func statusClients(kube *clusterFlags) (client.WithWatch, status.LogReader, error) {
	cfg, err := kube.config()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: cluster.Scheme()})
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
func showStatus(ctx context.Context, cmd *cobra.Command, c client.WithWatch, logs status.LogReader, name string, p printers.ResourcePrinter, watch bool) error {
	out := cmd.OutOrStdout()
	s, err := status.Compute(ctx, c, logs, name, time.Now())
	switch {
	case err != nil:
		return err
	case p != nil:
		return printData(out, p, s, planRef(s.Plan))
	case !watch:
		return (&status.View{Out: out}).Show(s)
	}
	return followStatus(ctx, &status.View{Out: out, Terminal: status.IsTerminal(out)}, c, logs, s.Plan)
}

// followStatus shows the plan's status, then again at each change the API
// server reports on a watch of the plan, until the plan finishes: nil when
// it succeeded, exitPlanFailed when it failed, exitPlanAborted when it was
// aborted. It reads nothing between
// changes; a watch the server ends is opened again.
func followStatus(ctx context.Context, view *status.View, c client.WithWatch, logs status.LogReader, plan string) error {
	one := fields.OneTermEqualSelector("metadata.name", plan)
	for {
		// The version read before the status: a change while it is read
		// comes on the watch.
		var seen v1beta1.UpgradePlanList
		if err := c.List(ctx, &seen, client.MatchingFieldsSelector{Selector: one}); err != nil {
			return fmt.Errorf("reading UpgradePlan %s: %w", plan, err)
		}
		s, err := status.Compute(ctx, c, logs, plan, time.Now())
		if err != nil {
			return err
		}
		if err := view.Show(s); err != nil {
			return err
		}
		if v1beta1.UpgradePlanPhase(s.Phase).IsTerminal() {
			if s.Failure != nil {
				return &exitError{code: exitPlanFailed, err: fmt.Errorf("the upgrade %s failed", plan)}
			}
			if s.Aborted != "" {
				return &exitError{code: exitPlanAborted, err: fmt.Errorf("the upgrade %s was aborted", plan)}
			}
			return nil
		}
		w, err := c.Watch(ctx, &v1beta1.UpgradePlanList{},
			&client.ListOptions{FieldSelector: one, Raw: &metav1.ListOptions{ResourceVersion: seen.ResourceVersion}})
		if err != nil {
			return fmt.Errorf("watching UpgradePlan %s: %w", plan, err)
		}
		var ev watch.Event
		interrupted := false
		select {
		case <-ctx.Done():
			interrupted = true
		case ev = <-w.ResultChan():
		}
		w.Stop()
		switch {
		case interrupted:
			return nil // Ctrl-C ends the watch, not in error
		case ev.Type == watch.Deleted:
			return fmt.Errorf("UpgradePlan %s was deleted", plan)
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

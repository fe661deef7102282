package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/demo"
	"github.com/harvester/upgrade-toolkit/internal/status"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

func newDemoCommand() *cobra.Command {
	o := demo.Options{Nodes: 3, ResumeAfter: 5 * time.Second, Timeout: 10 * time.Minute}
	var output string
	var verbose bool
	var run func(*cobra.Command) (int, error)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Upgrade a simulated Harvester cluster end to end and show it live",
		Long: `demo starts an embedded control plane (etcd and kube-apiserver, see make envtest),
builds a simulated Harvester cluster on it (Rancher, system-upgrade-controller,
CDI, KubeVirt, Longhorn and each node's kubelet are played by the simulator),
starts the toolkit's manager, creates an UpgradePlan and shows the upgrade live:
phase, per-node states and elapsed time, then a summary.

Faults (--fault):
` + faultHelp() + `
Exit codes: 0 the upgrade succeeded and every invariant held; 1 it failed or an
invariant was violated; 2 the demo could not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The simulated cluster runs in a network namespace of its own
			// (a second run of this command): its API server and kubelets
			// reach nothing outside it.
			code := testenv.Isolated(func() int {
				code, err := run(cmd)
				if err != nil {
					_, _ = fmt.Fprintln(cmd.ErrOrStderr(), "error:", err)
				}
				return code
			})
			if code != 0 {
				os.Exit(code)
			}
			return nil
		},
	}
	// run returns the demo's exit code and what made it other than 0.
	run = func(cmd *cobra.Command) (int, error) {
		if verbose {
			ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(cmd.ErrOrStderr())))
		} else {
			ctrl.SetLogger(logr.Discard())
		}
		if output != "" && output != "yaml" {
			return usageExitCode, fmt.Errorf("--output %q: only yaml is supported", output)
		}
		out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
		live := output == ""
		// Writes to the terminal: a failed write has nowhere to be reported.
		say := func(w io.Writer, text string) { _, _ = io.WriteString(w, text) }
		say(errOut, fmt.Sprintf("starting the control plane and a simulated %d-node Harvester cluster...\n", o.Nodes))
		view := &status.View{Out: out, Terminal: status.IsTerminal(out)}
		res, err := demo.Run(cmd.Context(), o, func(p *v1beta1.UpgradePlan, _ time.Duration) {
			if live {
				_ = view.Show(status.FromPlan(p, nil, time.Now()))
			}
		})
		if res == nil || res.Plan == nil {
			return usageExitCode, err
		}
		if live {
			say(out, demo.Summary(res))
		} else if werr := demo.WriteYAML(out, res); werr != nil {
			return usageExitCode, werr
		}
		if err != nil {
			return 1, err
		}
		if !res.Succeeded() {
			return 1, fmt.Errorf("the upgrade ended in %s", res.Plan.Status.CurrentPhase)
		}
		return 0, nil
	}
	f := cmd.Flags()
	f.IntVar(&o.Nodes, "nodes", o.Nodes, "number of managed nodes; 1 runs the single-node path")
	f.BoolVar(&o.Witness, "witness", false, "add a witness node")
	f.StringSliceVar(&o.Pause, "pause", nil, "nodes to pause (spec.nodeUpgradeOption.pauseNodes); the demo resumes them after --resume-after")
	f.DurationVar(&o.ResumeAfter, "resume-after", o.ResumeAfter, "how long paused nodes stay paused")
	f.BoolVar(&o.RestoreVM, "restore-vm", false, "set spec.restoreVM: restart the VMs shut down for the upgrade")
	f.StringVar(&o.Fault, "fault", "", "inject a failure: "+strings.Join(demo.FaultNames(), ", "))
	f.BoolVar(&o.Fast, "fast", false, "run every simulated step instantly")
	f.BoolVar(&o.Restart, "restart", false, "kill and restart the manager at a random moment of every phase")
	f.Int64Var(&o.Seed, "seed", 1, "seed of the random restarts")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "give up after this long")
	f.StringVar(&o.Archive, "archive", "", "write the upgrade's support bundle (upgrade-toolkit logs PLAN --archive) to this .tar.gz file at the end")
	f.StringVarP(&output, "output", "o", "", "print the final UpgradePlan and its events as yaml instead of the live view")
	f.BoolVarP(&verbose, "verbose", "v", false, "log what the manager and the simulator do to stderr")
	return cmd
}

func faultHelp() string {
	var b strings.Builder
	for _, n := range demo.FaultNames() {
		fmt.Fprintf(&b, "  %-16s %s\n", n, demo.Faults[n])
	}
	return b.String()
}

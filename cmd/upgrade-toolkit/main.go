// Command upgrade-toolkit is the product binary of the Harvester upgrade
// toolkit, the one the image ships: the controller manager, the upgrade repo
// server, the jobs that run on the nodes and the cluster, and the commands
// people run (status, preflight). The simulator and its demo live in
// upgrade-toolkit-sim; deps_test.go keeps them out of this binary.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit code out of a subcommand.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// subcommands holds the constructors of the subcommands; each subcommand's
// file adds itself in an init function so that files stay independent.
var subcommands []func() *cobra.Command

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "upgrade-toolkit",
		Short: "Upgrade a Harvester cluster from one release to the next",
		Long: `upgrade-toolkit drives UpgradePlans (management.harvesterhci.io/v1beta1):
it downloads the release ISO, serves it to the nodes, upgrades the cluster's
components and then every node, one at a time, without losing a VM.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, newCmd := range subcommands {
		root.AddCommand(newCmd())
	}
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCommand()
	root.SetArgs(pluginArgs(os.Args))
	err := root.ExecuteContext(ctx)
	if code := reportExit(os.Stderr, err); code != 0 {
		os.Exit(code)
	}
}

// pluginArgs are the command's arguments; run as the kubectl plugin
// (kubectl-upgrade_status, e.g. a symlink to this binary), the status
// subcommand's.
func pluginArgs(argv []string) []string {
	if filepath.Base(argv[0]) == kubectlPlugin {
		return append([]string{"status"}, argv[1:]...)
	}
	return argv[1:]
}

// reportExit prints err, if any, and returns the exit code it stands for
// (exitCodes).
func reportExit(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	_, _ = fmt.Fprintln(w, "error:", err)
	return exitCodeOf(err)
}

// goFlagSet returns an empty standard flag set for libraries that bind there.
func goFlagSet() *flag.FlagSet { return flag.NewFlagSet("", flag.ContinueOnError) }

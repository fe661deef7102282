// Command upgrade-toolkit-sim is the toolkit's rehearsal: it runs the
// product's manager and job code against a simulated Harvester cluster
// (internal/sim on an embedded control plane, internal/testenv). It is a
// binary of its own so that upgrade-toolkit, the image that runs next to
// every Harvester, links none of the simulator, envtest or test helpers.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// usageExitCode is the exit code of a command line that cannot run.
const usageExitCode = 2

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "upgrade-toolkit-sim",
		Short:         "Rehearse a Harvester upgrade on a simulated cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDemoCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(usageExitCode)
	}
}

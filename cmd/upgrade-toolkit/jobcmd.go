package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// exitCodeHelp documents the exit codes that errs can end a command with.
func exitCodeHelp(errs ...error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nExit codes:\n  0   success\n  %-3d failure; the message says what failed and what to do\n", jobspec.ExitFailure)
	fmt.Fprintf(&b, "  %-3d invalid command line\n", usageExitCode)
	for _, c := range jobspec.ExitCodes {
		for _, e := range errs {
			if errors.Is(e, c.Err) {
				fmt.Fprintf(&b, "  %-3d %s\n", c.Code, c.Meaning)
			}
		}
	}
	return b.String()
}

// eligibilityErrors are the errors of the eligibility check.
var eligibilityErrors = []error{helper.ErrEligibilityUnknown, release.ErrDowngrade, release.ErrBelowMinimum,
	release.ErrPrereleaseCrossVersion, release.ErrDevToRelease, release.ErrInvalidVersion}

// terminationLogLimit is how much of the termination message the kubelet
// keeps.
const terminationLogLimit = 4096

// jobCommand sets up a job command: logs for `kubectl logs`, usage errors
// with their own exit code, and a failure that ends up in the exit code and
// in the pod's termination message, where `kubectl describe` shows it.
func jobCommand(cmd *cobra.Command, run func(ctx context.Context, kube *clusterFlags, args []string) error) *cobra.Command {
	var terminationLog string
	kube := addClusterFlags(cmd, false)
	cmd.PersistentFlags().StringVar(&terminationLog, "termination-log", "/dev/termination-log",
		"file the failure message is written to, when it exists (Kubernetes shows it as the container's termination message)")
	if cmd.Args != nil {
		cmd.Args = usageArgs(cmd.Args)
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	cmd.RunE = func(c *cobra.Command, a []string) error {
		ctrl.SetLogger(zap.New(zap.ConsoleEncoder(), zap.StacktraceLevel(zapcore.DPanicLevel)))
		ctx := log.IntoContext(c.Context(), ctrl.Log.WithName(c.Name()))
		err := run(ctx, kube, a)
		if err == nil {
			return nil
		}
		writeTerminationLog(terminationLog, err.Error())
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		// The job's own codes (its pod failure policy reads them), not
		// those of the commands people run.
		return &exitError{code: jobspec.ExitCodeOf(err), err: err}
	}
	return cmd
}

// usageError is a command line the command cannot run.
func usageError(format string, args ...any) error {
	return &exitError{code: usageExitCode, err: fmt.Errorf(format, args...)}
}

// writeTerminationLog writes msg to the file, if it exists.
func writeTerminationLog(file, msg string) {
	if file == "" {
		return
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return
	}
	if len(msg) > terminationLogLimit {
		msg = msg[:terminationLogLimit]
	}
	_, _ = f.WriteString(msg)
	_ = f.Close()
}

// requireEnv returns an environment variable, or an error that names it.
func requireEnv(name, what string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", usageError("%s is not set: it must name %s", name, what)
	}
	return v, nil
}

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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// The exit codes of the job commands (version-guard, vm-live-migrate-detector,
// restore-vm, node, cluster-upgrade). 1 is any other failure.
var jobExitCodes = []struct {
	err     error
	code    int
	meaning string
}{
	{helper.ErrEligibilityUnknown, 3, "the plan does not record the running or the target version yet"},
	{waitfor.ErrTimeout, 4, "a wait gave up (the message says for what, and what to do)"},
	{helper.ErrVMShutdown, 5, "some VMs could not be stopped"},
	{helper.ErrVMRestore, 6, "some VMs could not be started"},
	{helper.ErrVMCannotLeave, 7, "a VM can neither live-migrate nor be stopped by the upgrade (e.g. a paused VM)"},
	{release.ErrDowngrade, 10, "not eligible: the target release is older than the running one"},
	{release.ErrBelowMinimum, 11, "not eligible: the running release is older than the target's minUpgradableVersion"},
	{release.ErrPrereleaseCrossVersion, 12, "not eligible: a prerelease may only move to a build of the same version"},
	{release.ErrDevToRelease, 13, "not eligible: a development build may only move to another development build"},
	{release.ErrInvalidVersion, 14, "the running or the target version is not a Harvester version"},
}

// usageExitCode is the exit code of a command line the command cannot run.
const usageExitCode = 2

// exitCodeHelp documents the exit codes that errs can end a command with.
func exitCodeHelp(errs ...error) string {
	var b strings.Builder
	b.WriteString("\nExit codes:\n  0   success\n  1   failure; the message says what failed and what to do\n")
	fmt.Fprintf(&b, "  %-3d invalid command line\n", usageExitCode)
	for _, c := range jobExitCodes {
		for _, e := range errs {
			if errors.Is(e, c.err) {
				fmt.Fprintf(&b, "  %-3d %s\n", c.code, c.meaning)
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
func jobCommand(cmd *cobra.Command, run func(ctx context.Context, args []string) error) *cobra.Command {
	var terminationLog string
	cmd.PersistentFlags().StringVar(&terminationLog, "termination-log", "/dev/termination-log",
		"file the failure message is written to, when it exists (Kubernetes shows it as the container's termination message)")
	args := cmd.Args
	cmd.Args = func(c *cobra.Command, a []string) error {
		if args == nil {
			return nil
		}
		if err := args(c, a); err != nil {
			return &exitError{code: usageExitCode, err: err}
		}
		return nil
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: usageExitCode, err: err} })
	cmd.RunE = func(c *cobra.Command, a []string) error {
		ctrl.SetLogger(zap.New(zap.ConsoleEncoder(), zap.StacktraceLevel(zapcore.DPanicLevel)))
		ctx := log.IntoContext(c.Context(), ctrl.Log.WithName(c.Name()))
		err := run(ctx, a)
		if err == nil {
			return nil
		}
		writeTerminationLog(terminationLog, err.Error())
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		for _, ec := range jobExitCodes {
			if errors.Is(err, ec.err) {
				return &exitError{code: ec.code, err: err}
			}
		}
		return err
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

// newClient returns a client that reads from the API server directly: the
// jobs act on what other components just wrote, which a cache might not
// have yet.
func newClient() (client.Client, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("reaching the Kubernetes API: %w", err)
	}
	return client.New(cfg, client.Options{Scheme: cluster.NewScheme()})
}

// requireEnv returns an environment variable, or an error that names it.
func requireEnv(name, what string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", usageError("%s is not set: it must name %s", name, what)
	}
	return v, nil
}

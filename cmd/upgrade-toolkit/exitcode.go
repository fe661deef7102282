package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/harvester/upgrade-toolkit/internal/jobspec"
)

// The exit codes of the commands people run (status, preflight, logs,
// images), the README's table; the job commands add theirs
// (jobspec.ExitCodes).
const (
	// exitFailure: the command could not do what it was asked; the message
	// says why (a plan, Version or log that does not exist, a file that
	// cannot be written).
	exitFailure = jobspec.ExitFailure
	// usageExitCode: a command line the command cannot run.
	usageExitCode = jobspec.ExitUsage
	// exitCheckFailed: a check failed, so a plan with these settings would
	// not start (preflight, images).
	exitCheckFailed = 7
	// exitPlanFailed: the plan status --watch followed failed.
	exitPlanFailed = 8
	// exitUnreachable: no cluster could be asked: no kubeconfig or context,
	// the API server did not answer, or it refused the credentials.
	exitUnreachable = 9
	// exitPlanAborted: the plan status --watch followed was aborted
	// (spec.abort).
	exitPlanAborted = 10
)

// exitCodes are the codes of the commands people run, with their meaning,
// as `--help` and the README list them.
var exitCodes = []struct {
	code    int
	meaning string
}{
	{0, "success: the command did what it was asked (status --watch: the plan succeeded)"},
	{exitFailure, "failure: the message says what failed and what to do"},
	{usageExitCode, "invalid command line"},
	{exitCheckFailed, "a check failed: a plan with these settings would not start (preflight, images)"},
	{exitPlanFailed, "the plan failed (status --watch)"},
	{exitUnreachable, "no cluster to ask: no kubeconfig or context, the API server did not answer, or it refused the credentials"},
	{exitPlanAborted, "the plan was aborted (status --watch)"},
}

// exitCodesHelp is the table of exit codes for a command's --help; codes
// limits it to those the command can end with.
func exitCodesHelp(codes ...int) string {
	var b strings.Builder
	b.WriteString("\n\nExit codes:")
	for _, c := range exitCodes {
		for _, want := range codes {
			if c.code == want {
				fmt.Fprintf(&b, "\n  %-3d %s", c.code, c.meaning)
			}
		}
	}
	return b.String()
}

// exitCodeOf is the exit code err ends a command with: its own, else
// exitUnreachable when the cluster could not be asked, else exitFailure.
func exitCodeOf(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if unreachable(err) {
		return exitUnreachable
	}
	return exitFailure
}

// unreachable tells whether err says the API server could not be asked: a
// request that did not reach it or timed out (client-go reports these as
// url.Error), or credentials it refused.
func unreachable(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) || apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)
}

// usageArgs makes wrong arguments a usage error.
func usageArgs(args cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, a []string) error {
		if err := args(c, a); err != nil {
			return &exitError{code: usageExitCode, err: err}
		}
		return nil
	}
}

// flagUsageError makes a bad flag a usage error (cobra's SetFlagErrorFunc).
func flagUsageError(_ *cobra.Command, err error) error {
	return &exitError{code: usageExitCode, err: err}
}

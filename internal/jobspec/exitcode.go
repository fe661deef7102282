package jobspec

import (
	"errors"
	"slices"

	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// The exit codes of the job commands (version-guard,
// vm-live-migrate-detector, restore-vm, node, cluster-upgrade). The Jobs fail
// at once on the ones a retry cannot mend (their pod failure policy,
// PermanentExitCodes).
const (
	// ExitFailure is any failure without a code of its own.
	ExitFailure = 1
	// ExitUsage is a command line the command cannot run.
	ExitUsage = 2
)

// ExitCode is the exit code of the errors that match Err (errors.Is).
type ExitCode struct {
	Err     error
	Code    int
	Meaning string
}

// ExitCodes are the job commands' exit codes besides 0, ExitFailure and
// ExitUsage.
var ExitCodes = []ExitCode{
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

// ExitCodeOf returns the exit code a job command ends with on err: the first
// of ExitCodes that err matches, else ExitFailure.
func ExitCodeOf(err error) int {
	for _, c := range ExitCodes {
		if errors.Is(err, c.Err) {
			return c.Code
		}
	}
	return ExitFailure
}

// PermanentExitCodes are the exit codes with which the job commands report
// a failure a retry cannot mend: a bad command line and every code of
// ExitCodes (a wait that gave up, VMs that could not be stopped or started,
// a VM that cannot leave its node, an ineligible upgrade). ExitFailure, any
// other failure, may be transient.
func PermanentExitCodes() []int32 {
	codes := []int32{ExitUsage}
	for _, c := range ExitCodes {
		codes = append(codes, int32(c.Code)) //nolint:gosec // small exit codes
	}
	// The API wants the values of a pod failure policy sorted.
	slices.Sort(codes)
	return codes
}

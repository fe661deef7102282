// Package exitcode holds the exit codes of the job commands (version-guard,
// vm-live-migrate-detector, restore-vm, node, cluster-upgrade): the
// toolkit's Jobs fail at once on the ones a retry cannot mend (their pod
// failure policy, phase.PermanentExitCodes).
package exitcode

import (
	"errors"

	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// Usage is the exit code of a command line the command cannot run; 1 is
// any failure without a code of its own.
const Usage = 2

// Code is the exit code of the errors that match Err (errors.Is).
type Code struct {
	Err     error
	Code    int
	Meaning string
}

// Codes are the job commands' exit codes besides 0, 1 and Usage.
var Codes = []Code{
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

// Of returns the exit code a job command ends with on err: the first of
// Codes that err matches, else 1.
func Of(err error) int {
	for _, c := range Codes {
		if errors.Is(err, c.Err) {
			return c.Code
		}
	}
	return 1
}

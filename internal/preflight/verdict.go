package preflight

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Reason names a check: a constant of the package that runs it (the
// admission checks here, the verification gates in internal/phase, the
// preview's own in internal/preview).
type Reason string

// Verdict is the outcome of one check, the one shape every check of the
// toolkit gives: the admission checks, the pre-flight checks of Initialize,
// the verification gates and the final checks (recorded in status.checks),
// and the preview.
type Verdict struct {
	// Reason names the check.
	Reason Reason
	// Result is Passed, Pending (not yet: waited for until a deadline),
	// Failed or Warning (allowed, but worth a look).
	Result v1beta1.CheckResult
	// Message names the object checked, what was expected and what was
	// seen, and what to do when the check does not pass.
	Message string
	// Field is, for a failed admission check, the refused field of the
	// plan as the API server's answer reports it.
	Field *field.Error
	// Fix says how to make the check pass, when the message does not.
	Fix string
	// Objects are the objects involved, as kind namespace/name, for a
	// risk (see risks.go).
	Objects []string
}

// Passed is the verdict of a check that passed.
func Passed(reason Reason, format string, args ...any) Verdict {
	return Verdict{Reason: reason, Result: v1beta1.CheckPassed, Message: fmt.Sprintf(format, args...)}
}

// Pending is the verdict of a check whose expected state has not come yet.
func Pending(reason Reason, format string, args ...any) Verdict {
	return Verdict{Reason: reason, Result: v1beta1.CheckPending, Message: fmt.Sprintf(format, args...)}
}

// Failed is the verdict of a check that failed.
func Failed(reason Reason, format string, args ...any) Verdict {
	return Verdict{Reason: reason, Result: v1beta1.CheckFailed, Message: fmt.Sprintf(format, args...)}
}

// Warning is the verdict of a check that lets the upgrade go on but has
// something to say.
func Warning(reason Reason, format string, args ...any) Verdict {
	return Verdict{Reason: reason, Result: v1beta1.CheckWarning, Message: fmt.Sprintf(format, args...)}
}

// Refused is the verdict of an admission check that refuses a field of the
// plan; its message is the field error's.
func Refused(reason Reason, err *field.Error) Verdict {
	return Verdict{Reason: reason, Result: v1beta1.CheckFailed, Message: err.Error(), Field: err}
}

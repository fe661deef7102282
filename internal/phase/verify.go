package phase

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
)

// A step whose work reported success (a Job that exited 0) is not done until
// its gate sees the change in the cluster: each gate is a list of checks of
// the cluster's real state, recorded in status.checks. A check that failed
// fails the plan at once; a pending one is waited for until the gate's
// deadline (measured from when the work reported success), with the plan
// Degraded once it has waited a while.

// A gate's checks give the toolkit's one verdict shape (preflight.Verdict);
// the verdict's reason names the check, and status.checks records it as
// <gate>/<reason>.

// degradedAfter is how long a gate waits before it turns the plan Degraded:
// a moment's lag between a Job's completion and the effect it waited for
// (two watches) is no reason to alarm anyone.
func degradedAfter(deadline time.Duration) time.Duration { return min(30*time.Second, deadline/4) }

// gate is one step's verification.
type gate struct {
	// name prefixes the checks' names (status.checks[].name is
	// <name>/<check>).
	name string
	// what names the step for messages ("the cluster upgrade").
	what string
	// since is when the step's work reported success; the deadline runs
	// from there.
	since    time.Time
	deadline time.Duration
}

// verify records the gate's checks in the plan's status and says where the
// step stands: done when every check passed (or only warns), failed when a
// check failed or a pending one outlived the deadline, waiting otherwise.
func (s *Scope) verify(g gate, checks []preflight.Verdict) Result {
	wasVerified := s.gatePassed(g.name)
	if retried := s.Plan.RetriedAt(); retried.After(g.since) {
		// A retry gives the gate its whole deadline again.
		g.since = retried
	}
	var failures, waits, warnings []string
	for _, c := range checks {
		s.setCheck(g.name+"/"+string(c.Reason), c.Result, c.Message)
		switch c.Result {
		case v1beta1.CheckFailed:
			failures = append(failures, c.Message)
		case v1beta1.CheckPending:
			waits = append(waits, c.Message)
		case v1beta1.CheckWarning:
			warnings = append(warnings, c.Message)
		}
	}
	deadline := s.deadline(g.since, g.deadline)
	switch {
	case len(failures) > 0:
		return Fail("%s reported success, but the cluster does not show it: %s", g.what, strings.Join(failures, "; "))
	case len(waits) > 0 && !s.Clock.Now().Before(deadline):
		return Fail("%s reported success at %s, but the cluster still does not show it after %s: %s",
			g.what, timestamp(g.since), g.deadline, strings.Join(waits, "; "))
	case len(waits) > 0:
		r := Wait("verifying %s: %s (since %s; fails at %s)", g.what, strings.Join(waits, "; "), timestamp(g.since), timestamp(deadline))
		if s.Clock.Now().Sub(g.since) >= degradedAfter(g.deadline) {
			r.Degraded = fmt.Sprintf("%s reported success at %s, but %s", g.what, timestamp(g.since), strings.Join(waits, "; "))
		}
		// Some of what a gate reads cannot be watched for every change
		// that matters (a deadline passing): look again now and then.
		return r.After(min(deadline.Sub(s.Clock.Now()), 30*time.Second))
	}
	if !wasVerified {
		msg := make([]string, 0, len(checks))
		for _, c := range checks {
			if c.Result == v1beta1.CheckPassed {
				msg = append(msg, c.Message)
			}
		}
		s.Event(corev1.EventTypeNormal, v1beta1.EventVerified, "Verified %s: %s", g.what, strings.Join(msg, "; "))
		for _, w := range warnings {
			s.Event(corev1.EventTypeWarning, v1beta1.EventVerificationPending, "%s: %s", g.what, w)
		}
	}
	return Done()
}

// gatePassed reports whether every recorded check of a gate passed or
// warned, and there is at least one.
func (s *Scope) gatePassed(gate string) bool {
	found := false
	for _, c := range s.Plan.Status.Checks {
		if !strings.HasPrefix(c.Name, gate+"/") {
			continue
		}
		found = true
		if c.Result != v1beta1.CheckPassed && c.Result != v1beta1.CheckWarning {
			return false
		}
	}
	return found
}

// maxCheckMessage is the longest message status.checks takes.
const maxCheckMessage = 2048

// setCheck records a check's result; its timestamp moves only when the
// result changes. A message too long for the API is cut.
func (s *Scope) setCheck(name string, result v1beta1.CheckResult, message string) {
	if len(message) > maxCheckMessage {
		message = strings.ToValidUTF8(message[:maxCheckMessage-3], "") + "..."
	}
	st := &s.Plan.Status
	for i := range st.Checks {
		c := &st.Checks[i]
		if c.Name != name {
			continue
		}
		if c.Result != result {
			c.LastTransitionTime = metav1.NewTime(s.Now())
		}
		c.Result, c.Message = result, message
		return
	}
	st.Checks = append(st.Checks, v1beta1.Check{Name: name, Result: result, Message: message, LastTransitionTime: metav1.NewTime(s.Now())})
}

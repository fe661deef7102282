// Package phase holds the work of each pipeline step, one file per phase.
// A phase's Run is called on every reconcile while the plan is in the phase's
// active value; it gathers facts, decides with pure functions and applies
// the result. It must be idempotent: any statement may be the last before the
// process dies, and the next reconcile converges without doing anything twice
// that matters.
package phase

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/kept"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// Phase is the work of one pipeline step.
type Phase interface {
	// Name is the step's name, as events call it ("ISODownload").
	Name() string
	// Run works towards completing the step and says how it stands. An
	// error is transient: the reconcile is retried with backoff and the plan
	// is marked Degraded meanwhile.
	Run(ctx context.Context, s *Scope) (Result, error)
}

// Gate is implemented by phases that must pass a check before they are
// entered; a non-empty result fails the plan with that message.
type Gate interface {
	Gate(s *Scope) string
}

// Result is where a phase stands after one Run.
type Result struct {
	// Done: the step's work is complete.
	Done bool
	// Failure, when not empty, fails the plan with this message.
	Failure string
	// Final: a retry cannot cure the failure (a pre-flight check, a bad
	// ISO); its message says what to change. Other failures (a Job, a node
	// step, a download or a wait failed) can be retried.
	Final bool
	// Waiting says what the phase waits for (the Progressing message).
	Waiting string
	// RequeueAfter asks for another Run after this long even if nothing
	// watched changes: for deadlines and things that cannot be watched.
	RequeueAfter time.Duration
	// Degraded, when not empty, says what has been missing for a while
	// although the work reported success (the Degraded condition's message).
	Degraded string
	// Held: the plan is paused (spec.paused) at a safe point, nothing of
	// it under way; Waiting says where.
	Held bool
}

// Done is the result of a completed step.
func Done() Result { return Result{Done: true} }

// Fail is the result of a step that failed the plan; the plan may be
// retried once the cause is fixed.
func Fail(format string, args ...any) Result { return Result{Failure: fmt.Sprintf(format, args...)} }

// FailFinal is the result of a step that failed the plan for a reason a
// retry cannot cure.
func FailFinal(format string, args ...any) Result {
	return Result{Failure: fmt.Sprintf(format, args...), Final: true}
}

// Wait is the result of a step that waits for something it watches.
func Wait(format string, args ...any) Result { return Result{Waiting: fmt.Sprintf(format, args...)} }

// Hold is the result of a paused plan at a safe point.
func Hold(format string, args ...any) Result {
	return Result{Waiting: fmt.Sprintf(format, args...), Held: true}
}

// After asks for another Run after d as well.
func (r Result) After(d time.Duration) Result {
	r.RequeueAfter = d
	return r
}

// Event is a Kubernetes event to record on the plan once the pass's status
// write has succeeded, so that a retried pass does not repeat it.
type Event struct {
	Type    string // corev1.EventTypeNormal or Warning
	Reason  string
	Message string
}

// Scope is what a phase works with during one reconcile.
type Scope struct {
	// Plan is the working copy; phases change its status. It is written once
	// at the end of the reconcile, only if it changed.
	Plan *v1beta1.UpgradePlan
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server directly, for the few decisions
	// that must not use a lagging cache.
	APIReader client.Reader
	// Kube reaches subresources the controller-runtime client does not
	// cover (pod logs, the node proxy).
	Kube kubernetes.Interface
	// Clock is the time source for every deadline.
	Clock clock.PassiveClock
	// Config is the manager's configuration.
	Config *Config
	// Log carries the plan and phase.
	Log logr.Logger
	// PlanProgress reads Rancher's machine plans, kept across passes; nil
	// reads them afresh each pass.
	PlanProgress *cluster.PlanProgressReader
	// Kept holds the lists a pass reads (managed nodes, Jobs, drain
	// requests) from one pass to the next; nil reads them afresh each pass.
	Kept *kept.Lists
	// Ledgers reads the plan's VM ledger, parsed once per version; nil
	// parses it on every read.
	Ledgers *vmledger.Cache
	// Events are recorded after the status write.
	Events []Event
	// working is Plan as a working copy (SetWorkingCopy), whose node map
	// changes only through putNode.
	working kept.WorkingCopy
}

// SetWorkingCopy makes the pass's Plan a copy of plan, which may be the
// cache's own (kept.Copy: its node map is shared until the first change).
func (s *Scope) SetWorkingCopy(plan *v1beta1.UpgradePlan) {
	s.working = kept.Copy(plan)
	s.Plan = s.working.Plan
}

// putNode records a node's entry: every change of the node map goes
// through here, so that a shared map is copied first.
func (s *Scope) putNode(node string, ns v1beta1.NodeUpgradeStatus) {
	if s.working.Plan != s.Plan {
		// A Scope made without SetWorkingCopy owns its plan.
		s.working = kept.Owned(s.Plan)
	}
	s.working.PutNode(node, ns)
}

// Now returns the current time, truncated to the second the API stores.
func (s *Scope) Now() time.Time { return s.Clock.Now().Truncate(time.Second) }

// deadline is when something that began at since and may take limit is
// overdue: the time the plan spent paused does not count.
func (s *Scope) deadline(since time.Time, limit time.Duration) time.Time {
	return pipeline.Deadline(&s.Plan.Status, since, limit, s.Clock.Now())
}

// Event records an event for after the status write.
func (s *Scope) Event(eventType, reason, format string, args ...any) {
	s.Events = append(s.Events, Event{Type: eventType, Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// Package controller holds the reconcilers: thin loops that gather facts, call
// the pure decisions of internal/pipeline, internal/phase and
// internal/nodestate, and write the result.
package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/planstatus"
)

// The plan reconciler adds and removes its finalizer with a patch, writes
// the status, lists the plans from the API server to decide which holds the
// upgrade slot, and records events on the plans; plans are cluster-scoped,
// so their events go to the default namespace.
//
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans,verbs=get;list;patch
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans/status,verbs=patch
// +kubebuilder:rbac:groups="",namespace=default,resources=events,verbs=create;patch

// PlanReconciler drives UpgradePlans through the pipeline. It is the only
// writer of a plan's status.
type PlanReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Kube      kubernetes.Interface
	Recorder  record.EventRecorder
	Clock     clock.PassiveClock
	Config    *phase.Config
	// Phases implement pipeline.Steps, index for index.
	Phases []phase.Phase
	// PlanProgress reads Rancher's machine plans once per version.
	PlanProgress *cluster.PlanProgressReader
	// Plans writes the status.
	Plans *planstatus.Store
	// Reuse keeps what passes derive from the cache's lists until they
	// change; the watches mark the changes.
	Reuse *phase.Reuse
}

// maxTransitionsPerPass bounds how many phase changes one reconcile makes, so
// that a pass always ends; a whole pipeline has fewer.
var maxTransitionsPerPass = 2*len(pipeline.Steps) + 2

// Reconcile implements reconcile.Reconciler.
func (r *PlanReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// The cache's own copy, not a deep copy: plan is only read (a pass
	// works on s.Plan), and a plan holds an entry per node.
	plan := &v1beta1.UpgradePlan{}
	if err := r.Client.Get(ctx, req.NamespacedName, plan, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	plan = r.Plans.Latest(plan)
	s := &phase.Scope{
		Client: r.Client, APIReader: r.APIReader, Kube: r.Kube,
		Clock: r.Clock, Config: r.Config, Log: log.FromContext(ctx), PlanProgress: r.PlanProgress, Reuse: r.Reuse,
	}
	s.SetWorkingCopy(plan)

	if plan.AwaitsRetry() {
		return r.awaitRetry(ctx, plan, s)
	}
	if !plan.DeletionTimestamp.IsZero() || plan.IsFinished() {
		return r.finish(ctx, plan, s)
	}
	if plan.IsDryRun() {
		return r.dryRun(ctx, plan, s)
	}
	if !plan.IsStarted() {
		holder, err := r.slotHolder(ctx)
		if err != nil {
			return ctrl.Result{}, err
		}
		if holder != nil && holder.Name != plan.Name {
			r.setQueued(s, holder)
			return r.writeStatus(ctx, plan, s, ctrl.Result{}, nil)
		}
	}
	// The finalizer goes on before the plan creates or changes anything, so
	// that whatever it does is undone even if it is deleted right away.
	if !controllerutil.ContainsFinalizer(plan, v1beta1.FinalizerCleanup) {
		before := plan
		plan = plan.DeepCopy()
		controllerutil.AddFinalizer(plan, v1beta1.FinalizerCleanup)
		if err := r.Client.Patch(ctx, plan, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return requeueOnConflict(err)
		}
		s.Plan.ObjectMeta = *plan.ObjectMeta.DeepCopy()
	}

	res, runErr := r.runPipeline(ctx, s)
	r.setConditions(s, res, runErr)
	return r.writeStatus(ctx, plan, s, ctrl.Result{RequeueAfter: res.RequeueAfter}, runErr)
}

// slotHolder returns the plan that holds the cluster's one upgrade slot.
// It reads from the API server, not the cache, because starting a plan on a
// stale view could start two upgrades at once.
func (r *PlanReconciler) slotHolder(ctx context.Context) (*v1beta1.UpgradePlan, error) {
	var plans v1beta1.UpgradePlanList
	if err := r.APIReader.List(ctx, &plans); err != nil {
		return nil, fmt.Errorf("listing UpgradePlans: %w", err)
	}
	return pipeline.SlotHolder(plans.Items), nil
}

// runPipeline moves the plan through as many phases as it can in one pass.
func (r *PlanReconciler) runPipeline(ctx context.Context, s *phase.Scope) (phase.Result, error) {
	st := &s.Plan.Status
	moved := false
	for range maxTransitionsPerPass {
		current := st.CurrentPhase
		if current.IsTerminal() {
			return phase.Result{}, nil
		}
		pos, located := pipeline.Locate(current)
		if current != "" && !located {
			r.fail(s, phase.FailFinal("the plan is in the unknown phase %q", current))
			return phase.Result{}, nil
		}
		if located && pos.Active {
			step, ph := pipeline.Steps[pos.Index], r.Phases[pos.Index]
			if res, err := ph.Run(log.IntoContext(ctx, s.Log.WithValues("phase", ph.Name())), s); !r.done(s, res, err) {
				return res, err
			}
			pipeline.SetPhase(st, step.Completed, s.Now())
			moved = true
			s.Event(corev1.EventTypeNormal, v1beta1.EventPhaseCompleted, "Completed phase %s", step.Name)
			continue
		}
		next, _ := pipeline.Next(current)
		if s.Plan.IsPaused() {
			// Between two phases: a safe point, nothing under way.
			return phase.Hold("paused (spec.paused) before %s; set spec.paused to false to resume", stepName(next)), nil
		}
		if next == v1beta1.PhaseSucceeded {
			if moved {
				// The final step deletes the plan's Jobs, the evidence of
				// the last phase: it runs only once the end of that phase
				// is recorded. The status write brings the next pass.
				return phase.Result{}, nil
			}
			// The plan says Succeeded only once the cluster shows it.
			if res, err := phase.Finalize(log.IntoContext(ctx, s.Log.WithValues("phase", phase.GateFinal)), s); !r.done(s, res, err) {
				return res, err
			}
			pipeline.SetPhase(st, v1beta1.PhaseSucceeded, s.Now())
			s.Event(corev1.EventTypeNormal, v1beta1.EventUpgradeSucceeded, "Upgrade completed successfully")
			return phase.Result{}, nil
		}
		nextPos, _ := pipeline.Locate(next)
		if g, ok := r.Phases[nextPos.Index].(phase.Gate); ok {
			if msg := g.Gate(s); msg != "" {
				r.fail(s, phase.FailFinal("%s", msg))
				return phase.Result{}, nil
			}
		}
		pipeline.SetPhase(st, next, s.Now())
		s.Event(corev1.EventTypeNormal, v1beta1.EventPhaseTransition, "Entering phase %s", pipeline.Steps[nextPos.Index].Name)
	}
	return phase.Result{}, nil
}

// stepName names the step that starts with phase p.
func stepName(p v1beta1.UpgradePlanPhase) string {
	if pos, ok := pipeline.Locate(p); ok {
		return "phase " + pipeline.Steps[pos.Index].Name
	}
	return "the final verification"
}

// done reports whether a step's work is done, and fails the plan when the
// step failed it.
func (r *PlanReconciler) done(s *phase.Scope, res phase.Result, err error) bool {
	if err == nil && res.Failure != "" {
		r.fail(s, res)
		return false
	}
	return err == nil && res.Done
}

// fail moves the plan to Failed, records the failure in its history and
// keeps the reason in the Progressing condition. A failure a retry can cure
// says how to retry, and until when.
func (r *PlanReconciler) fail(s *phase.Scope, res phase.Result) {
	st := &s.Plan.Status
	f := v1beta1.Failure{Phase: st.CurrentPhase, Message: res.Failure, FailedAt: metav1.NewTime(s.Now())}
	msg := res.Failure
	if !res.Final && r.Config.RetryWindow > 0 {
		until := metav1.NewTime(s.Now().Add(r.Config.RetryWindow))
		f.RetryDeadline = &until
		msg += "; " + phase.RetryHint(s.Plan.Name, until.Time)
	}
	st.Failures = append(st.Failures, f)
	// A retry is asked for by a value set after the failure.
	st.ObservedRetry = s.Plan.Annotations[v1beta1.AnnotationRetry]
	pipeline.SetPhase(st, v1beta1.PhaseFailed, s.Now())
	r.setCondition(s, v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonFailed, msg)
	s.Event(corev1.EventTypeWarning, v1beta1.EventUpgradeFailed, "Upgrade failed: %s", msg)
}

// awaitRetry keeps a plan that failed for a reason a retry can cure as it
// is until the retry annotation asks for a retry, then goes back to the
// failed step; once the retry window has passed, it is cleaned up like any
// finished plan.
func (r *PlanReconciler) awaitRetry(ctx context.Context, plan *v1beta1.UpgradePlan, s *phase.Scope) (ctrl.Result, error) {
	until := plan.LastFailure().RetryDeadline.Time
	left := until.Sub(r.Clock.Now())
	if left <= 0 {
		// Once begun, the cleanup is never cut short by a late retry.
		r.setCondition(s, v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonFailed,
			fmt.Sprintf("%s; not retried by %s: what the plan made and changed is cleaned up", plan.LastFailure().Message, until.UTC().Format(time.RFC3339)))
		return r.finish(ctx, plan, s)
	}
	retry := plan.RetryRequested()
	if retry == "" {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	res, err := phase.PrepareRetry(ctx, s)
	if err != nil || !res.Done {
		if err == nil {
			s.Log.Info("retry waiting", "for", res.Waiting)
		}
		r.setDegraded(s, err, "")
		return r.writeStatus(ctx, plan, s, ctrl.Result{RequeueAfter: res.RequeueAfter}, err)
	}
	failed := plan.LastFailure()
	if err := phase.Resume(ctx, s, retry); err != nil {
		return ctrl.Result{}, err
	}
	s.Event(corev1.EventTypeNormal, v1beta1.EventUpgradeRetried, "Retrying from phase %s (retry %q), after: %s", failed.Phase, retry, failed.Message)
	r.setConditions(s, phase.Wait("retrying from phase %s", failed.Phase), nil)
	return r.writeStatus(ctx, plan, s, ctrl.Result{}, nil)
}

// setQueued reports that the plan waits for another one to finish.
func (r *PlanReconciler) setQueued(s *phase.Scope, holder *v1beta1.UpgradePlan) {
	r.setCondition(s, v1beta1.ConditionAvailable, metav1.ConditionTrue, v1beta1.ReasonExecutable, "")
	msg := fmt.Sprintf("waiting for upgrade %q to finish; this plan starts by itself when it has finished and cleaned up", holder.Name)
	if holder.Status.CurrentPhase != "" {
		msg = fmt.Sprintf("waiting for upgrade %q (phase %s) to finish; this plan starts by itself when it has finished and cleaned up", holder.Name, holder.Status.CurrentPhase)
	}
	if r.setCondition(s, v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonConcurrentUpgradeBlocked, msg) {
		s.Event(corev1.EventTypeWarning, v1beta1.EventConcurrentUpgradeBlocked, "Blocked by in-progress upgrade %q", holder.Name)
	}
	r.setCondition(s, v1beta1.ConditionDegraded, metav1.ConditionFalse, v1beta1.ReasonReconcileSuccess, "")
}

// setEnded marks the plan no longer available: it reached a terminal phase.
func (r *PlanReconciler) setEnded(s *phase.Scope) {
	r.setCondition(s, v1beta1.ConditionAvailable, metav1.ConditionFalse, v1beta1.ReasonExecuted, "Entered one of the terminal phases")
}

// setConditions summarises the pass in the plan's conditions and records the
// events that go with their changes.
func (r *PlanReconciler) setConditions(s *phase.Scope, res phase.Result, runErr error) {
	st := &s.Plan.Status
	r.setDegraded(s, runErr, res.Degraded)
	switch st.CurrentPhase {
	case v1beta1.PhaseSucceeded:
		r.setEnded(s)
		r.setCondition(s, v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonSucceeded, "UpgradePlan has completed")
	case v1beta1.PhaseFailed:
		// fail set Progressing with the reason when the plan failed.
		r.setEnded(s)
	default:
		r.setCondition(s, v1beta1.ConditionAvailable, metav1.ConditionTrue, v1beta1.ReasonExecutable, "")
		progressing := s.Plan.Condition(v1beta1.ConditionProgressing)
		wasHeld := progressing != nil && progressing.Reason == v1beta1.ReasonPaused
		switch {
		case res.Held:
			if r.setCondition(s, v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonPaused, res.Waiting) && !wasHeld {
				s.Event(corev1.EventTypeNormal, v1beta1.EventPaused, "Paused: %s", res.Waiting)
			}
		default:
			r.setCondition(s, v1beta1.ConditionProgressing, metav1.ConditionTrue, string(st.CurrentPhase), res.Waiting)
			if wasHeld && !s.Plan.IsPaused() {
				s.Event(corev1.EventTypeNormal, v1beta1.EventResumed, "Resumed in phase %s", st.CurrentPhase)
			}
		}
	}
}

// setDegraded reports the pass's error, if any, in the Degraded condition,
// with a Warning event once per distinct error; without an error, what a
// step has been missing for a while although its work reported success.
func (r *PlanReconciler) setDegraded(s *phase.Scope, err error, missing string) {
	switch {
	case err != nil:
		if r.setCondition(s, v1beta1.ConditionDegraded, metav1.ConditionTrue, v1beta1.ReasonReconcileError, err.Error()) {
			s.Event(corev1.EventTypeWarning, v1beta1.EventReconcileError, "Pipeline error: %s", err.Error())
		}
	case missing != "":
		if r.setCondition(s, v1beta1.ConditionDegraded, metav1.ConditionTrue, v1beta1.ReasonVerificationPending, missing) {
			s.Event(corev1.EventTypeWarning, v1beta1.EventVerificationPending, "%s", missing)
		}
	default:
		r.setCondition(s, v1beta1.ConditionDegraded, metav1.ConditionFalse, v1beta1.ReasonReconcileSuccess, "")
	}
}

// setCondition sets a condition of the working copy and reports whether its
// status, reason or message changed. Timestamps move only on change.
func (r *PlanReconciler) setCondition(s *phase.Scope, t string, status metav1.ConditionStatus, reason, msg string) bool {
	old := meta.FindStatusCondition(s.Plan.Status.Conditions, t)
	changed := old == nil || old.Status != status || old.Reason != reason || old.Message != msg
	meta.SetStatusCondition(&s.Plan.Status.Conditions, metav1.Condition{
		Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: s.Plan.Generation,
	})
	return changed
}

// writeStatus writes the working copy's status if it changed, with
// optimistic locking so a pass that decided on a stale plan cannot win, and
// records the pass's events once the write succeeded. The patch carries only
// what changed (planstatus).
func (r *PlanReconciler) writeStatus(ctx context.Context, stored *v1beta1.UpgradePlan, s *phase.Scope, res ctrl.Result, runErr error) (ctrl.Result, error) {
	wrote, err := r.Plans.WriteStatus(ctx, stored, s.Plan)
	if err != nil {
		return requeueOnConflict(err)
	}
	if wrote {
		metrics.Record(stored, s.Plan)
	}
	for _, e := range s.Events {
		r.Recorder.Event(s.Plan, e.Type, e.Reason, e.Message)
	}
	return res, runErr
}

// conflictRetry is how soon a pass that lost a write race runs again.
const conflictRetry = 100 * time.Millisecond

// requeueOnConflict turns a write conflict (someone changed the object since
// this pass read it) into a quiet retry.
func requeueOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}

// finish cleans up after a plan that reached a terminal phase or is being
// deleted, records what it restored, then releases the plan by removing the
// finalizer.
func (r *PlanReconciler) finish(ctx context.Context, plan *v1beta1.UpgradePlan, s *phase.Scope) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(plan, v1beta1.FinalizerCleanup) {
		return ctrl.Result{}, nil
	}
	// The cache may not show yet that the finalizer is gone (an event of the
	// cleanup's own deletions can bring a pass here first): ask the API
	// server, so that a plan is cleaned up and released once.
	fresh := &v1beta1.UpgradePlan{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(plan), fresh); err != nil || !controllerutil.ContainsFinalizer(fresh, v1beta1.FinalizerCleanup) {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	res, err := phase.Cleanup(ctx, s)
	r.setDegraded(s, err, "")
	if err == nil && !res.Done {
		// The plan's conditions stay as the upgrade ended; what holds the
		// finalizer goes to the log.
		s.Log.Info("cleanup waiting", "for", res.Waiting)
	}
	if err != nil || !res.Done {
		return r.writeStatus(ctx, plan, s, ctrl.Result{RequeueAfter: res.RequeueAfter}, err)
	}
	if result, err := r.writeStatus(ctx, plan, s, ctrl.Result{}, nil); err != nil || !result.IsZero() {
		return result, err
	}
	// s.Plan carries the resourceVersion of the status write, if any.
	before := s.Plan.DeepCopy()
	controllerutil.RemoveFinalizer(s.Plan, v1beta1.FinalizerCleanup)
	if err := r.Client.Patch(ctx, s.Plan, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return requeueOnConflict(err)
	}
	return ctrl.Result{}, nil
}

// Package controller holds the reconcilers: thin loops that gather facts, call
// the pure decisions of internal/pipeline, internal/phase and
// internal/nodestate, and write the result.
package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
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
	"github.com/harvester/upgrade-toolkit/internal/kept"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/planstatus"
	"github.com/harvester/upgrade-toolkit/internal/status"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
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
	// Kept holds the lists the passes read until they change; the watches
	// mark the changes.
	Kept *kept.Lists
	// watched is when the watchdog last looked at each plan (name to
	// time.Time): it looks at most once per watchSpacing, however many
	// passes run.
	watched sync.Map
	// conflicts counts, by plan name, the passes in a row whose step lost
	// a write race (conflictsReported says when that is reported).
	conflicts sync.Map
	// Ledgers reads the plans' VM ledgers, parsed once per version.
	Ledgers *vmledger.Cache
}

// watchSpacing is the least time between two looks of the watchdog at one
// plan: at 500 nodes a pass runs many times a second.
const watchSpacing = 5 * time.Second

// maxTransitionsPerPass bounds how many phase changes one reconcile makes, so
// that a pass always ends; a whole pipeline has fewer.
var maxTransitionsPerPass = 2*len(pipeline.Steps) + 2

// pass is one reconcile of one plan: the plan as the API server holds it,
// the scope whose working copy the pass changes, and what follows the
// status write.
type pass struct {
	r *PlanReconciler
	// stored is the plan as last read or written: the status patch is
	// computed from it, under its resourceVersion.
	stored *v1beta1.UpgradePlan
	s      *phase.Scope
	// facts are what the mode was decided on.
	facts pipeline.Facts
	// release: the cleanup is done; the finalizer goes once the status is
	// written.
	release bool
}

// Reconcile implements reconcile.Reconciler. It decides the pass's mode in
// one place (pipeline.Decide), runs it, and writes the plan's status once,
// at the end, only when it changed.
func (r *PlanReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	// The cache's own copy, not a deep copy: plan is only read (a pass
	// works on s.Plan), and a plan holds an entry per node.
	plan := &v1beta1.UpgradePlan{}
	if err := r.Client.Get(ctx, req.NamespacedName, plan, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.Forget(req.Name) // the plan is gone: so are its series
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	plan = r.Plans.Latest(plan)
	facts := pipeline.Facts{Now: r.Clock.Now()}
	if plan.AbortRequested() {
		for _, st := range plan.Status.NodeUpgradeStatuses {
			facts.NodeUnderWay = facts.NodeUnderWay || nodestate.UnderWay(st.State)
		}
	}
	if pipeline.WaitsForSlot(plan) {
		if facts.SlotHolder, err = r.slotHolder(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}
	p := &pass{r: r, stored: plan, facts: facts, s: &phase.Scope{
		Client: r.Client, APIReader: r.APIReader, Kube: r.Kube,
		Clock: r.Clock, Config: r.Config, Log: log.FromContext(ctx), PlanProgress: r.PlanProgress, Kept: r.Kept, Ledgers: r.Ledgers,
	}}
	p.s.SetWorkingCopy(plan)
	defer func() { res, err = p.writeStatus(ctx, res, err) }()

	switch d := pipeline.Decide(plan, facts); d.Mode {
	case pipeline.AwaitRetry:
		return ctrl.Result{RequeueAfter: d.RetryIn}, nil
	case pipeline.Retry:
		return p.retry(ctx)
	case pipeline.Finish:
		return p.finish(ctx, d.RetryExpired)
	case pipeline.DryRun:
		return p.dryRun(ctx)
	case pipeline.Queued:
		p.setQueued(d.Holder)
		return ctrl.Result{}, nil
	case pipeline.Abort:
		p.abort()
		return ctrl.Result{}, nil
	default:
		// Run, and Paused, which holds at its safe point: the run says
		// where.
		return p.run(ctx)
	}
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

// writeStatus ends a pass: it writes the working copy's status if it
// changed, with optimistic locking so that a pass that decided on a stale
// plan cannot win, records the pass's events once the write succeeded, and
// then releases a plan whose cleanup is done. The patch carries only what
// changed (planstatus).
func (p *pass) writeStatus(ctx context.Context, res ctrl.Result, runErr error) (ctrl.Result, error) {
	wrote, err := p.r.Plans.WriteStatus(ctx, p.stored, p.s.Plan)
	if err != nil {
		return requeueOnConflict(err)
	}
	if wrote {
		metrics.Record(p.stored, p.s.Plan)
	}
	for _, e := range p.s.Events {
		p.r.Recorder.Event(p.s.Plan, e.Type, e.Reason, e.Message)
	}
	if p.release {
		return p.removeFinalizer(ctx)
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

// conflictsReported is how many passes in a row may lose a write race
// before the plan reports it as Degraded. A step's write races the
// components that write the same objects (system-upgrade-controller writes
// its Plan's status many times a second at 500 nodes while the image
// cleanup widens its selector): the next pass reads again and wins, and a
// Degraded condition with a Warning event for that would cry wolf; a race
// lost pass after pass is something fighting the toolkit, and is named.
const conflictsReported = 5

// quietConflict says whether the pass's error is a lost write race to
// retry without a word; any other outcome ends the streak.
func (p *pass) quietConflict(err error) bool {
	name := p.s.Plan.Name
	if !apierrors.IsConflict(err) {
		p.r.conflicts.Delete(name)
		return false
	}
	n, _ := p.r.conflicts.Load(name)
	streak, _ := n.(int)
	streak++
	p.r.conflicts.Store(name, streak)
	return streak < conflictsReported
}

// run moves the plan through the pipeline. The finalizer goes on before the
// plan creates or changes anything, so that whatever it does is undone even
// if it is deleted right away.
func (p *pass) run(ctx context.Context) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(p.stored, v1beta1.FinalizerCleanup) {
		before := p.stored
		after := before.DeepCopy()
		controllerutil.AddFinalizer(after, v1beta1.FinalizerCleanup)
		if err := p.r.Client.Patch(ctx, after, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return requeueOnConflict(err)
		}
		p.stored = after
		p.s.Plan.ObjectMeta = *after.ObjectMeta.DeepCopy()
	}
	// Before the phases: their deadlines leave out the time paused.
	if !p.s.Plan.Status.CurrentPhase.IsTerminal() {
		pipeline.RecordPause(&p.s.Plan.Status, p.s.Plan.IsPaused(), p.s.Now())
	}
	res, runErr := p.runPipeline(ctx)
	if p.quietConflict(runErr) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	p.setConditions(res, runErr)
	if runErr != nil {
		return ctrl.Result{RequeueAfter: res.RequeueAfter}, runErr
	}
	next, err := p.watch(ctx)
	return ctrl.Result{RequeueAfter: sooner(res.RequeueAfter, next)}, err
}

// watch runs the watchdog on a running plan (phase.Watch), at most once per
// watchSpacing, and says when to look again; a plan that ended keeps no
// insight of its run but those of its failure.
func (p *pass) watch(ctx context.Context) (time.Duration, error) {
	st := &p.s.Plan.Status
	if st.CurrentPhase.IsTerminal() || st.CurrentPhase == "" {
		p.r.watched.Delete(p.s.Plan.Name)
		if st.CurrentPhase == v1beta1.PhaseSucceeded {
			st.Insights = nil
			meta.RemoveStatusCondition(&st.Conditions, v1beta1.ConditionStalled)
		}
		return 0, nil
	}
	// Real time, not the plan's clock: the spacing spares CPU.
	now := time.Now()
	if last, ok := p.r.watched.Load(p.s.Plan.Name); ok {
		if wait := watchSpacing - now.Sub(last.(time.Time)); wait > 0 {
			return wait, nil
		}
	}
	var plans v1beta1.UpgradePlanList
	if err := p.r.Client.List(ctx, &plans, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing UpgradePlans for the estimate: %w", err)
	}
	next, err := phase.Watch(ctx, p.s, status.Previous(plans.Items, p.s.Plan.Name))
	if err == nil {
		p.r.watched.Store(p.s.Plan.Name, now)
	}
	return next, err
}

// sooner is the earlier of two requeue delays, 0 meaning none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// runPipeline moves the plan through as many phases as it can in one pass.
// Between two phases it asks for the mode again: a plan paused while a
// phase was under way holds here.
func (p *pass) runPipeline(ctx context.Context) (phase.Result, error) {
	s := p.s
	st := &s.Plan.Status
	moved := false
	for range maxTransitionsPerPass {
		current := st.CurrentPhase
		if current.IsTerminal() {
			return phase.Result{}, nil
		}
		pos, located := pipeline.Locate(current)
		if current != "" && !located {
			p.fail(phase.FailFinal("the plan is in the unknown phase %q", current))
			return phase.Result{}, nil
		}
		if located && pos.Active {
			step, ph := pipeline.Steps[pos.Index], p.r.Phases[pos.Index]
			if res, err := ph.Run(log.IntoContext(ctx, s.Log.WithValues("phase", ph.Name())), s); !p.done(res, err) {
				return res, err
			}
			pipeline.SetPhase(st, step.Completed, s.Now())
			moved = true
			s.Event(corev1.EventTypeNormal, v1beta1.EventPhaseCompleted, "Completed phase %s", step.Name)
			continue
		}
		next, _ := pipeline.Next(current)
		switch pipeline.Decide(s.Plan, p.facts).Mode {
		case pipeline.Paused:
			return phase.Hold("paused (spec.paused) before %s; set spec.paused to false to resume", stepName(next)), nil
		case pipeline.Abort:
			p.abort()
			return phase.Result{}, nil
		}
		if next == v1beta1.PhaseSucceeded {
			if moved {
				// The final step deletes the plan's Jobs, the evidence of
				// the last phase: it runs only once the end of that phase
				// is recorded. The status write brings the next pass.
				return phase.Result{}, nil
			}
			// The plan says Succeeded only once the cluster shows it.
			if res, err := phase.Finalize(log.IntoContext(ctx, s.Log.WithValues("phase", phase.GateFinal)), s); !p.done(res, err) {
				return res, err
			}
			pipeline.SetPhase(st, v1beta1.PhaseSucceeded, s.Now())
			if excluded := s.Plan.ExcludedNodes(); len(excluded) > 0 {
				s.Event(corev1.EventTypeNormal, v1beta1.EventUpgradeSucceeded, "Upgrade completed on every node but %s, excluded while down (condition %s)",
					strings.Join(excluded, ", "), v1beta1.ConditionNodesExcluded)
			} else {
				s.Event(corev1.EventTypeNormal, v1beta1.EventUpgradeSucceeded, "Upgrade completed successfully")
			}
			return phase.Result{}, nil
		}
		nextPos, _ := pipeline.Locate(next)
		if g, ok := p.r.Phases[nextPos.Index].(phase.Gate); ok {
			if msg := g.Gate(s); msg != "" {
				p.fail(phase.FailFinal("%s", msg))
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
func (p *pass) done(res phase.Result, err error) bool {
	if err == nil && res.Failure != "" {
		p.fail(res)
		return false
	}
	return err == nil && res.Done
}

// fail moves the plan to Failed, records the failure in its history and
// keeps the reason in the Progressing condition. A failure a retry can cure
// says how to retry, and until when.
func (p *pass) fail(res phase.Result) {
	s := p.s
	st := &s.Plan.Status
	f := v1beta1.Failure{Phase: st.CurrentPhase, Message: res.Failure, FailedAt: metav1.NewTime(s.Now())}
	msg := res.Failure
	if !res.Final && p.r.Config.RetryWindow > 0 {
		until := metav1.NewTime(s.Now().Add(p.r.Config.RetryWindow))
		f.RetryDeadline = &until
		msg += "; " + status.RetryHint(s.Plan.Name, until.Time)
	}
	st.Failures = append(st.Failures, f)
	// A retry is asked for by a value set after the failure.
	st.ObservedRetry = s.Plan.Annotations[v1beta1.AnnotationRetry]
	pipeline.SetPhase(st, v1beta1.PhaseFailed, s.Now())
	p.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonFailed, msg)
	s.Event(corev1.EventTypeWarning, v1beta1.EventUpgradeFailed, "Upgrade failed: %s", msg)
}

// retry takes a plan that failed for a reason a retry can cure back to the
// failed step, once what would fail it again at once is gone.
func (p *pass) retry(ctx context.Context) (ctrl.Result, error) {
	s := p.s
	res, err := phase.PrepareRetry(ctx, s)
	if err != nil || !res.Done {
		if err == nil {
			s.Log.Info("retry waiting", "for", res.Waiting)
		}
		p.setDegraded(err, "")
		return ctrl.Result{RequeueAfter: res.RequeueAfter}, err
	}
	failed := *p.stored.LastFailure()
	retry := p.stored.RetryRequested()
	if err := phase.Resume(ctx, s, retry); err != nil {
		return ctrl.Result{}, err
	}
	s.Event(corev1.EventTypeNormal, v1beta1.EventUpgradeRetried, "Retrying from phase %s (retry %q), after: %s", failed.Phase, retry, failed.Message)
	p.setConditions(phase.Wait("retrying from phase %s", failed.Phase), nil)
	return ctrl.Result{}, nil
}

// finish cleans up after a plan that reached a terminal phase, is being
// deleted or was not retried in time, and records what it restored; once
// the cleanup is done, the status write releases the plan (its finalizer
// goes).
func (p *pass) finish(ctx context.Context, retryExpired bool) (ctrl.Result, error) {
	plan, s := p.stored, p.s
	if !controllerutil.ContainsFinalizer(plan, v1beta1.FinalizerCleanup) {
		return ctrl.Result{}, nil
	}
	// The cache may not show yet that the finalizer is gone (an event of the
	// cleanup's own deletions can bring a pass here first): ask the API
	// server, so that a plan is cleaned up and released once.
	fresh := &v1beta1.UpgradePlan{}
	if err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(plan), fresh); err != nil || !controllerutil.ContainsFinalizer(fresh, v1beta1.FinalizerCleanup) {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if retryExpired {
		until := plan.LastFailure().RetryDeadline.Time
		p.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonFailed,
			fmt.Sprintf("%s; not retried by %s: what the plan made and changed is cleaned up", plan.LastFailure().Message, until.UTC().Format(time.RFC3339)))
	}
	res, err := phase.Cleanup(ctx, s)
	p.setDegraded(err, "")
	if err == nil && !res.Done {
		// The plan's conditions stay as the upgrade ended; what holds the
		// finalizer goes to the log.
		s.Log.Info("cleanup waiting", "for", res.Waiting)
	}
	p.release = err == nil && res.Done
	return ctrl.Result{RequeueAfter: res.RequeueAfter}, err
}

// removeFinalizer releases the plan. The working copy carries the
// resourceVersion of the status write, if any.
func (p *pass) removeFinalizer(ctx context.Context) (ctrl.Result, error) {
	before := p.s.Plan.DeepCopy()
	controllerutil.RemoveFinalizer(p.s.Plan, v1beta1.FinalizerCleanup)
	if err := p.r.Client.Patch(ctx, p.s.Plan, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return requeueOnConflict(err)
	}
	return ctrl.Result{}, nil
}

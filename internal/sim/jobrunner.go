package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// JobWork is what a Job's container does: it returns nil when the work is
// done (the Job completes) or an error when it failed (the Job fails). It runs
// in its own goroutine while the Job is active and must return when ctx ends
// (the Job was suspended or deleted, or the simulator stops). The simulator
// has one per job type; Config.JobWork replaces them, e.g. with the real job
// command run in-process (JobEnv gives the environment its pod would have).
type JobWork func(ctx context.Context, job *batchv1.Job) error

// The Job controller's failure reasons and messages (Kubernetes 1.34).
const (
	reasonBackoffLimit      = "BackoffLimitExceeded"
	messageBackoffLimit     = "Job has reached the specified backoff limit"
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Job was active longer than specified deadline"
)

// jobRunner plays the Job controller and the Jobs' pods: it runs each active
// Job's work and writes the Job's status the way kube-controller-manager's
// Job controller does, so that the API server's status validation accepts
// it: startTime, active and ready while running (Suspended while suspended),
// then SuccessCriteriaMet and Complete with completionTime, or FailureTarget
// and Failed (written by cluster.MarkJobSucceeded and MarkJobFailed).
type jobRunner struct {
	s     *Sim
	works map[string]JobWork
	wake  chan event.GenericEvent

	mu    sync.Mutex
	runs  map[types.UID]*jobRun
	byKey map[types.NamespacedName]types.UID
}

// jobRun is one Job's work in flight.
type jobRun struct {
	key    types.NamespacedName
	cancel context.CancelFunc
	done   bool
	err    error
}

// jobFailure is a failure of a Job's work, with the Job condition reason it
// ends with.
type jobFailure struct {
	reason, message string
}

func (e *jobFailure) Error() string { return e.message }

func (s *Sim) setupJobRunner(mgr ctrl.Manager) error {
	r := &jobRunner{s: s, works: s.defaultJobWorks(), wake: make(chan event.GenericEvent, 1024),
		runs: map[types.UID]*jobRun{}, byKey: map[types.NamespacedName]types.UID{}}
	if s.cfg.RealJobs {
		maps.Copy(r.works, s.realJobWorks())
	}
	for t, w := range s.cfg.JobWork {
		r.works[t] = w
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-job-runner").
		For(&batchv1.Job{}).
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// jobType is a Job's type: its job-type label, else its upgrade-component
// label ("" for Jobs that are not the toolkit's).
func jobType(job *batchv1.Job) string {
	if t := job.Labels[v1beta1.LabelJobType]; t != "" {
		return t
	}
	return job.Labels[v1beta1.LabelUpgradeComponent]
}

// jobNode is the node a Job works on, "" for cluster-wide Jobs.
func jobNode(job *batchv1.Job) string {
	if n := job.Labels[v1beta1.LabelNode]; n != "" {
		return n
	}
	return job.Labels[cluster.LabelSUCNode]
}

// JobEnv returns the environment the Job's first container would see, with
// the downward-API values (node and pod name) resolved as its pod would have
// them.
func JobEnv(job *batchv1.Job) map[string]string {
	env := map[string]string{}
	if cs := job.Spec.Template.Spec.Containers; len(cs) > 0 {
		for _, e := range cs[0].Env {
			switch {
			case e.ValueFrom == nil:
				env[e.Name] = e.Value
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
				env[e.Name] = jobNode(job)
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
				env[e.Name] = podName(job)
			}
		}
	}
	return env
}

// podName is the name the Job's pod would have.
func podName(job *batchv1.Job) string { return job.Name + "-sim00" }

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func (r *jobRunner) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	job := &batchv1.Job{}
	if err := r.s.c.Get(ctx, req.NamespacedName, job); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	jt := jobType(job)
	if jt == "" || job.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	now := metav1.Now()
	switch {
	case jobCondition(job, batchv1.JobComplete) || jobCondition(job, batchv1.JobFailed):
		r.stop(job.UID)
		return reconcile.Result{}, nil
	case ptr.Deref(job.Spec.Suspend, false):
		r.stop(job.UID)
		return reconcile.Result{}, r.suspend(ctx, job, now)
	case ptr.Deref(job.Spec.Parallelism, 1) == 0:
		return reconcile.Result{}, nil
	}
	if changed := markRunning(job, now); changed {
		// Start the work once the API server knows the Job runs.
		return reconcile.Result{}, r.s.c.Status().Update(ctx, job)
	}
	run := r.start(job, jt)
	r.mu.Lock()
	done, err := run.done, run.err
	r.mu.Unlock()
	if !done {
		return reconcile.Result{}, nil
	}
	// The pod is gone: nothing is ready or terminating any more.
	job.Status.Ready, job.Status.Terminating = ptr.To[int32](0), ptr.To[int32](0)
	if err == nil {
		cluster.MarkJobSucceeded(job, now)
		return reconcile.Result{}, r.s.c.Status().Update(ctx, job)
	}
	reason, message := reasonBackoffLimit, messageBackoffLimit
	var jf *jobFailure
	if errors.As(err, &jf) && jf.reason == reasonDeadlineExceeded {
		reason, message = reasonDeadlineExceeded, messageDeadlineExceeded
	}
	r.s.log.Info("job failed", "job", req.NamespacedName, "type", jt, "node", jobNode(job), "error", err.Error())
	cluster.MarkJobFailed(job, reason, message, now)
	return reconcile.Result{}, r.s.c.Status().Update(ctx, job)
}

// markRunning sets the status of a Job whose pod runs; it reports whether
// anything changed. A Job resumed from suspension restarts its clock.
func markRunning(job *batchv1.Job, now metav1.Time) bool {
	changed := false
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if c.Type == batchv1.JobSuspended && c.Status == corev1.ConditionTrue {
			*c = batchv1.JobCondition{Type: batchv1.JobSuspended, Status: corev1.ConditionFalse, Reason: "JobResumed", Message: "Job resumed", LastProbeTime: now, LastTransitionTime: now}
			job.Status.StartTime = &now
			changed = true
		}
	}
	if job.Status.StartTime == nil {
		job.Status.StartTime = &now
		changed = true
	}
	if job.Status.Active != 1 || ptr.Deref(job.Status.Ready, 0) != 1 {
		job.Status.Active, job.Status.Ready, job.Status.Terminating = 1, ptr.To[int32](1), ptr.To[int32](0)
		job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
		changed = true
	}
	return changed
}

// suspend writes the status of a suspended Job: no pod, Suspended=True.
func (r *jobRunner) suspend(ctx context.Context, job *batchv1.Job, now metav1.Time) error {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobSuspended && c.Status == corev1.ConditionTrue && job.Status.Active == 0 {
			return nil
		}
	}
	job.Status.Active, job.Status.Ready = 0, ptr.To[int32](0)
	cond := batchv1.JobCondition{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue, Reason: "JobSuspended", Message: "Job suspended", LastProbeTime: now, LastTransitionTime: now}
	replaced := false
	for i := range job.Status.Conditions {
		if job.Status.Conditions[i].Type == batchv1.JobSuspended {
			job.Status.Conditions[i], replaced = cond, true
		}
	}
	if !replaced {
		job.Status.Conditions = append(job.Status.Conditions, cond)
	}
	return r.s.c.Status().Update(ctx, job)
}

// start runs the Job's work unless it already runs. The work lasts at least
// the job type's duration; an injected fault replaces it.
func (r *jobRunner) start(job *batchv1.Job, jt string) *jobRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	if run, ok := r.runs[job.UID]; ok {
		return run
	}
	ctx, cancel := context.WithCancel(r.s.runCtx)
	run := &jobRun{key: client.ObjectKeyFromObject(job), cancel: cancel}
	r.runs[job.UID] = run
	r.byKey[run.key] = job.UID
	snapshot := job.DeepCopy()
	work := r.works[jt]
	go func() {
		begin := time.Now()
		var err error
		switch f := r.s.faults.job(jt, jobNode(snapshot)); {
		case f != nil:
			err = &jobFailure{reason: f.Reason, message: fmt.Sprintf("injected fault: %s", f.Message)}
		case r.s.faults.emptyJob(jt, jobNode(snapshot)):
			r.s.log.Info("job exits 0 having done nothing (injected fault)", "job", run.key, "type", jt)
		case work != nil:
			err = work(ctx, snapshot)
		}
		if !sleepCtx(ctx, r.s.cfg.Timing.job(jt)-time.Since(begin)) {
			return
		}
		r.mu.Lock()
		run.done, run.err = true, err
		r.mu.Unlock()
		select {
		case r.wake <- event.GenericEvent{Object: snapshot}:
		case <-ctx.Done():
		}
	}()
	return run
}

// stop cancels a Job's work.
func (r *jobRunner) stop(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if run, ok := r.runs[uid]; ok {
		run.cancel()
		delete(r.runs, uid)
		delete(r.byKey, run.key)
	}
}

// forget cancels the work of a deleted Job.
func (r *jobRunner) forget(key types.NamespacedName) {
	r.mu.Lock()
	uid, ok := r.byKey[key]
	r.mu.Unlock()
	if ok {
		r.stop(uid)
	}
}

// sleepCtx waits d (nothing when d <= 0) and reports whether ctx is still
// alive.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return ctx.Err() == nil
}

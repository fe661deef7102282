package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// JobWork is what a Job's container does: it returns nil when the work is
// done (the container exits 0) or an error when it failed (the container
// exits 1 with the error as its termination message). It runs in its own
// goroutine while the pod runs and must return when ctx ends (the pod was
// deleted, or the simulator stops). The simulator runs the toolkit's own
// job code for each job type (see jobWorks); Config.JobWork replaces it
// (JobEnv gives the environment of the pod).
type JobWork func(ctx context.Context, pod *corev1.Pod) error

// podRunner plays the main process of the Jobs' pods. The real Job
// controller creates the pods, the real scheduler places them and kwok, as
// the node's kubelet, starts them; for a running pod of a known job type the
// runner runs the job's work in-process and, when it ends, ends the
// container: it sets testenv.AnnotationExitCode (and the termination
// message) on the pod, which kwok reports as the container's termination
// and the real Job controller turns into the Job's outcome (retries, backoff
// limit, deadline).
type podRunner struct {
	s     *Sim
	works map[string]JobWork

	mu    sync.Mutex
	runs  map[types.UID]context.CancelFunc
	byKey map[types.NamespacedName]types.UID
}

func (s *Sim) setupJobRunner(mgr ctrl.Manager) error {
	r := &podRunner{s: s, works: s.jobWorks(), runs: map[types.UID]context.CancelFunc{}, byKey: map[types.NamespacedName]types.UID{}}
	for t, w := range s.cfg.JobWork {
		r.works[t] = w
	}
	jobPods := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[batchv1.JobNameLabel] != "" })
	return ctrl.NewControllerManagedBy(mgr).Named("sim-pod-runner").
		For(&corev1.Pod{}, builder.WithPredicates(jobPods)).
		Complete(r)
}

// jobType is the type of a Job's pod: its job-type label, else its
// upgrade-component label (cluster-upgrade, and the image-preload and
// image-cleanup SUC Jobs, which carry their Plan's labels); "" for pods that
// are not the toolkit's.
func jobType(pod *corev1.Pod) string {
	if t := pod.Labels[v1beta1.LabelJobType]; t != "" {
		return t
	}
	return pod.Labels[v1beta1.LabelUpgradeComponent]
}

// JobEnv returns the environment the pod's first container sees, with the
// downward-API values (node and pod name) resolved.
func JobEnv(pod *corev1.Pod) map[string]string {
	env := map[string]string{}
	if cs := pod.Spec.Containers; len(cs) > 0 {
		for _, e := range cs[0].Env {
			switch {
			case e.ValueFrom == nil:
				env[e.Name] = e.Value
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
				env[e.Name] = pod.Spec.NodeName
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
				env[e.Name] = pod.Name
			}
		}
	}
	return env
}

// jobOfPod is namespace/name of the pod's Job.
func jobOfPod(pod *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: pod.Namespace, Name: pod.Labels[batchv1.JobNameLabel]}
}

func running(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil && pod.Spec.NodeName != ""
}

func (r *podRunner) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := r.s.c.Get(ctx, req.NamespacedName, pod); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.forget(req.NamespacedName)
			// The kubelet forgets a pod whose object is gone, and its log.
			r.s.podLogs.remove(req.Namespace, req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	jt := jobType(pod)
	if jt == "" {
		return reconcile.Result{}, nil
	}
	if !running(pod) || pod.Annotations[testenv.AnnotationExitCode] != "" {
		// Stopped (deleted by the Job controller at its deadline, evicted,
		// or its node went away) or finished: the process is gone.
		r.stop(pod.UID, req.NamespacedName)
		return reconcile.Result{}, nil
	}
	r.start(pod, jt)
	return reconcile.Result{}, nil
}

// start runs the pod's work unless it already runs. The work lasts at least
// the job type's duration; an injected fault replaces it.
func (r *podRunner) start(pod *corev1.Pod, jt string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.runs[pod.UID]; ok {
		return
	}
	ctx, cancel := context.WithCancel(r.s.runCtx)
	// What the work logs is the container's log, served (empty) from the
	// container's start.
	key := client.ObjectKeyFromObject(pod)
	r.s.podLogs.start(key.Namespace, key.Name)
	ctx = log.IntoContext(ctx, r.s.podLogs.logger(pod))
	r.runs[pod.UID], r.byKey[key] = cancel, pod.UID
	snapshot := pod.DeepCopy()
	work := r.works[jt]
	go func() {
		// However the process ends, its log is complete.
		defer r.s.podLogs.end(key.Namespace, key.Name)
		begin := time.Now()
		var err error
		code := int32(1)
		if f := r.s.faults.job(jt, snapshot.Spec.NodeName); f != nil {
			err = r.s.fault(ctx, f)
			if f.ExitCode != 0 {
				code = f.ExitCode
			}
		} else if r.s.faults.emptyJob(jt, snapshot.Spec.NodeName) {
			// The lie: the process exits 0 having done nothing.
			log.FromContext(ctx).Info("the job did nothing (sim fault EmptyJobs)")
		} else if work != nil {
			// As the job command ends: with its error's exit code.
			if err = work(ctx, snapshot); err != nil {
				code = int32(jobspec.ExitCodeOf(err)) //nolint:gosec // small exit codes
			}
		}
		if !sleepCtx(ctx, r.s.faults.jobTime(r.s.cfg.Timing, jt, snapshot.Spec.NodeName)-time.Since(begin)) {
			return
		}
		if err != nil {
			// As the job commands end: the error, last in the log.
			log.FromContext(ctx).Error(err, "the job failed")
			r.s.log.Info("job failed", "pod", key, "type", jt, "node", snapshot.Spec.NodeName, "error", err.Error())
		}
		if err := r.s.exit(ctx, snapshot, code, err); err != nil {
			r.s.log.Error(err, "ending the container", "pod", key)
		}
	}()
}

// fault plays an injected job fault: the process fails at once, or, for a
// fault that must end at the Job's deadline, never returns until the Job
// controller stops the pod.
func (s *Sim) fault(ctx context.Context, f *JobFault) error {
	if f.Reason == reasonDeadlineExceeded {
		<-ctx.Done()
		return ctx.Err()
	}
	return fmt.Errorf("injected fault: %s", f.Message)
}

// exit ends the pod's container with the work's outcome, as its process
// exiting would: exit code 0, or failCode with the error as termination
// message.
func (s *Sim) exit(ctx context.Context, pod *corev1.Pod, failCode int32, workErr error) error {
	code, message := int32(0), ""
	if workErr != nil {
		code, message = failCode, workErr.Error()
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		testenv.AnnotationExitCode: strconv.Itoa(int(code)), testenv.AnnotationTerminationMessage: message,
	}}})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(s.c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)))
}

// stop cancels a pod's work.
func (r *podRunner) stop(uid types.UID, key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cancel, ok := r.runs[uid]; ok {
		cancel()
		delete(r.runs, uid)
		delete(r.byKey, key)
	}
}

// forget cancels the work of a deleted pod.
func (r *podRunner) forget(key types.NamespacedName) {
	r.mu.Lock()
	uid, ok := r.byKey[key]
	r.mu.Unlock()
	if ok {
		r.stop(uid, key)
	}
}

// The Job controller's failure reason for a Job past its deadline.
const reasonDeadlineExceeded = "DeadlineExceeded"

// jobComplete reports whether the Job has completed. A Job that is gone
// never will.
func (s *Sim) jobComplete(ctx context.Context, key types.NamespacedName) (bool, error) {
	job := &batchv1.Job{}
	if err := s.c.Get(ctx, key, job); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return jobCondition(job, batchv1.JobComplete), nil
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
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

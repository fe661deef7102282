package phase

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// JobState is where a Job stands.
type JobState int

// The Job states.
const (
	JobPending JobState = iota
	JobRunning
	JobSuspended
	JobSucceeded
	JobFailed
)

// JobOutcome reads a Job's state from its status; for a failed Job, reason
// and message are those of its Failed condition.
func JobOutcome(j *batchv1.Job) (state JobState, reason, message string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return JobSucceeded, c.Reason, c.Message
		case batchv1.JobFailed:
			return JobFailed, c.Reason, c.Message
		}
	}
	switch {
	case ptr.Deref(j.Spec.Suspend, false):
		return JobSuspended, "", ""
	case j.Status.Active > 0 || j.Status.StartTime != nil:
		return JobRunning, "", ""
	}
	return JobPending, "", ""
}

// jobTTL keeps finished Jobs, and their logs, for a week.
const jobTTL = 7 * 24 * 3600

// JobSpec is what a toolkit Job runs.
type JobSpec struct {
	Name      string
	Component string
	// Labels are added to the Job and its pod on top of the plan's labels.
	Labels map[string]string
	// Node is the node the pod must run on; empty lets the scheduler
	// choose.
	Node string
	// Privileged runs the container privileged with the host's PID
	// namespace and root file system at /host.
	Privileged bool
	Command    []string
	Env        []corev1.EnvVar
	// Suspend creates the Job suspended.
	Suspend bool
	// BackoffLimit is how often a failed pod is retried.
	BackoffLimit int32
	// DeadlineSeconds bounds the Job's run time.
	DeadlineSeconds int64
	// ServiceAccount runs the Job; empty means Config.JobServiceAccount.
	ServiceAccount string
}

// newJob builds a Job in harvester-system running the toolkit image.
func (s *Scope) newJob(js JobSpec) *batchv1.Job {
	labels := Labels(s.Plan.Name, js.Component)
	for k, v := range js.Labels {
		labels[k] = v
	}
	c := corev1.Container{
		Name:            names.JobContainer,
		Image:           s.Config.Toolkit(s.Plan).Image(images.AfterImport),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         js.Command,
		Env:             append([]corev1.EnvVar{jobspec.PlanEnv(s.Plan.Name)}, js.Env...),
		// The jobs run upgrade tools that need root inside the container.
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)},
	}
	sa := js.ServiceAccount
	if sa == "" {
		sa = s.Config.JobServiceAccount
	}
	pod := corev1.PodSpec{
		RestartPolicy:      corev1.RestartPolicyNever,
		ServiceAccountName: sa,
		Tolerations:        cluster.UpgradeTolerations(),
		Affinity:           cluster.OnNode(js.Node),
		Containers:         []corev1.Container{c},
	}
	if js.Privileged {
		pod.HostPID = true
		pod.Containers[0].SecurityContext.Privileged = ptr.To(true)
		pod.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host-root", MountPath: "/host"}}
		pod.Volumes = []corev1.Volume{{Name: "host-root", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: "/", Type: ptr.To(corev1.HostPathDirectory)},
		}}}
	}
	var finalizers []string
	if s.Config.UpgradeLog && s.Plan.LogCaptureEnabled(true) {
		// Held until its log is captured to the end, even when deleted
		// at once (TTL, cleanup).
		finalizers = []string{v1beta1.FinalizerLogCapture}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: js.Name, Labels: labels},
		Spec: batchv1.JobSpec{
			Suspend:                 ptr.To(js.Suspend),
			BackoffLimit:            ptr.To(js.BackoffLimit),
			PodFailurePolicy:        jobFailurePolicy(),
			ActiveDeadlineSeconds:   ptr.To(js.DeadlineSeconds),
			TTLSecondsAfterFinished: ptr.To[int32](jobTTL),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Finalizers: finalizers},
				Spec:       pod,
			},
		},
	}
}

// jobFailurePolicy has the Job controller fail a Job at once when its
// command failed for good (jobspec.PermanentExitCodes), instead of retrying it with growing backoff up
// to the backoff limit; and not count a pod that was disrupted (evicted by a
// drain or a taint, preempted) against the limit.
func jobFailurePolicy() *batchv1.PodFailurePolicy {
	return &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: ptr.To(names.JobContainer), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: jobspec.PermanentExitCodes(),
		}},
		{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue},
		}},
	}}
}

// logTail is how many lines of a failed Job's log a failure message quotes.
const logTail = 10

// jobFailure describes a failed Job for the plan's failure message: what
// failed, the Job's own reason, the last lines of its log when the API
// offers them, and where to look.
func (s *Scope) jobFailure(ctx context.Context, what string, j *batchv1.Job, reason, message string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: Job %s/%s failed", what, j.Namespace, j.Name)
	if reason != "" || message != "" {
		fmt.Fprintf(&b, " (%s: %s)", reason, message)
	}
	if why := s.unscheduled(ctx, j); why != "" {
		fmt.Fprintf(&b, "; %s", why)
	} else if logs := s.lastLogLines(ctx, j); logs != "" {
		fmt.Fprintf(&b, "; last log lines:\n%s", logs)
	} else if why := s.wasUnscheduled(ctx, j); why != "" {
		fmt.Fprintf(&b, "; %s", why)
	}
	fmt.Fprintf(&b, "\nsee `kubectl -n %s logs job/%s` for the whole log", j.Namespace, j.Name)
	return b.String()
}

// The toolkit's Jobs run in harvester-system, those of
// system-upgrade-controller's Plans in cattle-system.
//
// (Listing pods is granted everywhere for the watchdog, watch.go.)
//
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=pods/log,verbs=get
// +kubebuilder:rbac:groups="",namespace=cattle-system,resources=pods/log,verbs=get

// unschedulableMark is what unscheduled says of a pod the scheduler cannot
// place.
const unschedulableMark = "cannot be scheduled on"

// unscheduled says why the Job's pod does not run, when the scheduler
// cannot place it ("" when it runs, or the Job has no pod to ask about):
// which node it must run on and the scheduler's reason, e.g. a taint it does
// not tolerate. A Job whose pod never runs fails only at its deadline; this
// says why in the meantime, and in the failure.
func (s *Scope) unscheduled(ctx context.Context, j *batchv1.Job) string {
	if ptr.Deref(j.Status.Ready, 0) > 0 || j.Status.Succeeded > 0 {
		return ""
	}
	// The manager's cache holds the plan's pods that have not ended (their
	// scheduling condition kept): a look every pass costs no request. A
	// namespace it does not hold is asked of the API server.
	var pods corev1.PodList
	if err := s.Client.List(ctx, &pods, client.InNamespace(j.Namespace), client.MatchingLabels{batchv1.JobNameLabel: j.Name}); err != nil {
		if s.Kube == nil {
			return ""
		}
		list, err := s.Kube.CoreV1().Pods(j.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: batchv1.JobNameLabel + "=" + j.Name,
		})
		if err != nil {
			return ""
		}
		pods = *list
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return unschedulable(j, p.Name, c.Message)
			}
		}
	}
	return ""
}

// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=events,verbs=list
// +kubebuilder:rbac:groups="",namespace=cattle-system,resources=events,verbs=list

// wasUnscheduled says why the Job's pod did not run once it is gone (the
// Job controller deletes it when the Job's deadline passes, before the
// failure is seen): the scheduler's last FailedScheduling event of a pod
// of the Job, "" when there is none.
func (s *Scope) wasUnscheduled(ctx context.Context, j *batchv1.Job) string {
	if s.Kube == nil {
		return ""
	}
	events, err := s.Kube.CoreV1().Events(j.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,reason=FailedScheduling",
	})
	if err != nil {
		return ""
	}
	var last *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if strings.HasPrefix(e.InvolvedObject.Name, j.Name+"-") && (last == nil || eventTime(e).After(eventTime(last))) {
			last = e
		}
	}
	if last == nil {
		return ""
	}
	return unschedulable(j, last.InvolvedObject.Name, last.Message)
}

// unschedulable says that the Job's pod cannot be placed where the Job
// wants it, with the scheduler's reason.
func unschedulable(j *batchv1.Job, pod, reason string) string {
	where := "any node"
	if node := j.Labels[v1beta1.LabelNode]; node != "" {
		where = "node " + node
	}
	return fmt.Sprintf("its pod %s %s %s: %s", pod, unschedulableMark, where, reason)
}

// eventTime is when an event was last seen, whichever API wrote it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// lastLogLines returns the end of the log of the Job's newest pod, or "" when
// there is none to read.
func (s *Scope) lastLogLines(ctx context.Context, j *batchv1.Job) string {
	if s.Kube == nil {
		return ""
	}
	return LastLogLines(ctx, s.Kube, j.Namespace, j.Name)
}

// LastLogLines returns the last lines of the log of a Job's newest pod (as
// many as a failure message quotes), or "" when there is none to read.
func LastLogLines(ctx context.Context, kube kubernetes.Interface, namespace, job string) string {
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: batchv1.JobNameLabel + "=" + job,
	})
	if err != nil || len(pods.Items) == 0 {
		return ""
	}
	newest := pods.Items[0]
	for _, p := range pods.Items[1:] {
		if p.CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = p
		}
	}
	raw, err := kube.CoreV1().Pods(namespace).GetLogs(newest.Name, &corev1.PodLogOptions{
		TailLines: ptr.To[int64](logTail),
	}).DoRaw(ctx)
	if err != nil {
		return ""
	}
	return string(bytes.TrimRight(raw, "\n"))
}

// ranOn returns the node a Job's succeeded pod ran on, "" when no such pod
// is left to tell (the pods go with the Job).
func (s *Scope) ranOn(ctx context.Context, j *batchv1.Job) (string, error) {
	if s.Kube == nil {
		return "", nil
	}
	pods, err := s.Kube.CoreV1().Pods(j.Namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + j.Name})
	if err != nil {
		return "", fmt.Errorf("listing the pods of Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded {
			return p.Spec.NodeName, nil
		}
	}
	return "", nil
}

// finishedAt is when a Job finished: its completion time, else the last
// transition of its Complete or Failed condition.
func finishedAt(j *batchv1.Job) time.Time {
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime.Time
	}
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return j.CreationTimestamp.Time
}

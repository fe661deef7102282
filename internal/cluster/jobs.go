package cluster

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Job controller's status, as the API server accepts it: whoever plays
// the Job controller (the simulator, tests) writes Job status through these.

// MarkJobRunning sets a Job's status to one active pod.
func MarkJobRunning(j *batchv1.Job, now metav1.Time) {
	if j.Status.StartTime == nil {
		j.Status.StartTime = &now
	}
	j.Status.Active = 1
}

// MarkJobSucceeded sets a Job's status to completed.
func MarkJobSucceeded(j *batchv1.Job, now metav1.Time) {
	MarkJobRunning(j, now)
	j.Status.Active = 0
	j.Status.Succeeded = 1
	j.Status.CompletionTime = &now
	setJobCondition(j, batchv1.JobSuccessCriteriaMet, "CompletionsReached", "Reached expected number of succeeded pods", now)
	setJobCondition(j, batchv1.JobComplete, "CompletionsReached", "Reached expected number of succeeded pods", now)
}

// MarkJobFailed sets a Job's status to failed with a reason (e.g.
// BackoffLimitExceeded, DeadlineExceeded) and message.
func MarkJobFailed(j *batchv1.Job, reason, message string, now metav1.Time) {
	MarkJobRunning(j, now)
	j.Status.Active = 0
	j.Status.Failed++
	setJobCondition(j, batchv1.JobFailureTarget, reason, message, now)
	setJobCondition(j, batchv1.JobFailed, reason, message, now)
}

func setJobCondition(j *batchv1.Job, t batchv1.JobConditionType, reason, message string, now metav1.Time) {
	for i := range j.Status.Conditions {
		if j.Status.Conditions[i].Type == t {
			return
		}
	}
	j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{
		Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		LastProbeTime: now, LastTransitionTime: now,
	})
}

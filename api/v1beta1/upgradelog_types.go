package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UpgradeLogSpec names the plan whose logs an UpgradeLog keeps.
type UpgradeLogSpec struct {
	// UpgradePlan is the name of the UpgradePlan whose pods' logs are kept
	// here; the UpgradeLog is owned by it and goes with it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	UpgradePlan string `json:"upgradePlan"`
}

// UpgradeLogStatus lists the captured logs. The text of each is in a
// ConfigMap in harvester-system (gzip in binaryData, one key per
// container), owned by the UpgradeLog.
type UpgradeLogStatus struct {
	// Logs are the captured containers' logs, by namespace, pod and
	// container.
	// +optional
	// +listType=atomic
	Logs []CapturedLog `json:"logs,omitempty"`
	// Bytes is the size of all the kept log text, uncompressed.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// Conditions: Truncated is True when the logs reached the plan's size
	// limit and later lines were dropped; Incomplete is True when the
	// capture let pods go before their logs could be read to the end (their
	// kubelets did not answer), naming the nodes.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CapturedLog is one container's captured log.
type CapturedLog struct {
	// Namespace is the namespace of the pod the log comes from.
	Namespace string `json:"namespace"`
	// Pod is the pod the log comes from.
	Pod string `json:"pod"`
	// Container is the container's name.
	Container string `json:"container"`
	// Job is the Job that ran the pod.
	// +optional
	Job string `json:"job,omitempty"`
	// Node is the node the pod ran on.
	// +optional
	Node string `json:"node,omitempty"`
	// Component is the pod's upgrade-component label: image-preload,
	// cluster-upgrade, node-upgrade or image-cleanup.
	// +optional
	Component string `json:"component,omitempty"`
	// JobType is the pod's job-type label: pre-drain, post-drain,
	// single-node-upgrade or restore-vm.
	// +optional
	JobType string `json:"jobType,omitempty"`
	// ConfigMap is the ConfigMap in harvester-system that holds the text.
	ConfigMap string `json:"configMap"`
	// Key is the text's key in the ConfigMap's binaryData (gzip).
	Key string `json:"key"`
	// Bytes is the size of the kept text, uncompressed, the truncation
	// mark included.
	Bytes int64 `json:"bytes"`
	// Lines is the number of kept lines, the truncation mark included.
	Lines int64 `json:"lines"`
	// Complete: the container ended and its log was read to its end.
	Complete bool `json:"complete"`
	// Incomplete, when set, says why the log was let go before it was read
	// to its end: its pod was being deleted and the kubelet of its node did
	// not answer the API server's log requests. What was read is kept.
	// +optional
	Incomplete *IncompleteLog `json:"incomplete,omitempty"`
	// Truncated: lines were dropped (the container wrote more than the
	// limit); a mark line in the text says how many and where.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// FirstTimestamp is the time the kubelet gave the first line kept.
	// +optional
	FirstTimestamp *metav1.Time `json:"firstTimestamp,omitempty"`
	// LastTimestamp is the time the kubelet gave the last line kept.
	// +optional
	LastTimestamp *metav1.Time `json:"lastTimestamp,omitempty"`
}

// IncompleteLog says why a captured log is incomplete.
type IncompleteLog struct {
	// Reason is KubeletUnreachable (the API server could not reach the
	// node's kubelet), KubeletTimeout (the kubelet did not answer within
	// the capture's bound), LogNotFound (the kubelet no longer has the
	// container's log) or ReadFailed (another error, in Message).
	Reason string `json:"reason"`
	// Message is the error the API server returned for the last read.
	// +optional
	Message string `json:"message,omitempty"`
	// Since is when reading through the node's kubelet began to fail.
	Since metav1.Time `json:"since"`
}

// The reasons of an IncompleteLog.
const (
	LogKubeletUnreachable = "KubeletUnreachable"
	LogKubeletTimeout     = "KubeletTimeout"
	LogNotFound           = "LogNotFound"
	LogReadFailed         = "ReadFailed"
)

// UpgradeLog keeps the logs of the pods an UpgradePlan runs (its own Jobs
// and the system-upgrade-controller Jobs of its Plans), so that they
// outlive the pods. It is named after the plan, owned by it and removed with
// it; `upgrade-toolkit logs PLAN` reads it. A plan with spec.logEnabled
// false, or a manager started with --upgrade-log=false, has none.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName={ul,uls}
// +kubebuilder:printcolumn:name="PLAN",type=string,JSONPath=`.spec.upgradePlan`
// +kubebuilder:printcolumn:name="BYTES",type=integer,JSONPath=`.status.bytes`
// +kubebuilder:printcolumn:name="TRUNCATED",type=string,JSONPath=`.status.conditions[?(@.type=="Truncated")].status`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type UpgradeLog struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec names the plan.
	// +required
	Spec UpgradeLogSpec `json:"spec"`
	// Status lists the captured logs.
	// +optional
	Status UpgradeLogStatus `json:"status,omitempty"`
}

// UpgradeLogList is a list of UpgradeLogs.
//
// +kubebuilder:object:root=true
type UpgradeLogList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []UpgradeLog `json:"items"`
}

func init() {
	SchemeBuilder.Register(&UpgradeLog{}, &UpgradeLogList{})
}

// The upgrade log's labels, annotation, finalizer and condition.
const (
	// LabelUpgradeLog on a log ConfigMap names the plan whose log it holds.
	// It is not LabelUpgradePlan, which cleanup deletes by when the plan
	// finishes: the logs stay until the plan is deleted.
	LabelUpgradeLog = Prefix + "upgrade-log"
	// AnnotationLogState on a log ConfigMap is what the capture needs to
	// resume: per container, the kept text's layout and the last line's
	// timestamp (JSON).
	AnnotationLogState = Prefix + "upgrade-log-state"
	// FinalizerLogCapture holds a pod of the upgrade until its log was
	// captured to its end, so that a pod deleted right after it finished
	// (a Job's TTL, a cleanup) keeps its log for the capture.
	FinalizerLogCapture = Prefix + "log-capture"
	// LabelLogCaptureDone on a pod says that the capture let it go (its
	// log is kept, or there was nothing to keep it for), in the patch that
	// removes FinalizerLogCapture. The manager caches no such pod: nothing
	// it decides reads a pod whose log is done, and at hundreds of nodes
	// the finished pods would be much of what it holds.
	LabelLogCaptureDone = Prefix + "log-capture-done"
	// ConditionTruncated is True on an UpgradeLog that reached the plan's
	// size limit.
	ConditionTruncated = "Truncated"
	// ConditionIncomplete is True on an UpgradeLog some of whose logs could
	// not be read to their end (IncompleteLog), and names their nodes.
	ConditionIncomplete = "Incomplete"
)

// LogCaptureEnabled reports whether the plan's logs are captured: its
// spec.logEnabled, else the manager's default.
func (p *UpgradePlan) LogCaptureEnabled(managerDefault bool) bool {
	if p.Spec.LogEnabled != nil {
		return *p.Spec.LogEnabled
	}
	return managerDefault
}

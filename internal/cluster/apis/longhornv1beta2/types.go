// Package longhornv1beta2 holds the longhorn.io/v1beta2 kinds the toolkit
// reads or writes, reduced to the fields it uses.
//
// +kubebuilder:object:generate=true
// +groupName=longhorn.io
// +versionName=v1beta2
package longhornv1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion of the Longhorn kinds.
var GroupVersion = schema.GroupVersion{Group: "longhorn.io", Version: "v1beta2"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(&Setting{}, &SettingList{}, &Volume{}, &VolumeList{}, &Engine{}, &EngineList{}, &Replica{}, &ReplicaList{}, &InstanceManager{}, &InstanceManagerList{}, &Node{}, &NodeList{})
}

// Setting is one Longhorn setting.
//
// +kubebuilder:object:root=true
type Setting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Value             string `json:"value"`
	// +optional
	Status SettingStatus `json:"status,omitempty"`
}

// SettingStatus reports whether the value is in effect.
type SettingStatus struct {
	// +optional
	Applied bool `json:"applied,omitempty"`
}

// SettingList is a list of Settings.
//
// +kubebuilder:object:root=true
type SettingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Setting `json:"items"`
}

// Volume is a replicated Longhorn volume.
//
// +kubebuilder:object:root=true
type Volume struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VolumeSpec `json:"spec"`
	// +optional
	Status VolumeStatus `json:"status,omitempty"`
}

// VolumeSpec is the volume's desired shape.
type VolumeSpec struct {
	// +optional
	NumberOfReplicas int `json:"numberOfReplicas,omitempty"`
	// +optional
	Size string `json:"size,omitempty"`
	// +optional
	NodeID string `json:"nodeID,omitempty"`
}

// VolumeStatus reports attachment and health.
type VolumeStatus struct {
	// State is creating, attached, detached, attaching, detaching or deleting.
	// +optional
	State string `json:"state,omitempty"`
	// Robustness is healthy, degraded, faulted or unknown.
	// +optional
	Robustness string `json:"robustness,omitempty"`
	// +optional
	CurrentNodeID string `json:"currentNodeID,omitempty"`
	// +optional
	KubernetesStatus KubernetesStatus `json:"kubernetesStatus,omitempty"`
}

// KubernetesStatus names the PV and PVC of the volume.
type KubernetesStatus struct {
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	PVCName string `json:"pvcName,omitempty"`
	// +optional
	PVName string `json:"pvName,omitempty"`
	// LastPodRefAt is when the last pod using the volume went away, ""
	// while one uses it.
	// +optional
	LastPodRefAt string `json:"lastPodRefAt,omitempty"`
	// WorkloadsStatus are the pods using the volume.
	// +optional
	WorkloadsStatus []WorkloadStatus `json:"workloadsStatus,omitempty"`
}

// WorkloadStatus is a pod using a volume, with its phase.
type WorkloadStatus struct {
	// +optional
	PodName string `json:"podName,omitempty"`
	// +optional
	PodStatus string `json:"podStatus,omitempty"`
	// +optional
	WorkloadName string `json:"workloadName,omitempty"`
	// +optional
	WorkloadType string `json:"workloadType,omitempty"`
}

// VolumeList is a list of Volumes.
//
// +kubebuilder:object:root=true
type VolumeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Volume `json:"items"`
}

// Engine is the running controller of a Longhorn volume: it knows which
// replicas serve the volume and in which mode.
//
// +kubebuilder:object:root=true
type Engine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              EngineSpec `json:"spec"`
	// +optional
	Status EngineStatus `json:"status,omitempty"`
}

// EngineSpec names the engine's volume and node.
type EngineSpec struct {
	// +optional
	VolumeName string `json:"volumeName,omitempty"`
	// +optional
	NodeID string `json:"nodeID,omitempty"`
}

// EngineStatus reports the engine's state and its replicas' modes.
type EngineStatus struct {
	// CurrentState is stopped, starting, running, stopping, error or unknown.
	// +optional
	CurrentState string `json:"currentState,omitempty"`
	// ReplicaModeMap is the mode of each replica by replica name: RW (in
	// sync), WO (rebuilding) or ERR.
	// +optional
	ReplicaModeMap map[string]string `json:"replicaModeMap,omitempty"`
	// ReplicaTransitionTimeMap is when each replica last changed its mode
	// (RFC 3339, in seconds).
	// +optional
	ReplicaTransitionTimeMap map[string]string `json:"replicaTransitionTimeMap,omitempty"`
}

// EngineList is a list of Engines.
//
// +kubebuilder:object:root=true
type EngineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Engine `json:"items"`
}

// Replica is one copy of a Longhorn volume's data, on one node; its
// volume's engine says whether it is in sync (status.replicaModeMap).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type Replica struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec ReplicaSpec `json:"spec,omitempty"`
	// +optional
	Status ReplicaStatus `json:"status,omitempty"`
}

// ReplicaSpec names the replica's volume and node.
type ReplicaSpec struct {
	// +optional
	VolumeName string `json:"volumeName,omitempty"`
	// +optional
	NodeID string `json:"nodeID,omitempty"`
}

// ReplicaStatus reports whether the replica's process runs.
type ReplicaStatus struct {
	// CurrentState is stopped, starting, running, stopping, error or
	// unknown (its node is down).
	// +optional
	CurrentState string `json:"currentState,omitempty"`
}

// ReplicaList is a list of Replicas.
//
// +kubebuilder:object:root=true
type ReplicaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Replica `json:"items"`
}

// InstanceManager runs the engines and replicas of one node for one image
// and data engine; its labels say which (longhorn.io/node,
// longhorn.io/instance-manager-type, longhorn.io/data-engine,
// longhorn.io/instance-manager-image).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type InstanceManager struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec InstanceManagerSpec `json:"spec,omitempty"`
	// +optional
	Status InstanceManagerStatus `json:"status,omitempty"`
}

// InstanceManagerSpec names the image and node.
type InstanceManagerSpec struct {
	// +optional
	Image string `json:"image,omitempty"`
	// +optional
	NodeID string `json:"nodeID,omitempty"`
}

// InstanceManagerStatus reports whether it runs.
type InstanceManagerStatus struct {
	// CurrentState is unknown, starting, running, stopped or error.
	// +optional
	CurrentState string `json:"currentState,omitempty"`
}

// InstanceManagerList is a list of InstanceManagers.
//
// +kubebuilder:object:root=true
type InstanceManagerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InstanceManager `json:"items"`
}

// Node is a node Longhorn manages.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type Node struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Status NodeStatus `json:"status,omitempty"`
}

// NodeStatus reports the node's conditions.
type NodeStatus struct {
	// +optional
	Conditions []Condition `json:"conditions,omitempty"`
}

// Condition is Longhorn's condition: unlike Rancher's, it has no
// lastUpdateTime.
type Condition struct {
	// Type of the condition, e.g. Ready or Schedulable.
	Type string `json:"type"`
	// Status is True, False or Unknown.
	Status string `json:"status"`
	// +optional
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// NodeList is a list of Nodes.
//
// +kubebuilder:object:root=true
type NodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Node `json:"items"`
}

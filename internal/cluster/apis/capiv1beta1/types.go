// Package capiv1beta1 holds Cluster API's cluster.x-k8s.io/v1beta1 Machine
// and Cluster, reduced to the fields the toolkit uses to map machines to
// nodes and to wait for Rancher's CAPI controllers to settle.
//
// +kubebuilder:object:generate=true
// +groupName=cluster.x-k8s.io
// +versionName=v1beta1
package capiv1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion of the CAPI kinds.
var GroupVersion = schema.GroupVersion{Group: "cluster.x-k8s.io", Version: "v1beta1"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(&Machine{}, &MachineList{}, &Cluster{}, &ClusterList{})
}

// Machine is one machine of the cluster; Rancher's machine-plan Secret names
// it, and its nodeRef names the Node.
//
// +kubebuilder:object:root=true
type Machine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MachineSpec `json:"spec"`
	// +optional
	Status MachineStatus `json:"status,omitempty"`
}

// MachineSpec ties the machine to its cluster.
type MachineSpec struct {
	ClusterName string `json:"clusterName"`
	// Bootstrap and InfrastructureRef are required by the schema; Rancher
	// points them at the machine's RKEBootstrap and CustomMachine.
	Bootstrap         Bootstrap              `json:"bootstrap"`
	InfrastructureRef corev1.ObjectReference `json:"infrastructureRef"`
}

// Bootstrap is where a machine's bootstrap data comes from.
type Bootstrap struct {
	// +optional
	ConfigRef *corev1.ObjectReference `json:"configRef,omitempty"`
	// +optional
	DataSecretName *string `json:"dataSecretName,omitempty"`
}

// MachineStatus reports the machine's node, phase and conditions.
type MachineStatus struct {
	// +optional
	NodeRef *corev1.ObjectReference `json:"nodeRef,omitempty"`
	// Phase is e.g. Provisioning, Running, Deleting, Failed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Conditions are CAPI's (Ready, BootstrapReady, InfrastructureReady,
	// NodeHealthy) and Rancher's (e.g. PlanApplied) about the machine.
	// +optional
	Conditions []Condition `json:"conditions,omitempty"`
}

// Condition is a CAPI v1beta1 condition.
type Condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	// Severity is Error, Warning or Info when Status is False.
	// +optional
	Severity string `json:"severity,omitempty"`
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// MachineList is a list of Machines.
//
// +kubebuilder:object:root=true
type MachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Machine `json:"items"`
}

// Cluster is CAPI's view of a cluster; fleet-local/local is Harvester's,
// reconciled by Rancher.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec ClusterSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterSpec is reduced to nothing the toolkit reads.
type ClusterSpec struct {
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// ClusterStatus reports the cluster's phase.
type ClusterStatus struct {
	// Phase is e.g. Pending, Provisioning, Provisioned, Deleting, Failed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

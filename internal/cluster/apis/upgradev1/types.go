// Package upgradev1 holds system-upgrade-controller's upgrade.cattle.io/v1
// Plan, reduced to the fields the toolkit uses.
//
// +kubebuilder:object:generate=true
// +groupName=upgrade.cattle.io
// +versionName=v1
package upgradev1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
)

// GroupVersion of the SUC kinds.
var GroupVersion = schema.GroupVersion{Group: "upgrade.cattle.io", Version: "v1"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(&Plan{}, &PlanList{})
}

// Plan makes system-upgrade-controller run one Job per selected node.
//
// +kubebuilder:object:root=true
type Plan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PlanSpec `json:"spec"`
	// +optional
	Status PlanStatus `json:"status,omitempty"`
}

// PlanSpec selects the nodes and says what runs on each.
type PlanSpec struct {
	// Concurrency is how many nodes run the plan at once.
	// +optional
	Concurrency int64 `json:"concurrency,omitempty"`
	// JobActiveDeadlineSecs bounds each Job's run time.
	// +optional
	JobActiveDeadlineSecs *int64 `json:"jobActiveDeadlineSecs,omitempty"`
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Version is the version the plan applies; it feeds the plan hash.
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	Exclusive bool `json:"exclusive,omitempty"`
	// +optional
	Cordon bool `json:"cordon,omitempty"`
	// +optional
	Prepare *ContainerSpec `json:"prepare,omitempty"`
	// +optional
	Upgrade *ContainerSpec `json:"upgrade,omitempty"`
}

// ContainerSpec is one container of the plan's Jobs.
type ContainerSpec struct {
	Image string `json:"image"`
	// +optional
	Command []string `json:"command,omitempty"`
	// +optional
	Args []string `json:"args,omitempty"`
	// +optional
	Envs []corev1.EnvVar `json:"envs,omitempty"`
	// +optional
	Volumes []VolumeSpec `json:"volumes,omitempty"`
}

// VolumeSpec mounts a host path into the container.
type VolumeSpec struct {
	Name        string `json:"name"`
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// PlanStatus reports the plan's progress.
type PlanStatus struct {
	// +optional
	Conditions []common.Condition `json:"conditions,omitempty"`
	// +optional
	LatestVersion string `json:"latestVersion,omitempty"`
	// +optional
	LatestHash string `json:"latestHash,omitempty"`
	// Applying lists the nodes whose Jobs are running.
	// +optional
	Applying []string `json:"applying,omitempty"`
}

// PlanList is a list of Plans.
//
// +kubebuilder:object:root=true
type PlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Plan `json:"items"`
}

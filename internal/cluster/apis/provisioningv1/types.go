// Package provisioningv1 holds Rancher's provisioning.cattle.io/v1 Cluster,
// reduced to the fields the toolkit uses to roll RKE2 over the nodes.
//
// +kubebuilder:object:generate=true
// +groupName=provisioning.cattle.io
// +versionName=v1
package provisioningv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
)

// GroupVersion of the provisioning kinds.
var GroupVersion = schema.GroupVersion{Group: "provisioning.cattle.io", Version: "v1"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(&Cluster{}, &ClusterList{})
}

// Cluster is Rancher's description of a provisioned cluster; Harvester's own
// cluster is fleet-local/local.
//
// +kubebuilder:object:root=true
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterSpec `json:"spec"`
	// +optional
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterSpec is the part of the cluster spec that drives RKE2 upgrades.
type ClusterSpec struct {
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// +optional
	RKEConfig *RKEConfig `json:"rkeConfig,omitempty"`
}

// RKEConfig holds the rollout knobs.
type RKEConfig struct {
	// ProvisionGeneration: changing it makes Rancher re-plan every machine.
	// +optional
	ProvisionGeneration int64 `json:"provisionGeneration,omitempty"`
	// +optional
	UpgradeStrategy *ClusterUpgradeStrategy `json:"upgradeStrategy,omitempty"`
	// Registries is RKE2's registries configuration (mirrors and configs),
	// which Harvester syncs from its containerd-registry setting.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Registries *runtime.RawExtension `json:"registries,omitempty"`
}

// ClusterUpgradeStrategy says how many machines are upgraded at once and how
// they are drained.
type ClusterUpgradeStrategy struct {
	// +optional
	ControlPlaneConcurrency string `json:"controlPlaneConcurrency,omitempty"`
	// +optional
	ControlPlaneDrainOptions DrainOptions `json:"controlPlaneDrainOptions,omitempty"`
	// +optional
	WorkerConcurrency string `json:"workerConcurrency,omitempty"`
	// +optional
	WorkerDrainOptions DrainOptions `json:"workerDrainOptions,omitempty"`
}

// DrainOptions are Rancher's drain options, including the drain hooks.
type DrainOptions struct {
	// +optional
	Enabled bool `json:"enabled"`
	// +optional
	Force bool `json:"force"`
	// +optional
	IgnoreDaemonSets *bool `json:"ignoreDaemonSets,omitempty"`
	// +optional
	DeleteEmptyDirData bool `json:"deleteEmptyDirData"`
	// +optional
	DisableEviction bool `json:"disableEviction"`
	// +optional
	GracePeriod int `json:"gracePeriod,omitempty"`
	// +optional
	Timeout int `json:"timeout,omitempty"`
	// +optional
	SkipWaitForDeleteTimeoutSeconds int `json:"skipWaitForDeleteTimeoutSeconds,omitempty"`
	// PreDrainHooks: annotations Rancher waits for on the machine-plan Secret
	// before it drains.
	// +optional
	PreDrainHooks []DrainHook `json:"preDrainHooks,omitempty"`
	// PostDrainHooks: annotations Rancher waits for before it uncordons.
	// +optional
	PostDrainHooks []DrainHook `json:"postDrainHooks,omitempty"`
}

// DrainHook names an annotation that must echo Rancher's hook value.
type DrainHook struct {
	// +optional
	Annotation string `json:"annotation,omitempty"`
}

// ClusterStatus reports the provisioning state.
type ClusterStatus struct {
	// +optional
	Ready bool `json:"ready,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// FleetWorkspaceName is the Fleet workspace of the cluster (fleet-local
	// for Harvester's own); Rancher v2.8.1 added it.
	// +optional
	FleetWorkspaceName string `json:"fleetWorkspaceName,omitempty"`
	// +optional
	Conditions []common.Condition `json:"conditions,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

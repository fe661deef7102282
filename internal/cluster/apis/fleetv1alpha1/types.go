// Package fleetv1alpha1 holds Fleet's fleet.cattle.io/v1alpha1 Cluster and
// Bundle, reduced to the fields the toolkit uses to have Fleet redeploy its
// agent and to wait for Fleet's bundles.
//
// +kubebuilder:object:generate=true
// +groupName=fleet.cattle.io
// +versionName=v1alpha1
package fleetv1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
)

// GroupVersion of the Fleet kinds.
var GroupVersion = schema.GroupVersion{Group: "fleet.cattle.io", Version: "v1alpha1"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(&Cluster{}, &ClusterList{}, &Bundle{}, &BundleList{})
}

// Cluster is a cluster Fleet deploys to; fleet-local/local is Harvester's
// own.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterSpec `json:"spec"`
	// +optional
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterSpec holds what makes Fleet redeploy its agent.
type ClusterSpec struct {
	// RedeployAgentGeneration, raised above status.agentDeployedGeneration,
	// makes Fleet deploy its agent again.
	// +optional
	RedeployAgentGeneration int64 `json:"redeployAgentGeneration,omitempty"`
}

// ClusterStatus reports the agent and the cluster's import.
type ClusterStatus struct {
	// +optional
	AgentDeployedGeneration *int64 `json:"agentDeployedGeneration,omitempty"`
	// AgentTLSMode is a field of Fleet v0.10 and newer; the cluster upgrade
	// waits for the new CRD to have it.
	// +optional
	AgentTLSMode string `json:"agentTLSMode,omitempty"`
	// Conditions: Imported, Ready, ...
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

// Bundle is a set of resources Fleet deploys; Rancher turns each ManagedChart
// into the Bundle mcc-<chart> and copies the Bundle's status into the
// ManagedChart's.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
type Bundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              BundleSpec `json:"spec"`
	// +optional
	Status BundleStatus `json:"status,omitempty"`
}

// BundleSpec is reduced to what the simulator copies from a ManagedChart.
type BundleSpec struct {
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Helm is the chart's version and options.
	// +optional
	Helm *HelmOptions `json:"helm,omitempty"`
}

// HelmOptions of a Bundle.
type HelmOptions struct {
	// +optional
	ReleaseName string `json:"releaseName,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// Values are the chart's values.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Values *runtime.RawExtension `json:"values,omitempty"`
}

// BundleStatus reports the deployment of a Bundle; a ManagedChart's status
// is a copy of its Bundle's.
type BundleStatus struct {
	// Conditions: Ready, ...
	// +optional
	Conditions []common.Condition `json:"conditions,omitempty"`
	// +optional
	Summary BundleSummary `json:"summary,omitempty"`
	// Unavailable counts the clusters whose deployment is not ready.
	// +optional
	Unavailable int `json:"unavailable,omitempty"`
	// +optional
	Display BundleDisplay `json:"display,omitempty"`
	// ObservedGeneration is the Bundle's generation Fleet last processed.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// BundleSummary counts the Bundle's deployments by state.
type BundleSummary struct {
	// +optional
	NotReady int `json:"notReady,omitempty"`
	// +optional
	WaitApplied int `json:"waitApplied,omitempty"`
	// +optional
	ErrApplied int `json:"errApplied,omitempty"`
	// +optional
	OutOfSync int `json:"outOfSync,omitempty"`
	// +optional
	Modified int `json:"modified,omitempty"`
	// +optional
	Ready int `json:"ready"`
	// +optional
	Pending int `json:"pending,omitempty"`
	// +optional
	DesiredReady int `json:"desiredReady"`
}

// BundleDisplay is the summary as `kubectl get` shows it.
type BundleDisplay struct {
	// +optional
	ReadyClusters string `json:"readyClusters,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
}

// BundleTarget selects the clusters a Bundle (or a ManagedChart) deploys to.
type BundleTarget struct {
	// +optional
	ClusterName string `json:"clusterName,omitempty"`
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
}

// BundleList is a list of Bundles.
//
// +kubebuilder:object:root=true
type BundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Bundle `json:"items"`
}

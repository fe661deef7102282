// Package managementv3 holds Rancher's management.cattle.io/v3 ManagedChart
// and Setting, reduced to the fields the toolkit uses.
//
// +kubebuilder:object:generate=true
// +groupName=management.cattle.io
// +versionName=v3
package managementv3

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
)

// GroupVersion of the management kinds.
var GroupVersion = schema.GroupVersion{Group: "management.cattle.io", Version: "v3"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(&ManagedChart{}, &ManagedChartList{}, &Setting{}, &SettingList{}, &Cluster{}, &ClusterList{})
}

// ManagedChart is a Helm chart that Fleet deploys and keeps in sync.
//
// +kubebuilder:object:root=true
type ManagedChart struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ManagedChartSpec `json:"spec"`
	// +optional
	Status ManagedChartStatus `json:"status,omitempty"`
}

// ManagedChartSpec is the chart, its values and Fleet's diff options.
type ManagedChartSpec struct {
	// +optional
	Paused bool `json:"paused,omitempty"`
	// +optional
	Chart string `json:"chart,omitempty"`
	// +optional
	RepoName string `json:"repoName,omitempty"`
	// +optional
	ReleaseName string `json:"releaseName,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	DefaultNamespace string `json:"defaultNamespace,omitempty"`
	// +optional
	TimeoutSeconds int `json:"timeoutSeconds,omitempty"`
	// +optional
	Values *runtime.RawExtension `json:"values,omitempty"`
	// +optional
	Diff *DiffOptions `json:"diff,omitempty"`
	// +optional
	Targets []fleetv1alpha1.BundleTarget `json:"targets,omitempty"`
}

// DiffOptions tell Fleet which differences to ignore.
type DiffOptions struct {
	// +optional
	ComparePatches []ComparePatch `json:"comparePatches,omitempty"`
}

// ComparePatch makes Fleet ignore the listed JSON pointers of one object.
type ComparePatch struct {
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	JSONPointers []string `json:"jsonPointers,omitempty"`
}

// ManagedChartStatus reports the deployment: Rancher copies the status of
// the chart's Bundle (fleet-local/mcc-<chart>) into it, so its
// observedGeneration is the Bundle's, not the ManagedChart's.
type ManagedChartStatus = fleetv1alpha1.BundleStatus

// ManagedChartList is a list of ManagedCharts.
//
// +kubebuilder:object:root=true
type ManagedChartList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ManagedChart `json:"items"`
}

// Setting is a cluster-wide Rancher setting such as server-version, the
// version of the running Rancher.
//
// +kubebuilder:object:root=true
type Setting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Value string `json:"value"`
	// +optional
	Default string `json:"default,omitempty"`
}

// SettingList is a list of Settings.
//
// +kubebuilder:object:root=true
type SettingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Setting `json:"items"`
}

// Cluster is Rancher's management cluster; "local" is Harvester's own.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:subresource:status
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterStatus reports the cluster's conditions.
type ClusterStatus struct {
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

// Package catalogv1 holds Rancher's catalog.cattle.io/v1 ClusterRepo,
// reduced to the fields the toolkit uses to make Rancher re-read a Helm
// repository's index.
//
// +kubebuilder:object:generate=true
// +groupName=catalog.cattle.io
// +versionName=v1
package catalogv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion of the catalog kinds.
var GroupVersion = schema.GroupVersion{Group: "catalog.cattle.io", Version: "v1"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(&ClusterRepo{}, &ClusterRepoList{})
}

// ClusterRepo is a Helm chart repository Rancher indexes, such as
// harvester-charts, which serves the charts of the running Harvester release.
//
// +kubebuilder:object:root=true
type ClusterRepo struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterRepoSpec `json:"spec"`
	// +optional
	Status ClusterRepoStatus `json:"status,omitempty"`
}

// ClusterRepoSpec is where the repository is and when to re-read it.
type ClusterRepoSpec struct {
	// +optional
	URL string `json:"url,omitempty"`
	// ForceUpdate makes Rancher download the index again when it is later
	// than status.downloadTime and in the past.
	// +optional
	ForceUpdate *metav1.Time `json:"forceUpdate,omitempty"`
}

// ClusterRepoStatus reports the last index download.
type ClusterRepoStatus struct {
	// +optional
	DownloadTime metav1.Time `json:"downloadTime,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ClusterRepoList is a list of ClusterRepos.
//
// +kubebuilder:object:root=true
type ClusterRepoList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRepo `json:"items"`
}

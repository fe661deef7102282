// Package helmv1 holds RKE2's helm.cattle.io/v1 HelmChartConfig, reduced to
// the fields the toolkit sets on RKE2's own charts.
//
// +kubebuilder:object:generate=true
// +groupName=helm.cattle.io
// +versionName=v1
package helmv1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion of the helm-controller kinds.
var GroupVersion = schema.GroupVersion{Group: "helm.cattle.io", Version: "v1"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(&HelmChartConfig{}, &HelmChartConfigList{})
}

// HelmChartConfig overrides the values and options of a chart RKE2 deploys
// (kube-system/rke2-multus, kube-system/rke2-traefik, ...).
//
// +kubebuilder:object:root=true
type HelmChartConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              HelmChartConfigSpec `json:"spec"`
}

// HelmChartConfigSpec holds the overrides.
type HelmChartConfigSpec struct {
	// +optional
	ValuesContent string `json:"valuesContent,omitempty"`
	// FailurePolicy is reinstall (RKE2's default) or abort.
	// +optional
	FailurePolicy string `json:"failurePolicy,omitempty"`
}

// HelmChartConfigList is a list of HelmChartConfigs.
//
// +kubebuilder:object:root=true
type HelmChartConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HelmChartConfig `json:"items"`
}

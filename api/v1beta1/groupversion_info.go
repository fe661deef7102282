// Package v1beta1 holds the management.harvesterhci.io/v1beta1 API: the
// UpgradePlan kind, its phases, per-node states, conditions and the labels and
// annotations that users and other components see.
//
// +kubebuilder:object:generate=true
// +groupName=management.harvesterhci.io
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "management.harvesterhci.io", Version: "v1beta1"}

	// SchemeBuilder registers the kinds of this API with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

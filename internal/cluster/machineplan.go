package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The manager sees Rancher's machine-plan Secrets as metadata only: it reads
// and patches their drain-hook annotations, never Rancher's plan, which
// holds the node's files and join token, runs to tens of KiB per node and
// changes whenever the system agent reports. A metadata watch neither
// transfers nor decodes it. The manager's cache holds only the Secrets of
// type MachinePlanSecretType in FleetLocalNamespace (a metadata object has
// no type to check), so every Secret read this way is a machine plan.

var secretKind = corev1.SchemeGroupVersion.WithKind("Secret")

// MachinePlan returns an empty machine-plan Secret, as metadata, to read
// into.
func MachinePlan() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(secretKind)
	return m
}

// MachinePlans lists the machine-plan Secrets, as metadata, matching opts.
// The list and its items are the cache's own: read them, never change them.
func MachinePlans(ctx context.Context, c client.Reader, opts ...client.ListOption) ([]metav1.PartialObjectMetadata, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	opts = append([]client.ListOption{client.InNamespace(FleetLocalNamespace), client.UnsafeDisableDeepCopy}, opts...)
	if err := c.List(ctx, l, opts...); err != nil {
		return nil, fmt.Errorf("listing Rancher's machine-plan Secrets: %w", err)
	}
	return l.Items, nil
}

// IsMachinePlan reports whether obj, a Secret in the manager's cache, is a
// machine plan: it names its Machine.
func IsMachinePlan(obj client.Object) bool {
	return obj.GetNamespace() == FleetLocalNamespace && obj.GetLabels()[LabelMachineName] != ""
}

package main

import (
	"strings"

	mgmtv3 "github.com/rancher/rancher/pkg/apis/management.cattle.io/v3"
	provisioningv1 "github.com/rancher/rancher/pkg/apis/provisioning.cattle.io/v1"
	"github.com/rancher/wrangler/v3/pkg/schemas/openapi"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Rancher has no YAML for these: it builds them at start-up from its Go
// types with wrangler's crd.CRD (pkg/crds/provisioningv2 and
// pkg/crds/dashboard), whose schema is wrangler's openapi.ToOpenAPIFromStruct
// of the type. rancherCRDs builds them with the same wrangler function and
// types, and the names, columns, labels and subresources Rancher gives them.

// rancherKind is what Rancher's crd.CRD sets for one kind.
type rancherKind struct {
	group, version, kind string
	obj                  any
	// clusterScoped kinds have no namespace (NonNamespace in Rancher).
	clusterScoped bool
	labels        map[string]string
	columns       []apiextv1.CustomResourceColumnDefinition
}

var rancherKinds = []rancherKind{
	{group: "provisioning.cattle.io", version: "v1", kind: "Cluster", obj: &provisioningv1.Cluster{},
		labels: map[string]string{"auth.cattle.io/cluster-indexed": "true"},
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Ready", Type: "string", JSONPath: ".status.ready"},
			{Name: "Kubeconfig", Type: "string", JSONPath: ".status.clientSecretName"},
		}},
	{group: "management.cattle.io", version: "v3", kind: "ManagedChart", obj: mgmtv3.ManagedChart{}},
	{group: "management.cattle.io", version: "v3", kind: "Cluster", obj: mgmtv3.Cluster{}, clusterScoped: true},
}

func rancherCRDs() ([]*apiextv1.CustomResourceDefinition, error) {
	var out []*apiextv1.CustomResourceDefinition
	for _, k := range rancherKinds {
		schema, err := openapi.ToOpenAPIFromStruct(k.obj)
		if err != nil {
			return nil, err
		}
		// wrangler's name.GuessPluralName for these kinds: lower case plus "s".
		plural := strings.ToLower(k.kind) + "s"
		scope := apiextv1.NamespaceScoped
		if k.clusterScoped {
			scope = apiextv1.ClusterScoped
		}
		out = append(out, &apiextv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + "." + k.group, Labels: k.labels},
			Spec: apiextv1.CustomResourceDefinitionSpec{
				Group: k.group,
				Scope: scope,
				Names: apiextv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(k.kind), Kind: k.kind},
				Versions: []apiextv1.CustomResourceDefinitionVersion{{
					Name: k.version, Served: true, Storage: true,
					AdditionalPrinterColumns: k.columns,
					Schema:                   &apiextv1.CustomResourceValidation{OpenAPIV3Schema: schema},
					Subresources:             &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}},
				}},
			},
		})
	}
	return out, nil
}

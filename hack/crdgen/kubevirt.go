package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// virt-operator builds KubeVirt's CRDs at run time (pkg/virt-operator/
// resource/generate/components/crds.go): names, the versions of
// kubevirt.io/api's ApiSupportedVersions, printer columns and subresources in
// code, and each kind's OpenAPI schema from validations_generated.go, which
// KubeVirt's build generates from its Go types. kubevirtCRDs does the same
// for the kinds the toolkit uses, reading the schemas from the module.

// kubevirtKind is what crds.go sets for one kind.
type kubevirtKind struct {
	kind, plural, singular string
	shortNames             []string
	status                 bool
	labels                 map[string]string
	columns                []apiextv1.CustomResourceColumnDefinition
}

var kubevirtKinds = []kubevirtKind{
	{kind: "VirtualMachineInstance", plural: "virtualmachineinstances", singular: "virtualmachineinstance", shortNames: []string{"vmi", "vmis"},
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
			{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
			{Name: "IP", Type: "string", JSONPath: ".status.interfaces[0].ipAddress"},
			{Name: "NodeName", Type: "string", JSONPath: ".status.nodeName"},
			{Name: "Ready", Type: "string", JSONPath: ".status.conditions[?(@.type=='Ready')].status"},
			{Name: "Live-Migratable", Type: "string", JSONPath: ".status.conditions[?(@.type=='LiveMigratable')].status", Priority: 1},
			{Name: "Paused", Type: "string", JSONPath: ".status.conditions[?(@.type=='Paused')].status", Priority: 1},
		}},
	{kind: "VirtualMachine", plural: "virtualmachines", singular: "virtualmachine", shortNames: []string{"vm", "vms"}, status: true,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
			{Name: "Status", Description: "Human Readable Status", Type: "string", JSONPath: ".status.printableStatus"},
			{Name: "Ready", Type: "string", JSONPath: ".status.conditions[?(@.type=='Ready')].status"},
		}},
	{kind: "VirtualMachineInstanceMigration", plural: "virtualmachineinstancemigrations", singular: "virtualmachineinstancemigration", shortNames: []string{"vmim", "vmims"}, status: true,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Phase", Type: "string", JSONPath: ".status.phase", Description: "The current phase of VM instance migration"},
			{Name: "VMI", Type: "string", JSONPath: ".spec.vmiName", Description: "The name of the VMI to perform the migration on"},
		}},
	{kind: "KubeVirt", plural: "kubevirts", singular: "kubevirt", shortNames: []string{"kv", "kvs"}, status: true,
		labels: map[string]string{"operator.kubevirt.io": ""},
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
			{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
		}},
}

func kubevirtCRDs(moduleDir string) ([]*apiextv1.CustomResourceDefinition, error) {
	schemas, err := kubevirtSchemas(filepath.Join(moduleDir, "pkg/virt-operator/resource/generate/components/validations_generated.go"))
	if err != nil {
		return nil, err
	}
	var out []*apiextv1.CustomResourceDefinition
	for _, k := range kubevirtKinds {
		raw, ok := schemas[k.singular]
		if !ok {
			return nil, fmt.Errorf("validations_generated.go has no schema for %s", k.singular)
		}
		validation := &apiextv1.CustomResourceValidation{}
		if err := yaml.Unmarshal([]byte(raw), validation); err != nil {
			return nil, fmt.Errorf("the schema of %s: %w", k.singular, err)
		}
		labels := k.labels
		if labels == nil {
			labels = map[string]string{"kubevirt.io": ""}
		}
		c := &apiextv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: k.plural + ".kubevirt.io", Labels: labels},
			Spec: apiextv1.CustomResourceDefinitionSpec{
				Group: "kubevirt.io",
				Scope: apiextv1.NamespaceScoped,
				Names: apiextv1.CustomResourceDefinitionNames{
					Plural: k.plural, Singular: k.singular, Kind: k.kind, ShortNames: k.shortNames, Categories: []string{"all"},
				},
			},
		}
		// kubevirt.io/api core/v1 ApiSupportedVersions.
		for _, v := range []apiextv1.CustomResourceDefinitionVersion{
			{Name: "v1", Served: true, Storage: true},
			{Name: "v1alpha3", Served: true, Deprecated: true,
				DeprecationWarning: ptr.To("kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release.")},
		} {
			v.AdditionalPrinterColumns = k.columns
			v.Schema = validation.DeepCopy()
			if k.status {
				v.Subresources = &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}}
			}
			c.Spec.Versions = append(c.Spec.Versions, v)
		}
		out = append(out, c)
	}
	return out, nil
}

// kubevirtSchemas reads the CRDsValidation map of validations_generated.go:
// the OpenAPI schema (as YAML) by CRD singular name.
func kubevirtSchemas(path string) (map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		k, kok := kv.Key.(*ast.BasicLit)
		v, vok := kv.Value.(*ast.BasicLit)
		if !kok || !vok || k.Kind != token.STRING || v.Kind != token.STRING {
			return true
		}
		key, err1 := strconv.Unquote(k.Value)
		val, err2 := strconv.Unquote(v.Value)
		if err1 == nil && err2 == nil && strings.HasPrefix(val, "openAPIV3Schema:") {
			out[key] = val
		}
		return false
	})
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no CRDsValidation entries found", path)
	}
	return out, nil
}

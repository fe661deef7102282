package cluster_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// TestReducedTypesHaveOnlyRealFields writes every foreign kind with every
// field of the toolkit's reduced Go type set, asking the API server to refuse
// fields the real upstream schema does not have (strict field validation):
// a field the toolkit reads or writes that a real cluster would silently drop
// fails here.
func TestReducedTypesHaveOnlyRealFields(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client.WithFieldValidation(client.NewDryRunClient(env.Client), metav1.FieldValidationStrict)
	for _, f := range fixtures() {
		t.Run(f.resource.String(), func(t *testing.T) {
			obj := f.sample.DeepCopyObject().(client.Object)
			fill(reflect.ValueOf(obj).Elem(), 0)
			err := c.Create(ctx, obj)
			if err == nil {
				return
			}
			msg := err.Error()
			if strings.Contains(msg, "unknown field") || strings.Contains(msg, "must be of type") {
				t.Errorf("the real schema of %s differs from the toolkit's type: %v", f.resource, err)
			}
		})
	}
}

// TestUnknownFieldIsCaught: an object written with a field its real schema
// does not have is dropped by the API server with a warning, which the test
// world records (testenv.FieldWarnings) and fails on.
func TestUnknownFieldIsCaught(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	warnings := &testenv.FieldWarnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = warnings
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "provisioning.cattle.io/v1", "kind": "Cluster",
		"metadata": map[string]any{"namespace": cluster.FleetLocalNamespace, "name": "unknown-field"},
		"spec":     map[string]any{"kubernetesVersion": "v1.35.2+rke2r1", "rkeConfig": map[string]any{"drainBeforeUpgrade": true}},
	}}
	if err := c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	want := `unknown field "spec.rkeConfig.drainBeforeUpgrade"`
	if seen := warnings.Seen(); len(seen) != 1 || seen[0] != want {
		t.Fatalf("warnings %q, want [%q]", seen, want)
	}
}

// fill sets every settable field of v that is still zero to a sample value.
func fill(v reflect.Value, depth int) {
	if depth > 12 {
		return
	}
	switch v.Interface().(type) {
	case metav1.ObjectMeta, metav1.TypeMeta:
		return
	case metav1.Time:
		if t := v.Interface().(metav1.Time); t.IsZero() {
			v.Set(reflect.ValueOf(metav1.Time{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}))
		}
		return
	case k8sruntime.RawExtension:
		// An empty object: a schemaless field takes any, a structured one
		// (RKE2's registries) only its own fields.
		v.Set(reflect.ValueOf(k8sruntime.RawExtension{Raw: []byte(`{}`)}))
		return
	case resource.Quantity:
		v.Set(reflect.ValueOf(resource.MustParse("1Gi")))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fill(v.Elem(), depth+1)
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		}
		for i := range v.Len() {
			fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		if v.Len() == 0 {
			v.Set(reflect.MakeMap(v.Type()))
			elem := reflect.New(v.Type().Elem()).Elem()
			fill(elem, depth+1)
			key := reflect.New(v.Type().Key()).Elem()
			fill(key, depth+1)
			v.SetMapIndex(key, elem)
		}
	case reflect.String:
		if v.String() == "" {
			v.SetString("sample")
		}
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		if v.Int() == 0 {
			v.SetInt(1)
		}
	}
}

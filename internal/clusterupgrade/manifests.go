package clusterupgrade

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// fieldManager is who the toolkit's server-side applies are from.
const fieldManager = "upgrade-toolkit"

// readManifests reads every object of the *.yaml files of dir in fsys, in
// file order; a missing directory has none.
func readManifests(fsys fs.FS, dir string) ([]*unstructured.Unstructured, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for i := 1; ; i++ {
			obj := &unstructured.Unstructured{}
			err := dec.Decode(&obj.Object)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("manifest %s, document %d: %w", f, i, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			if obj.GetKind() == "" || obj.GetAPIVersion() == "" || obj.GetName() == "" {
				return nil, fmt.Errorf("manifest %s, document %d: apiVersion, kind and metadata.name are required", f, i)
			}
			out = append(out, obj)
		}
	}
	return out, nil
}

// apply applies an object server-side, as `kubectl apply --server-side
// --force-conflicts` would: the toolkit's manifest wins.
func (u *Upgrade) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	obj.SetResourceVersion("")
	obj.SetManagedFields(nil)
	if err := u.Client.Patch(ctx, obj, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", obj.GetKind(), client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=patch

// applyCRDs applies the CustomResourceDefinitions of the release that its
// charts need but Helm does not upgrade (a chart's crds/ directory is
// installed once, never upgraded): CDI's, before the Harvester chart that
// deploys the new CDI. Other kinds in those files are skipped, with a log.
func (u *Upgrade) applyCRDs(ctx context.Context, _ *run) error {
	if u.CRDs == nil {
		log.FromContext(ctx).Info("the job has no CRDs to apply")
		return nil
	}
	objs, err := readManifests(u.CRDs, ".")
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if obj.GetKind() != "CustomResourceDefinition" {
			log.FromContext(ctx).Info("not a CustomResourceDefinition: skipped", "kind", obj.GetKind(), "name", obj.GetName())
			continue
		}
		if err := u.apply(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// applyVersionedManifests applies the manifests for upgrades from the
// release the cluster ran (Manifests/<previous version>/*.yaml), as
// Harvester's upgrade applies extra_manifests/<previous version>.
func (u *Upgrade) applyVersionedManifests(ctx context.Context, r *run) error {
	prev := r.previous()
	if u.Manifests == nil || prev == "" {
		return nil
	}
	objs, err := readManifests(u.Manifests, prev)
	if err != nil {
		return err
	}
	if len(objs) == 0 {
		log.FromContext(ctx).Info("no manifests for upgrades from this release", "previousVersion", prev)
	}
	for _, obj := range objs {
		if err := u.apply(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

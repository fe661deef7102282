package clusterupgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
)

// addonChange is a change of one Addon's spec.
type addonChange struct {
	key client.ObjectKey
	// spec holds the fields to merge into spec.
	spec map[string]any
	// manifest creates the Addon when the cluster does not have it.
	manifest *harvesterv1beta1.Addon
}

// +kubebuilder:rbac:groups=harvesterhci.io,resources=addons,verbs=get;create;patch

// upgradeAddons moves the add-ons to the release: the monitoring and logging
// Addons to the release's chart versions (their values are the operator's,
// so only the version changes), and every Addon of the release's add-on
// manifests to its version and values (installed when missing). An enabled
// add-on that does not come back deployed in time is reported, not waited
// for: it does not hold up the upgrade, and the operator can fix it after.
func (u *Upgrade) upgradeAddons(ctx context.Context, r *run) error {
	changes := []addonChange{
		{key: client.ObjectKey{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon}, spec: map[string]any{"version": r.rel.MonitoringChart}},
		{key: client.ObjectKey{Namespace: cluster.LoggingNamespace, Name: cluster.LoggingAddon}, spec: map[string]any{"version": r.rel.LoggingChart}},
	}
	fromManifests, err := u.addonManifests()
	if err != nil {
		return err
	}
	changes = append(changes, fromManifests...)
	for _, c := range changes {
		if err := u.applyAddon(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// addonManifests reads the release's add-on manifests.
func (u *Upgrade) addonManifests() ([]addonChange, error) {
	if u.Addons == nil {
		return nil, nil
	}
	files, err := fs.Glob(u.Addons, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []addonChange
	for _, f := range files {
		data, err := fs.ReadFile(u.Addons, f)
		if err != nil {
			return nil, err
		}
		a := &harvesterv1beta1.Addon{}
		if err := yaml.Unmarshal(data, a); err != nil {
			return nil, fmt.Errorf("add-on manifest %s: %w", f, err)
		}
		if a.Name == "" || a.Namespace == "" || a.Spec.Version == "" {
			return nil, fmt.Errorf("add-on manifest %s: metadata.name, metadata.namespace and spec.version are required", path.Base(f))
		}
		spec := map[string]any{"version": a.Spec.Version}
		if a.Spec.ValuesContent != "" {
			spec["valuesContent"] = a.Spec.ValuesContent
		}
		out = append(out, addonChange{key: client.ObjectKeyFromObject(a), spec: spec, manifest: a})
	}
	return out, nil
}

// applyAddon changes or installs one Addon and, when it was deployed before,
// waits a while for it to be deployed again.
func (u *Upgrade) applyAddon(ctx context.Context, c addonChange) error {
	logger := log.FromContext(ctx).WithValues("addon", c.key.String())
	a := &harvesterv1beta1.Addon{}
	err := u.Client.Get(ctx, c.key, a)
	switch {
	case apierrors.IsNotFound(err) && c.manifest != nil:
		logger.Info("installing the add-on of the release")
		return client.IgnoreAlreadyExists(u.Client.Create(ctx, c.manifest.DeepCopy()))
	case apierrors.IsNotFound(err):
		logger.Info("the cluster has no such add-on: nothing to upgrade")
		return nil
	case err != nil:
		return fmt.Errorf("reading Addon %s: %w", c.key, err)
	}
	if addonUpToDate(a, c.spec) {
		return nil
	}
	wasDeployed := a.Spec.Enabled && a.Status.Status == cluster.AddonStateDeployed
	body, err := json.Marshal(map[string]any{"spec": c.spec})
	if err != nil {
		return err
	}
	if err := u.Client.Patch(ctx, a, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("upgrading Addon %s: %w", c.key, err)
	}
	if !wasDeployed {
		return nil
	}
	w := u.wait("Addon "+c.key.String()+" to be deployed again", u.Timeouts.Addon, "")
	if err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		if err := u.Client.Get(ctx, c.key, a); err != nil {
			return false, "", err
		}
		return a.Status.Status == cluster.AddonStateDeployed, "status " + a.Status.Status, nil
	}); err != nil {
		logger.Error(err, "the add-on is not deployed again; the upgrade goes on: fix the add-on after it (kubectl -n "+c.key.Namespace+" get addon "+c.key.Name+" -o yaml)")
	}
	return nil
}

// addonUpToDate reports whether the Addon's spec has the wanted fields.
func addonUpToDate(a *harvesterv1beta1.Addon, spec map[string]any) bool {
	if v, ok := spec["version"]; ok && a.Spec.Version != v {
		return false
	}
	if v, ok := spec["valuesContent"]; ok && a.Spec.ValuesContent != v {
		return false
	}
	return true
}

package clusterupgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
)

// fromManifests are the add-ons upgraded from the release's add-on
// manifests (version and values), installed when the cluster lacks them, as
// Harvester's upgrade_addons does. Other manifests of the release are not
// touched: their add-ons carry the operator's values (monitoring and
// logging, which get their own changes below) or are upgraded by the
// operator.
var fromManifests = []string{
	"vm-import-controller", "pcidevices-controller", "harvester-seeder",
	cluster.DeschedulerAddon, cluster.NvidiaDriverToolkitAddon,
}

// nvidiaDriverPlaceholder is the driver location of the nvidia add-on's
// manifest, which the operator replaces with where the driver is.
const nvidiaDriverPlaceholder = "HTTPENDPOINT/NVIDIA-Linux-x86_64-vgpu-kvm.run"

// addonChange is a change of one Addon's spec.
type addonChange struct {
	key client.ObjectKey
	// spec returns the fields to merge into spec, given the Addon as it is.
	spec func(a *harvesterv1beta1.Addon) (map[string]any, error)
	// manifest creates the Addon when the cluster does not have it.
	manifest *harvesterv1beta1.Addon
}

// +kubebuilder:rbac:groups=harvesterhci.io,resources=addons,verbs=get;create;patch

// upgradeAddons moves the add-ons to the release: those of fromManifests to
// their manifest's version and values, rancher-monitoring and
// rancher-logging to the release's chart versions (their values are the
// operator's: only the keys the new release needs are added), and kube-ovn
// with its CRD chart. An enabled add-on that does not come back deployed in
// time is reported, not waited for: it does not hold up the upgrade, and
// the operator can fix it after.
func (u *Upgrade) upgradeAddons(ctx context.Context, r *run) error {
	if err := u.waitAddonCRD(ctx); err != nil {
		return err
	}
	manifests, err := u.addonManifests()
	if err != nil {
		return err
	}
	var changes []addonChange
	for _, name := range fromManifests {
		m, ok := manifests[name]
		if !ok {
			log.FromContext(ctx).Info("the release has no manifest for this add-on", "addon", name)
			continue
		}
		changes = append(changes, addonChange{key: client.ObjectKeyFromObject(m), manifest: m, spec: manifestSpec(m)})
	}
	changes = append(changes,
		addonChange{key: client.ObjectKey{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon}, spec: func(a *harvesterv1beta1.Addon) (map[string]any, error) {
			values, err := MonitoringValues(a.Spec.ValuesContent)
			return map[string]any{"version": r.rel.MonitoringChart, "valuesContent": values}, err
		}},
		addonChange{key: client.ObjectKey{Namespace: cluster.LoggingNamespace, Name: cluster.LoggingAddon}, spec: func(a *harvesterv1beta1.Addon) (map[string]any, error) {
			values, err := LoggingValues(a.Spec.ValuesContent, r.rel.LoggingChartHarvesterEventRouter)
			return map[string]any{"version": r.rel.LoggingChart, "valuesContent": values}, err
		}},
	)
	for _, c := range changes {
		if err := u.applyAddon(ctx, r, c); err != nil {
			return err
		}
	}
	if m, ok := manifests[cluster.KubeOVNAddon]; ok {
		return u.upgradeKubeOVN(ctx, r, m)
	}
	return nil
}

// manifestSpec upgrades an Addon to its manifest's version and values; the
// nvidia add-on keeps the driver location the operator set.
func manifestSpec(m *harvesterv1beta1.Addon) func(*harvesterv1beta1.Addon) (map[string]any, error) {
	return func(a *harvesterv1beta1.Addon) (map[string]any, error) {
		spec := map[string]any{"version": m.Spec.Version}
		values := m.Spec.ValuesContent
		if m.Name == cluster.NvidiaDriverToolkitAddon {
			values = KeepDriverLocation(values, a.Spec.ValuesContent)
		}
		if values != "" {
			spec["valuesContent"] = values
		}
		return spec, nil
	}
}

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get

// waitAddonCRD waits until the Harvester chart installed the Addon CRD.
func (u *Upgrade) waitAddonCRD(ctx context.Context) error {
	w := u.wait("the CRD "+cluster.AddonCRD, u.Timeouts.Charts, "the harvester-crd chart installs it: check that chart's bundle")
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		err := u.Client.Get(ctx, client.ObjectKey{Name: cluster.AddonCRD}, &apiextensionsv1.CustomResourceDefinition{})
		if apierrors.IsNotFound(err) {
			return false, "it does not exist", nil
		}
		return err == nil, "", err
	})
}

// addonManifests reads the release's add-on manifests, by Addon name.
func (u *Upgrade) addonManifests() (map[string]*harvesterv1beta1.Addon, error) {
	out := map[string]*harvesterv1beta1.Addon{}
	if u.Addons == nil {
		return out, nil
	}
	files, err := fs.Glob(u.Addons, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
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
		out[a.Name] = a
	}
	return out, nil
}

// addonKey is where the time of an Addon's change is recorded, for an Addon
// whose redeployment the upgrade waits for.
func addonKey(key client.ObjectKey) string { return jobspec.ProgressAddon(key.Namespace, key.Name) }

// applyAddon changes or installs one Addon and, when it was deployed before,
// waits a while for Harvester to deploy it again. The time of the change is
// recorded before the change, so that a restarted Job waits for the same
// redeployment.
func (u *Upgrade) applyAddon(ctx context.Context, r *run, c addonChange) error {
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
	spec, err := c.spec(a)
	if err != nil {
		return fmt.Errorf("changing Addon %s: %w", c.key, err)
	}
	at, waiting := r.progress.value(addonKey(c.key))
	if !waiting {
		if addonUpToDate(a, spec) {
			return nil
		}
		if a.Spec.Enabled && a.Status.Status == cluster.AddonStateDeployed {
			at = u.Now().UTC().Format(time.RFC3339)
			if err := r.progress.set(ctx, addonKey(c.key), at); err != nil {
				return err
			}
			waiting = true
		}
	}
	if !addonUpToDate(a, spec) {
		body, err := json.Marshal(map[string]any{"spec": spec})
		if err != nil {
			return err
		}
		if err := u.Client.Patch(ctx, a, client.RawPatch(types.MergePatchType, body)); err != nil {
			return fmt.Errorf("upgrading Addon %s: %w", c.key, err)
		}
	}
	if !waiting {
		return nil
	}
	since, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return fmt.Errorf("the recorded time of Addon %s's change is %q: %w", c.key, at, err)
	}
	if err := u.waitAddon(ctx, c.key, since); err != nil {
		logger.Error(err, "the add-on is not deployed again; the upgrade goes on: fix the add-on after it (kubectl -n "+c.key.Namespace+" get addon "+c.key.Name+" -o yaml)")
	}
	return nil
}

// waitAddon waits until Harvester redeployed an Addon changed at since.
func (u *Upgrade) waitAddon(ctx context.Context, key client.ObjectKey, since time.Time) error {
	w := u.wait(fmt.Sprintf("Harvester to deploy Addon %s again after its change at %s", key, since.UTC().Format(time.RFC3339)), u.Timeouts.Addon, "")
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		a := &harvesterv1beta1.Addon{}
		if err := u.Client.Get(ctx, key, a); err != nil {
			return false, "", err
		}
		done, failed, status := AddonRedeployed(a, since)
		if failed {
			return false, status, fmt.Errorf("%s", status)
		}
		return done, status, nil
	})
}

// conditionSince reports whether the Addon condition is True and was
// updated at since or later (timestamps have whole seconds).
func conditionSince(a *harvesterv1beta1.Addon, condType string, since time.Time) bool {
	c := common.FindCondition(a.Status.Conditions, condType)
	if c == nil || c.Status != "True" {
		return false
	}
	t, err := time.Parse(time.RFC3339, c.LastUpdateTime)
	return err == nil && !t.Before(since.Truncate(time.Second))
}

// AddonRedeployed judges whether Harvester's add-on controller deployed an
// Addon again after a change at since. Harvester answers a change of an
// enabled, deployed add-on by setting InProgress (while the status still
// says AddonDeploySuccessful), then AddonUpdating while its chart's job
// runs, then AddonDeploySuccessful with Completed, or OperationFailed: so
// the old status alone proves nothing, a Completed newer than the change
// does.
func AddonRedeployed(a *harvesterv1beta1.Addon, since time.Time) (done, failed bool, status string) {
	status = "status " + orNone(a.Status.Status)
	if c := common.FindCondition(a.Status.Conditions, cluster.AddonConditionInProgress); c != nil && c.Status == "True" {
		status += ", in progress since " + c.LastUpdateTime
	}
	if conditionSince(a, cluster.AddonConditionFailed, since) {
		c := common.FindCondition(a.Status.Conditions, cluster.AddonConditionFailed)
		return false, true, fmt.Sprintf("%s, failed: %s", status, c.Message)
	}
	done = a.Status.Status == cluster.AddonStateDeployed && conditionSince(a, cluster.AddonConditionCompleted, since) &&
		!common.IsTrue(a.Status.Conditions, cluster.AddonConditionInProgress)
	return done, false, status
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

// editValues parses an add-on's valuesContent, lets edit change it and
// returns the new valuesContent, or the old one unchanged when edit
// reports no change.
func editValues(content string, edit func(map[string]any) bool) (string, error) {
	values := map[string]any{}
	if err := yaml.Unmarshal([]byte(content), &values); err != nil {
		return "", fmt.Errorf("reading its valuesContent: %w", err)
	}
	if values == nil {
		values = map[string]any{}
	}
	if !edit(values) {
		return content, nil
	}
	out, err := yaml.Marshal(values)
	return string(out), err
}

// child returns values[key] as a map, creating it.
func child(values map[string]any, key string) map[string]any {
	m, ok := values[key].(map[string]any)
	if !ok {
		m = map[string]any{}
		values[key] = m
	}
	return m
}

// MonitoringValues adds to rancher-monitoring's values what Harvester's
// release needs when they lack it: rancherMonitoring.enabled false (Harvester
// serves its own dashboards) and kube-state-metrics'
// metricLabelsAllowlist with the nodes' labels.
func MonitoringValues(content string) (string, error) {
	return editValues(content, func(v map[string]any) bool {
		changed := false
		if _, ok := child(v, "rancherMonitoring")["enabled"]; !ok {
			child(v, "rancherMonitoring")["enabled"] = false
			changed = true
		}
		if _, ok := child(v, "kube-state-metrics")["metricLabelsAllowlist"]; !ok {
			child(v, "kube-state-metrics")["metricLabelsAllowlist"] = []any{"nodes=[*]"}
			changed = true
		}
		return changed
	})
}

// LoggingValues points rancher-logging's eventrouter at the release's
// image, when the values run one.
func LoggingValues(content, eventRouterImage string) (string, error) {
	return editValues(content, func(v map[string]any) bool {
		tailer, _ := v["eventTailer"].(map[string]any)
		overrides, _ := tailer["workloadOverrides"].(map[string]any)
		containers, _ := overrides["containers"].([]any)
		if len(containers) == 0 {
			return false
		}
		c, _ := containers[0].(map[string]any)
		if c == nil || c["image"] == nil || c["image"] == eventRouterImage {
			return false
		}
		c["image"] = eventRouterImage
		return true
	})
}

// KeepDriverLocation puts the driver location of the running
// nvidia-driver-toolkit Addon into the new manifest's values, in place of
// the manifest's placeholder.
func KeepDriverLocation(manifestValues, currentValues string) string {
	current := map[string]any{}
	if err := yaml.Unmarshal([]byte(currentValues), &current); err != nil {
		return manifestValues
	}
	location, _ := current["driverLocation"].(string)
	if location == "" {
		return manifestValues
	}
	return strings.ReplaceAll(manifestValues, nvidiaDriverPlaceholder, location)
}

// +kubebuilder:rbac:groups=management.cattle.io,resources=managedcharts,verbs=create

// upgradeKubeOVN deploys kube-ovn's CRD chart at the kubeovn-operator
// add-on's version (the operator's chart needs the CRDs first), waits a
// while for it, and moves the add-on to that version.
func (u *Upgrade) upgradeKubeOVN(ctx context.Context, r *run, m *harvesterv1beta1.Addon) error {
	version := m.Spec.Version
	mc, found, err := u.chart(ctx, cluster.KubeOVNCRDManagedChart)
	if err != nil {
		return err
	}
	before := int64(0)
	if found {
		before = mc.Status.ObservedGeneration
	}
	observed, err := r.progress.once(ctx, jobspec.ProgressChart(cluster.KubeOVNCRDManagedChart, "observed"), func() (string, error) { return fmt.Sprint(before), nil })
	if err != nil {
		return err
	}
	if _, err := fmt.Sscan(observed, &before); err != nil {
		return fmt.Errorf("the recorded generation of ManagedChart %s is %q: %w", cluster.KubeOVNCRDManagedChart, observed, err)
	}
	if !found {
		mc = &managementv3.ManagedChart{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.KubeOVNCRDManagedChart},
			Spec: managementv3.ManagedChartSpec{
				Chart: cluster.KubeOVNCRDManagedChart, ReleaseName: cluster.KubeOVNCRDManagedChart, Version: version,
				DefaultNamespace: cluster.KubeSystemNamespace, RepoName: cluster.HarvesterChartsRepo, TimeoutSeconds: 600,
				Targets: []fleetv1alpha1.BundleTarget{{ClusterName: cluster.LocalClusterName, ClusterSelector: &metav1.LabelSelector{
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "provisioning.cattle.io/unmanaged-system-agent", Operator: metav1.LabelSelectorOpDoesNotExist}},
				}}},
			},
		}
		if err := client.IgnoreAlreadyExists(u.Client.Create(ctx, mc)); err != nil {
			return fmt.Errorf("creating ManagedChart %s/%s: %w", cluster.FleetLocalNamespace, cluster.KubeOVNCRDManagedChart, err)
		}
	} else if err := u.patchChart(ctx, cluster.KubeOVNCRDManagedChart, map[string]any{"version": version}, nil); err != nil {
		return err
	}
	if err := u.waitChart(ctx, cluster.KubeOVNCRDManagedChart, version, before, u.Timeouts.Addon); err != nil {
		log.FromContext(ctx).Info("kube-ovn's CRD chart is not deployed yet; the add-on is upgraded anyway", "reason", err.Error())
	}
	return u.applyAddon(ctx, r, addonChange{key: client.ObjectKeyFromObject(m), manifest: m, spec: func(*harvesterv1beta1.Addon) (map[string]any, error) {
		return map[string]any{"version": version}, nil
	}})
}

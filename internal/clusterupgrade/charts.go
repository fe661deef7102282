package clusterupgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
)

// pausedCharts are the ManagedCharts the upgrade pauses, so that Fleet does
// not redeploy them halfway while Rancher and the chart repository change
// under it. The monitoring and logging stacks are Addons on newer clusters;
// their ManagedCharts are paused where they still exist.
var pausedCharts = []string{
	cluster.HarvesterManagedChart, cluster.HarvesterCRDManagedChart,
	cluster.MonitoringCRDManagedChart, cluster.LoggingCRDManagedChart,
	cluster.MonitoringManagedChart, cluster.LoggingManagedChart,
}

// +kubebuilder:rbac:groups=management.cattle.io,resources=managedcharts,verbs=get;create;patch
// +kubebuilder:rbac:groups=fleet.cattle.io,resources=bundles,verbs=get;list

// chart reads a ManagedChart in fleet-local; found is false when it does
// not exist.
func (u *Upgrade) chart(ctx context.Context, name string) (*managementv3.ManagedChart, bool, error) {
	mc := &managementv3.ManagedChart{}
	err := u.Client.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading ManagedChart %s/%s: %w", cluster.FleetLocalNamespace, name, err)
	}
	return mc, true, nil
}

// patchChart merge-patches a ManagedChart: the given fields of its spec and
// annotations, nothing else (the reduced type does not know every field).
func (u *Upgrade) patchChart(ctx context.Context, name string, spec map[string]any, annotations map[string]string) error {
	body := map[string]any{"spec": spec}
	if len(annotations) > 0 {
		body["metadata"] = map[string]any{"annotations": annotations}
	}
	mc := &managementv3.ManagedChart{}
	mc.SetNamespace(cluster.FleetLocalNamespace)
	mc.SetName(name)
	return u.mergePatch(ctx, mc, body, false)
}

// pauseCharts pauses the charts that are not paused yet, recording each
// first: charts someone else paused stay paused after the upgrade.
func (u *Upgrade) pauseCharts(ctx context.Context, r *run) error {
	for _, name := range pausedCharts {
		mc, found, err := u.chart(ctx, name)
		if err != nil {
			return err
		}
		if !found || mc.Spec.Paused {
			continue
		}
		if err := r.progress.markPaused(ctx, name); err != nil {
			return err
		}
		if err := u.patchChart(ctx, name, map[string]any{"paused": true}, nil); err != nil {
			return err
		}
	}
	return nil
}

// resumeCharts unpauses the charts this upgrade paused and has not resumed
// (by upgrading them) yet.
func (u *Upgrade) resumeCharts(ctx context.Context, r *run) error {
	for _, name := range r.progress.paused() {
		mc, found, err := u.chart(ctx, name)
		if err != nil {
			return err
		}
		if !found || !mc.Spec.Paused {
			continue
		}
		if err := u.patchChart(ctx, name, map[string]any{"paused": false}, nil); err != nil {
			return err
		}
	}
	return nil
}

// NextTimeout is the timeoutSeconds an upgraded chart gets: one more than
// it has (599 when unset; back to 600 past 800). The change makes Rancher
// write a new Bundle, so Fleet deploys the chart again even when nothing
// else of it changed, and its observed generation moves.
func NextTimeout(current int) int {
	if current == 0 {
		current = 598
	}
	if current+1 > 800 {
		return 600
	}
	return current + 1
}

// ChartDeployed judges whether Fleet deployed a ManagedChart at version
// after the upgrade changed it: the chart says that version and runs;
// Rancher passed the change on to the chart's Bundle, whose newest
// generation Fleet processed; the chart's status (Rancher's copy of the
// Bundle's) comes from a generation after observedBefore, the one Fleet had
// observed before the change; and its summary counts the deployment ready
// with none unavailable. bundle may be nil when the cluster's Rancher names
// Bundles differently.
func ChartDeployed(mc *managementv3.ManagedChart, bundle *fleetv1alpha1.Bundle, version string, observedBefore int64) (bool, string) {
	st := mc.Status
	status := fmt.Sprintf("version %s, observed generation %d (before the change: %d), %d of %d ready, %d unavailable",
		mc.Spec.Version, st.ObservedGeneration, observedBefore, st.Summary.Ready, st.Summary.DesiredReady, st.Unavailable)
	if st.Display.State != "" {
		status += ", state " + st.Display.State
	}
	switch {
	case mc.Spec.Version != version:
		return false, status
	case mc.Spec.Paused:
		return false, status + ", paused"
	}
	if bundle != nil {
		helmVersion := ""
		if bundle.Spec.Helm != nil {
			helmVersion = bundle.Spec.Helm.Version
		}
		switch {
		case helmVersion != version || bundle.Spec.Paused:
			return false, status + fmt.Sprintf("; Bundle %s has version %s, paused %v: Rancher has not passed the change on yet", bundle.Name, helmVersion, bundle.Spec.Paused)
		case bundle.Status.ObservedGeneration < bundle.Generation:
			return false, status + fmt.Sprintf("; Fleet has not processed generation %d of Bundle %s yet", bundle.Generation, bundle.Name)
		}
	}
	return st.ObservedGeneration > observedBefore && st.Summary.Ready >= 1 && st.Summary.Ready >= st.Summary.DesiredReady && st.Unavailable == 0, status
}

// bundleOf reads the Bundle Rancher made of a ManagedChart, nil when there
// is none.
func (u *Upgrade) bundleOf(ctx context.Context, chart string) (*fleetv1alpha1.Bundle, error) {
	b := &fleetv1alpha1.Bundle{}
	err := u.Client.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.ManagedChartBundlePrefix + chart}, b)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Bundle %s/%s%s: %w", cluster.FleetLocalNamespace, cluster.ManagedChartBundlePrefix, chart, err)
	}
	return b, nil
}

// waitChart waits until Fleet deployed the chart at version after a change
// made when Fleet had observed observedBefore.
func (u *Upgrade) waitChart(ctx context.Context, name, version string, observedBefore int64, timeout time.Duration) error {
	w := u.wait(fmt.Sprintf("Fleet to deploy ManagedChart %s/%s %s", cluster.FleetLocalNamespace, name, version), timeout,
		fmt.Sprintf("check the chart's bundle (kubectl -n %s get managedchart %s -o yaml; kubectl -n %s get bundle %s%s -o yaml)",
			cluster.FleetLocalNamespace, name, cluster.FleetLocalNamespace, cluster.ManagedChartBundlePrefix, name))
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		mc, found, err := u.chart(ctx, name)
		if err != nil || !found {
			return false, "the ManagedChart does not exist", err
		}
		bundle, err := u.bundleOf(ctx, name)
		if err != nil {
			return false, "", err
		}
		ok, status := ChartDeployed(mc, bundle, version, observedBefore)
		return ok, status, nil
	})
}

// chartChange is the upgrade of one ManagedChart.
type chartChange struct {
	name, version string
	// values are merged into spec.values.
	values map[string]any
	// required: a missing chart fails the step instead of being skipped.
	required bool
}

// upgradeChart moves a chart to a version: it records what Fleet had
// observed, the chart's new timeoutSeconds and the time of the change
// before it changes anything, so that a restarted Job changes the chart the
// same way and waits for the same thing; then it sets the version, the
// timeout and the values, unpauses it, annotates it with the upgrade, and
// waits until Fleet deployed it.
func (u *Upgrade) upgradeChart(ctx context.Context, r *run, c chartChange) error {
	mc, found, err := u.chart(ctx, c.name)
	if err != nil {
		return err
	}
	if !found {
		if c.required {
			return fmt.Errorf("ManagedChart %s/%s does not exist: this is not a Harvester cluster the toolkit can upgrade", cluster.FleetLocalNamespace, c.name)
		}
		log.FromContext(ctx).Info("ManagedChart does not exist: nothing to upgrade", "chart", c.name)
		return nil
	}
	observed, err := r.progress.once(ctx, jobspec.ProgressChart(c.name, "observed"), func() (string, error) { return strconv.FormatInt(mc.Status.ObservedGeneration, 10), nil })
	if err != nil {
		return err
	}
	timeout, err := r.progress.once(ctx, jobspec.ProgressChart(c.name, "timeout"), func() (string, error) { return strconv.Itoa(NextTimeout(mc.Spec.TimeoutSeconds)), nil })
	if err != nil {
		return err
	}
	at, err := r.progress.once(ctx, jobspec.ProgressChart(c.name, "at"), func() (string, error) { return u.Now().UTC().Format(time.RFC3339), nil })
	if err != nil {
		return err
	}
	before, err := strconv.ParseInt(observed, 10, 64)
	if err != nil {
		return fmt.Errorf("the recorded generation of ManagedChart %s is %q: %w", c.name, observed, err)
	}
	seconds, err := strconv.Atoi(timeout)
	if err != nil {
		return fmt.Errorf("the recorded timeout of ManagedChart %s is %q: %w", c.name, timeout, err)
	}
	spec := map[string]any{"version": c.version, "paused": false, "timeoutSeconds": seconds}
	if len(c.values) > 0 {
		spec["values"] = c.values
	}
	annotations := map[string]string{
		cluster.AnnotationLastUpgradeName: u.Plan, cluster.AnnotationLastUpgradeTargetVersion: c.version, cluster.AnnotationLastUpgradeTime: at,
	}
	// A merge patch that changes nothing is no write at all.
	if err := u.patchChart(ctx, c.name, spec, annotations); err != nil {
		return err
	}
	return u.waitChart(ctx, c.name, c.version, before, u.Timeouts.Charts)
}

// upgradeHarvesterCRDChart moves the Harvester CRD chart to the release's
// chart version; the harvester chart needs its CRDs.
func (u *Upgrade) upgradeHarvesterCRDChart(ctx context.Context, r *run) error {
	return u.upgradeChart(ctx, r, chartChange{name: cluster.HarvesterCRDManagedChart, version: r.rel.HarvesterChart})
}

// +kubebuilder:rbac:groups=longhorn.io,resources=settings,verbs=get
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=list

// upgradeHarvesterChart moves the Harvester chart to the release's chart
// version, with the values the new release needs on this cluster
// (HarvesterValues).
func (u *Upgrade) upgradeHarvesterChart(ctx context.Context, r *run) error {
	mc, found, err := u.chart(ctx, cluster.HarvesterManagedChart)
	if err != nil {
		return err
	}
	var values map[string]any
	if found && mc.Spec.Values != nil && len(mc.Spec.Values.Raw) > 0 {
		if err := json.Unmarshal(mc.Spec.Values.Raw, &values); err != nil {
			return fmt.Errorf("reading the values of ManagedChart %s/%s: %w", cluster.FleetLocalNamespace, cluster.HarvesterManagedChart, err)
		}
	}
	drain, _, err := cluster.LonghornSetting(ctx, u.Client, cluster.LonghornNodeDrainPolicy)
	if err != nil {
		return err
	}
	detach, _, err := cluster.LonghornSetting(ctx, u.Client, cluster.LonghornDetachWhenCordoned)
	if err != nil {
		return err
	}
	var classes storagev1.StorageClassList
	if err := u.Client.List(ctx, &classes); err != nil {
		return fmt.Errorf("listing the StorageClasses: %w", err)
	}
	return u.upgradeChart(ctx, r, chartChange{
		name: cluster.HarvesterManagedChart, version: r.rel.HarvesterChart, required: true,
		values: HarvesterValues(values, otherDefaultStorageClass(classes.Items), drain, detach),
	})
}

// otherDefaultStorageClass reports whether a StorageClass other than
// Harvester's Longhorn class is the cluster's default.
func otherDefaultStorageClass(classes []storagev1.StorageClass) bool {
	for _, sc := range classes {
		if sc.Name != cluster.HarvesterLonghornStorageName && sc.Annotations[cluster.AnnotationDefaultStorageClass] == "true" {
			return true
		}
	}
	return false
}

// HarvesterValues returns the values to merge into the harvester chart's:
// with another default StorageClass, Harvester's own is not made the
// default again; Longhorn's defaults as LonghornDefaults says; and
// concurrentAutomaticEngineUpgradePerNodeLimit as the string the new
// Longhorn chart's schema wants.
func HarvesterValues(values map[string]any, otherDefaultSC bool, drainPolicy, detachWhenCordoned string) map[string]any {
	out := map[string]any{}
	if otherDefaultSC {
		out["storageClass"] = map[string]any{"defaultStorageClass": false}
	}
	lh := LonghornDefaults(values, drainPolicy, detachWhenCordoned)
	if v, ok := longhornDefaultSettings(values)["concurrentAutomaticEngineUpgradePerNodeLimit"]; ok {
		if _, isString := v.(string); !isString {
			lh["concurrentAutomaticEngineUpgradePerNodeLimit"] = fmt.Sprint(v)
		}
	}
	if len(lh) > 0 {
		out["longhorn"] = map[string]any{"defaultSettings": lh}
	}
	return out
}

// longhornDefaultSettings returns longhorn.defaultSettings of the values.
func longhornDefaultSettings(values map[string]any) map[string]any {
	if lh, ok := values["longhorn"].(map[string]any); ok {
		if ds, ok := lh["defaultSettings"].(map[string]any); ok {
			return ds
		}
	}
	return map[string]any{}
}

// LonghornDefaults returns the Longhorn default settings the harvester
// chart's values must set: node-drain-policy allow-if-replica-is-stopped and
// detach-manually-attached-volumes-when-cordoned true, each only when the
// values do not set it and Longhorn runs with its own default (an operator
// who chose otherwise keeps their choice).
func LonghornDefaults(values map[string]any, drainPolicy, detachWhenCordoned string) map[string]any {
	set := longhornDefaultSettings(values)
	out := map[string]any{}
	if _, ok := set["nodeDrainPolicy"]; !ok && drainPolicy == cluster.LonghornNodeDrainPolicyDefault {
		out["nodeDrainPolicy"] = cluster.LonghornNodeDrainPolicyHarvester
	}
	if _, ok := set["detachManuallyAttachedVolumesWhenCordoned"]; !ok && detachWhenCordoned == cluster.LonghornDetachWhenCordonedDefault {
		out["detachManuallyAttachedVolumesWhenCordoned"] = true
	}
	return out
}

// upgradeMonitoringLogging moves the monitoring and logging CRD charts to
// the release's versions.
func (u *Upgrade) upgradeMonitoringLogging(ctx context.Context, r *run) error {
	for _, c := range []chartChange{
		{name: cluster.MonitoringCRDManagedChart, version: r.rel.MonitoringChart},
		{name: cluster.LoggingCRDManagedChart, version: r.rel.LoggingChart},
	} {
		if err := u.upgradeChart(ctx, r, c); err != nil {
			return err
		}
	}
	return nil
}

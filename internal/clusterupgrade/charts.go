package clusterupgrade

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
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

// Timeouts the upgraded charts give Helm, in seconds: the Harvester chart's
// post-upgrade hooks take minutes.
const (
	harvesterChartTimeout = 600
	crdChartTimeout       = 60
)

// +kubebuilder:rbac:groups=management.cattle.io,resources=managedcharts,verbs=get;patch

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

// patchChart merge-patches the given fields of a ManagedChart's spec, and
// nothing else: the reduced type does not know every field.
func (u *Upgrade) patchChart(ctx context.Context, name string, spec map[string]any) error {
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	mc := &managementv3.ManagedChart{}
	mc.SetNamespace(cluster.FleetLocalNamespace)
	mc.SetName(name)
	if err := u.Client.Patch(ctx, mc, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("patching ManagedChart %s/%s with %s: %w", cluster.FleetLocalNamespace, name, body, err)
	}
	return nil
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
		if err := u.patchChart(ctx, name, map[string]any{"paused": true}); err != nil {
			return err
		}
	}
	return nil
}

// resumeCharts unpauses the charts this upgrade paused and has not resumed
// yet.
func (u *Upgrade) resumeCharts(ctx context.Context, r *run) error {
	for _, name := range r.progress.paused() {
		mc, found, err := u.chart(ctx, name)
		if err != nil {
			return err
		}
		if !found || !mc.Spec.Paused {
			continue
		}
		if err := u.patchChart(ctx, name, map[string]any{"paused": false}); err != nil {
			return err
		}
	}
	return nil
}

// waitChart waits until Fleet deployed the chart at version.
func (u *Upgrade) waitChart(ctx context.Context, name, version string) error {
	w := u.wait(fmt.Sprintf("Fleet to deploy ManagedChart %s/%s %s", cluster.FleetLocalNamespace, name, version), u.Timeouts.Charts,
		fmt.Sprintf("check the chart's bundle (kubectl -n %s get managedchart %s -o yaml; kubectl get bundles -A)", cluster.FleetLocalNamespace, name))
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		mc, found, err := u.chart(ctx, name)
		if err != nil || !found {
			return false, "the ManagedChart does not exist", err
		}
		ok, status := cluster.ChartDeployed(mc, version)
		return ok, status, nil
	})
}

// upgradeChart sets a chart's version (and more fields), unpauses it, and
// waits until Fleet deployed it. A missing chart is skipped.
func (u *Upgrade) upgradeChart(ctx context.Context, name, version string, extra map[string]any) error {
	mc, found, err := u.chart(ctx, name)
	if err != nil {
		return err
	}
	if !found {
		log.FromContext(ctx).Info("ManagedChart does not exist: nothing to upgrade", "chart", name)
		return nil
	}
	spec := map[string]any{"version": version, "paused": false}
	for k, v := range extra {
		spec[k] = v
	}
	if mc.Spec.Version != version || mc.Spec.Paused || len(extra) > 0 {
		if err := u.patchChart(ctx, name, spec); err != nil {
			return err
		}
	}
	return u.waitChart(ctx, name, version)
}

// +kubebuilder:rbac:groups=longhorn.io,resources=settings,verbs=get

// upgradeHarvesterCharts moves the Harvester CRD and Harvester charts to the
// release's chart version. The harvester chart also gets Harvester's
// Longhorn defaults where the cluster still has Longhorn's.
func (u *Upgrade) upgradeHarvesterCharts(ctx context.Context, r *run) error {
	version := r.rel.HarvesterChart
	if err := u.upgradeChart(ctx, cluster.HarvesterCRDManagedChart, version, map[string]any{"timeoutSeconds": crdChartTimeout}); err != nil {
		return err
	}
	mc, found, err := u.chart(ctx, cluster.HarvesterManagedChart)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("ManagedChart %s/%s does not exist: this is not a Harvester cluster the toolkit can upgrade", cluster.FleetLocalNamespace, cluster.HarvesterManagedChart)
	}
	var values map[string]any
	if mc.Spec.Values != nil && len(mc.Spec.Values.Raw) > 0 {
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
	extra := map[string]any{"timeoutSeconds": harvesterChartTimeout}
	if lh := LonghornDefaults(values, drain, detach); len(lh) > 0 {
		extra["values"] = map[string]any{"longhorn": map[string]any{"defaultSettings": lh}}
	}
	return u.upgradeChart(ctx, cluster.HarvesterManagedChart, version, extra)
}

// LonghornDefaults returns the Longhorn default settings the harvester
// chart's values must set: node-drain-policy allow-if-replica-is-stopped and
// detach-manually-attached-volumes-when-cordoned true, each only when the
// values do not set it and Longhorn runs with its own default (an operator
// who chose otherwise keeps their choice).
func LonghornDefaults(values map[string]any, drainPolicy, detachWhenCordoned string) map[string]any {
	set := map[string]any{}
	if lh, ok := values["longhorn"].(map[string]any); ok {
		if ds, ok := lh["defaultSettings"].(map[string]any); ok {
			set = ds
		}
	}
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
	for _, c := range []struct{ name, version string }{
		{cluster.MonitoringCRDManagedChart, r.rel.MonitoringChart},
		{cluster.LoggingCRDManagedChart, r.rel.LoggingChart},
	} {
		if err := u.upgradeChart(ctx, c.name, c.version, map[string]any{"timeoutSeconds": crdChartTimeout}); err != nil {
			return err
		}
	}
	return nil
}

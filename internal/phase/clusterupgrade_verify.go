package phase

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
)

// The checks of the cluster upgrade's gate, by reason.
const (
	checkHarvesterVersion preflight.Reason = "HarvesterVersion"
	checkHarvesterCharts  preflight.Reason = "HarvesterCharts"
	checkRancherVersion   preflight.Reason = "RancherVersion"
	checkManagedCharts    preflight.Reason = "ManagedCharts"
	checkAddons           preflight.Reason = "Addons"
)

// The cluster upgrade's checks read from the API server.
//
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=cattle-monitoring-system,resources=addons,verbs=get
// +kubebuilder:rbac:groups=management.cattle.io,namespace=fleet-local,resources=managedcharts,verbs=list

// clusterUpgradeChecks verifies what the cluster upgrade changes: Harvester
// runs the release (its server-version), Fleet deployed the Harvester charts
// at the release's chart version, Rancher runs the release's version, every
// ManagedChart is deployed and the ones the upgrade paused are resumed, and
// the monitoring add-on moved to the release's chart.
//
// A check that fails fails the plan at once, so what it reads comes from the
// API server: a cache that has not caught up yet (a watch broken a moment
// ago) would show the objects as the Job found them.
func clusterUpgradeChecks(ctx context.Context, s *Scope) ([]preflight.Verdict, error) {
	rm := s.Plan.Status.ReleaseMetadata
	harvester, err := harvesterVersionCheck(ctx, s)
	if err != nil {
		return nil, err
	}
	checks := []preflight.Verdict{harvester}

	var charts managementv3.ManagedChartList
	if err := s.APIReader.List(ctx, &charts, client.InNamespace(cluster.FleetLocalNamespace)); err != nil {
		return nil, fmt.Errorf("listing the ManagedCharts of %s: %w", cluster.FleetLocalNamespace, err)
	}
	checks = append(checks, harvesterChartsCheck(charts.Items, rm.HarvesterChart))
	paused, err := chartsPausedByUpgrade(ctx, s)
	if err != nil {
		return nil, err
	}
	checks = append(checks, managedChartsCheck(charts.Items, paused))

	rancher := &managementv3.Setting{}
	found, err := s.get(ctx, "", cluster.RancherServerVersionSetting, rancher)
	switch {
	case err != nil:
		return nil, err
	case !found:
		checks = append(checks, preflight.Pending(checkRancherVersion, "Rancher's Setting %s does not exist; expected %s", cluster.RancherServerVersionSetting, rm.Rancher))
	case rancher.Value != rm.Rancher:
		checks = append(checks, preflight.Pending(checkRancherVersion, "Rancher reports version %s (Setting management.cattle.io %s), expected %s: check the rancher Deployment in %s",
			orNothing(rancher.Value), cluster.RancherServerVersionSetting, rm.Rancher, cluster.CattleNamespace))
	default:
		checks = append(checks, preflight.Passed(checkRancherVersion, "Rancher reports %s", rancher.Value))
	}

	addons, err := addonsCheck(ctx, s)
	if err != nil {
		return nil, err
	}
	return append(checks, addons), nil
}

// harvesterVersionCheck: Harvester reports the release's version in its
// server-version Setting, which the new Harvester writes when it starts.
func harvesterVersionCheck(ctx context.Context, s *Scope) (preflight.Verdict, error) {
	want := s.Plan.Status.ReleaseMetadata.Harvester
	setting := &harvesterv1beta1.Setting{}
	found, err := s.get(ctx, "", cluster.ServerVersionSetting, setting)
	switch {
	case err != nil:
		return preflight.Verdict{}, err
	case !found:
		return preflight.Pending(checkHarvesterVersion, "Harvester's Setting %s does not exist; expected %s", cluster.ServerVersionSetting, want), nil
	case setting.Value != want:
		return preflight.Pending(checkHarvesterVersion, "Harvester reports version %s (Setting harvesterhci.io %s), expected %s: check the harvester pods in %s (kubectl -n %[4]s get pods -l app.kubernetes.io/name=harvester)",
			orNothing(setting.Value), cluster.ServerVersionSetting, want, cluster.HarvesterNamespace), nil
	}
	return preflight.Passed(checkHarvesterVersion, "Harvester reports %s", setting.Value), nil
}

// harvesterChartsCheck: the harvester and harvester-crd ManagedCharts ask
// for the release's chart version and Fleet deployed it. A chart that still
// asks for another version was not upgraded, and nothing will upgrade it.
func harvesterChartsCheck(charts []managementv3.ManagedChart, version string) preflight.Verdict {
	var wrong, waiting, ok []string
	for _, name := range []string{cluster.HarvesterCRDManagedChart, cluster.HarvesterManagedChart} {
		i := slices.IndexFunc(charts, func(mc managementv3.ManagedChart) bool { return mc.Name == name })
		if i < 0 {
			if name == cluster.HarvesterManagedChart {
				wrong = append(wrong, fmt.Sprintf("ManagedChart %s/%s does not exist", cluster.FleetLocalNamespace, name))
			}
			continue
		}
		mc := &charts[i]
		deployed, status := cluster.ChartDeployed(mc, version)
		switch {
		case mc.Spec.Version != version:
			wrong = append(wrong, fmt.Sprintf("ManagedChart %s/%s asks for version %s, expected %s", cluster.FleetLocalNamespace, name, orNothing(mc.Spec.Version), version))
		case !deployed:
			waiting = append(waiting, fmt.Sprintf("ManagedChart %s/%s is not deployed at %s yet (%s)", cluster.FleetLocalNamespace, name, version, status))
		default:
			ok = append(ok, name)
		}
	}
	switch {
	case len(wrong) > 0:
		return preflight.Failed(checkHarvesterCharts, "%s: the cluster-upgrade Job did not upgrade them; read its log (kubectl -n %s logs job/<plan>-cluster-upgrade)", strings.Join(wrong, "; "), cluster.HarvesterNamespace)
	case len(waiting) > 0:
		return preflight.Pending(checkHarvesterCharts, "%s", strings.Join(waiting, "; "))
	}
	return preflight.Passed(checkHarvesterCharts, "Fleet deployed %s at %s", strings.Join(ok, " and "), version)
}

// chartsPausedByUpgrade reads which ManagedCharts the cluster-upgrade Job
// paused, from its progress record.
func chartsPausedByUpgrade(ctx context.Context, s *Scope) ([]string, error) {
	cm := &corev1.ConfigMap{}
	err := s.APIReader.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeProgress(s.Plan.Name)}, cm)
	if err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return jobspec.PausedCharts(cm), nil
}

// managedChartsCheck: every ManagedChart is deployed, and the ones the
// upgrade paused are resumed. A chart paused before the upgrade stays
// paused: that is the operator's choice, worth a warning.
func managedChartsCheck(charts []managementv3.ManagedChart, pausedByUpgrade []string) preflight.Verdict {
	var stillPaused, waiting, pausedBefore []string
	for i := range charts {
		mc := &charts[i]
		ready, status := cluster.ChartReady(mc)
		switch {
		case mc.Spec.Paused && slices.Contains(pausedByUpgrade, mc.Name):
			stillPaused = append(stillPaused, mc.Name)
		case mc.Spec.Paused:
			pausedBefore = append(pausedBefore, mc.Name)
		case !ready:
			waiting = append(waiting, fmt.Sprintf("%s (%s)", mc.Name, status))
		}
	}
	switch {
	case len(stillPaused) > 0:
		return preflight.Failed(checkManagedCharts, "ManagedCharts %s in %s are still paused by the upgrade: Fleet deploys nothing of them; resume them (kubectl -n %[2]s patch managedchart <name> --type merge -p '{\"spec\":{\"paused\":false}}')",
			strings.Join(stillPaused, ", "), cluster.FleetLocalNamespace)
	case len(waiting) > 0:
		return preflight.Pending(checkManagedCharts, "waiting for Fleet to deploy ManagedCharts %s", strings.Join(waiting, ", "))
	case len(pausedBefore) > 0:
		return preflight.Warning(checkManagedCharts, "ManagedCharts %s were paused before the upgrade and stay paused: Fleet does not deploy their new versions until they are resumed", strings.Join(pausedBefore, ", "))
	}
	return preflight.Passed(checkManagedCharts, "all %d ManagedCharts deployed and resumed", len(charts))
}

// addonsCheck: the monitoring add-on asks for the release's chart version
// and, when enabled, is deployed again. An add-on that is not deployed
// again does not hold up the upgrade (the operator fixes it after), so it
// only warns.
func addonsCheck(ctx context.Context, s *Scope) (preflight.Verdict, error) {
	want := s.Plan.Status.ReleaseMetadata.MonitoringChart
	a := &harvesterv1beta1.Addon{}
	err := s.APIReader.Get(ctx, client.ObjectKey{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon}, a)
	found := err == nil
	switch {
	case client.IgnoreNotFound(err) != nil:
		return preflight.Verdict{}, err
	case !found:
		return preflight.Passed(checkAddons, "no %s add-on to upgrade", cluster.MonitoringAddon), nil
	case want != "" && a.Spec.Version != want:
		return preflight.Failed(checkAddons, "Addon %s/%s asks for version %s, expected %s: the cluster-upgrade Job did not upgrade it",
			a.Namespace, a.Name, orNothing(a.Spec.Version), want), nil
	case a.Spec.Enabled && a.Status.Status != cluster.AddonStateDeployed:
		return preflight.Warning(checkAddons, "Addon %s/%s is at %s but reports %q, not %s: check it after the upgrade (kubectl -n %[1]s get addon %[2]s -o yaml)",
			a.Namespace, a.Name, a.Spec.Version, a.Status.Status, cluster.AddonStateDeployed), nil
	}
	return preflight.Passed(checkAddons, "Addon %s/%s at %s", a.Namespace, a.Name, a.Spec.Version), nil
}

// orNothing spells an empty value for messages.
func orNothing(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

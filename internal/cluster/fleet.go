package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// Fleet's objects.
const (
	// FleetSystemNamespace holds fleet-controller and its ConfigMap.
	FleetSystemNamespace = "cattle-fleet-system"
	// FleetLocalSystemNamespace holds the agent of the local cluster.
	FleetLocalSystemNamespace = "cattle-fleet-local-system"
	// FleetControllerDeployment and its ConfigMap (data "config").
	FleetControllerDeployment = "fleet-controller"
	FleetControllerConfigMap  = "fleet-controller"
	FleetControllerConfigKey  = "config"
	// FleetAgentDeployment is the agent of the local cluster.
	FleetAgentDeployment = "fleet-agent"
	// FleetClusterCRD is the CRD of fleet.cattle.io Clusters.
	FleetClusterCRD = "clusters.fleet.cattle.io"
	// FleetAgentTLSModeField is a field of newer Fleets, in the Cluster
	// CRD's status and in fleet-controller's config, that the cluster
	// upgrade waits for after Rancher brought a new Fleet.
	FleetAgentTLSModeField = "agentTLSMode"
	// ManagedChartBundlePrefix: Rancher deploys ManagedChart <name> as
	// Bundle mcc-<name> in the chart's namespace.
	ManagedChartBundlePrefix = "mcc-"
	// ConditionImported is a fleet Cluster's import condition.
	ConditionImported = "Imported"
)

// ManagedChartBundleSpec is what Rancher writes into the Bundle of a
// ManagedChart: its pause, release, version, timeout and values.
func ManagedChartBundleSpec(mc *managementv3.ManagedChart) fleetv1alpha1.BundleSpec {
	return fleetv1alpha1.BundleSpec{Paused: mc.Spec.Paused, Helm: &fleetv1alpha1.HelmOptions{
		ReleaseName: mc.Spec.ReleaseName, Version: mc.Spec.Version, TimeoutSeconds: mc.Spec.TimeoutSeconds,
		Values: mc.Spec.Values.DeepCopy()}}
}

// SameBundleSpec reports whether two Bundle specs are equal as data: the API
// server stores the schemaless values with their keys sorted.
func SameBundleSpec(a, b fleetv1alpha1.BundleSpec) bool {
	return sameData(a, b)
}

// sameData reports whether a and b have the same JSON as data.
func sameData(a, b any) bool {
	var x, y any
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil || json.Unmarshal(ja, &x) != nil || json.Unmarshal(jb, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// BundleReady judges a Bundle as `kubectl get bundles` would show it ready:
// Fleet has processed its latest generation and reports Ready.
func BundleReady(b *fleetv1alpha1.Bundle) (bool, string) {
	if b.Status.ObservedGeneration < b.Generation {
		return false, fmt.Sprintf("generation %d not processed yet (observed %d)", b.Generation, b.Status.ObservedGeneration)
	}
	ready := common.FindCondition(b.Status.Conditions, ConditionReady)
	if ready == nil || ready.Status != "True" {
		msg := "not Ready"
		if ready != nil && ready.Message != "" {
			msg += ": " + ready.Message
		}
		return false, msg
	}
	return true, ""
}

// BundlesNotReady returns, sorted, every Fleet Bundle that is not ready,
// with why; the Bundle of a ManagedChart counts as not ready until Rancher
// passed the chart's version and pause on to it (a change Rancher has not
// passed on yet is not in the Bundle's generation).
func BundlesNotReady(ctx context.Context, c client.Reader) ([]string, error) {
	var bundles fleetv1alpha1.BundleList
	if err := c.List(ctx, &bundles); err != nil {
		return nil, fmt.Errorf("listing Fleet's bundles: %w", err)
	}
	var charts managementv3.ManagedChartList
	if err := c.List(ctx, &charts); err != nil {
		return nil, fmt.Errorf("listing the ManagedCharts: %w", err)
	}
	byName := map[string]*fleetv1alpha1.Bundle{}
	var out []string
	for i := range bundles.Items {
		b := &bundles.Items[i]
		byName[b.Namespace+"/"+b.Name] = b
		if ok, why := BundleReady(b); !ok {
			out = append(out, fmt.Sprintf("%s/%s (%s)", b.Namespace, b.Name, why))
		}
	}
	for _, mc := range charts.Items {
		name := mc.Namespace + "/" + ManagedChartBundlePrefix + mc.Name
		b := byName[name]
		switch {
		case b == nil:
			out = append(out, fmt.Sprintf("%s (Rancher has not made ManagedChart %s/%s's Bundle yet)", name, mc.Namespace, mc.Name))
		case b.Spec.Paused != mc.Spec.Paused || b.Spec.Helm == nil || b.Spec.Helm.Version != mc.Spec.Version:
			out = append(out, fmt.Sprintf("%s (Rancher has not passed ManagedChart %s/%s's change on yet)", name, mc.Namespace, mc.Name))
		}
	}
	sort.Strings(out)
	return out, nil
}

// WaitBundles waits, at most timeout, for every Fleet Bundle to be ready,
// and reports the ones that are not without failing: as in Harvester's
// upgrade, they do not hold the upgrade up (the charts' own waits caught
// what matters), and the operator fixes them after. It fails only when ctx
// ends.
func WaitBundles(ctx context.Context, c client.Reader, timeout, interval time.Duration) error {
	w := waitfor.Wait{What: "every Fleet bundle to be ready", Timeout: timeout, Interval: interval}
	err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		left, err := BundlesNotReady(ctx, c)
		if err != nil {
			return false, "", err
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	if err != nil && ctx.Err() == nil {
		log.FromContext(ctx).Info("some Fleet bundles are not ready; the upgrade goes on: check them after it (kubectl get bundles -A)", "reason", err.Error())
		return nil
	}
	return err
}

package cluster

import (
	"fmt"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
)

// ChartReady judges whether Fleet deployed a ManagedChart's current spec:
// it observed the latest generation and reports Ready. status describes the
// chart for messages.
func ChartReady(mc *managementv3.ManagedChart) (ready bool, status string) {
	cond := common.FindCondition(mc.Status.Conditions, ConditionReady)
	status = fmt.Sprintf("version %s, generation %d, observed %d", mc.Spec.Version, mc.Generation, mc.Status.ObservedGeneration)
	if mc.Spec.Paused {
		status += ", paused"
	}
	if cond != nil {
		status += ", Ready=" + cond.Status
		if cond.Message != "" {
			status += " (" + cond.Message + ")"
		}
	}
	return mc.Status.ObservedGeneration >= mc.Generation && cond != nil && cond.Status == "True", status
}

// ChartDeployed judges whether Fleet deployed a ManagedChart at version:
// the spec says so, the chart is not paused, and it is ready.
func ChartDeployed(mc *managementv3.ManagedChart, version string) (bool, string) {
	ready, status := ChartReady(mc)
	return mc.Spec.Version == version && !mc.Spec.Paused && ready, status
}

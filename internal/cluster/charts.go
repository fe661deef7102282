package cluster

import (
	"fmt"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
)

// ChartReady judges whether Fleet runs what a ManagedChart asks for, from
// its status (Rancher's copy of its Bundle's): every deployment ready, none
// unavailable, and the Ready condition not False. status describes the
// chart for messages.
func ChartReady(mc *managementv3.ManagedChart) (ready bool, status string) {
	st := mc.Status
	status = fmt.Sprintf("version %s, %d of %d ready, %d unavailable", mc.Spec.Version, st.Summary.Ready, st.Summary.DesiredReady, st.Unavailable)
	if mc.Spec.Paused {
		status += ", paused"
	}
	cond := common.FindCondition(st.Conditions, ConditionReady)
	if cond != nil && cond.Status != "True" && cond.Message != "" {
		status += ", Ready=" + cond.Status + " (" + cond.Message + ")"
	}
	return st.Summary.Ready >= 1 && st.Summary.Ready >= st.Summary.DesiredReady && st.Unavailable == 0 &&
		(cond == nil || cond.Status != "False"), status
}

// ChartDeployed judges whether Fleet runs a ManagedChart at version: the
// spec says so, the chart is not paused, and it is ready.
func ChartDeployed(mc *managementv3.ManagedChart, version string) (bool, string) {
	ready, status := ChartReady(mc)
	return mc.Spec.Version == version && !mc.Spec.Paused && ready, status
}

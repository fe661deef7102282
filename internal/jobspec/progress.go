package jobspec

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The keys of the cluster-upgrade Job's progress, the ConfigMap
// <plan>-cluster-upgrade in harvester-system (names.ClusterUpgradeProgress):
// a restarted Job resumes after the steps it finished, and the manager reads
// which charts it paused.
const (
	// ProgressDone lists the finished steps, comma-separated, in order.
	ProgressDone = "done"
	// ProgressPaused lists the ManagedCharts the upgrade paused (and so
	// must resume); charts paused before the upgrade are not listed.
	ProgressPaused = "paused"
	// ProgressRancher says whether the upgrade upgrades Rancher, decided
	// before anything changes.
	ProgressRancher = "rancher"
	// ProgressFleetSaved holds fleet-controller's settings as the old
	// Rancher had them.
	ProgressFleetSaved = "fleet.saved"
	// ProgressFleetGeneration is the redeployAgentGeneration the upgrade
	// asks Fleet for, and ProgressFleetRedeployAt when it asked.
	ProgressFleetGeneration = "fleet.redeploy-generation"
	ProgressFleetRedeployAt = "fleet.redeploy-at"
)

// ProgressChart is the key under which a step records what it saw of a
// ManagedChart before changing it (what: observed, timeout, at).
func ProgressChart(chart, what string) string { return "chart." + chart + "." + what }

// ProgressAddon is the key under which the time of an Addon's change is
// recorded, for an Addon whose redeployment the upgrade waits for.
func ProgressAddon(namespace, name string) string { return "addon." + namespace + "." + name }

// ProgressList reads a list the progress records under key.
func ProgressList(cm *corev1.ConfigMap, key string) []string {
	if cm.Data[key] == "" {
		return nil
	}
	return strings.Split(cm.Data[key], ",")
}

// ProgressListValue is the value that records list under a key.
func ProgressListValue(list []string) string { return strings.Join(list, ",") }

// PausedCharts returns the ManagedCharts a cluster upgrade paused, from its
// progress ConfigMap: the manager checks that each was resumed.
func PausedCharts(cm *corev1.ConfigMap) []string { return ProgressList(cm, ProgressPaused) }

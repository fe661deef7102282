package planstatus

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// BenchmarkStatusPatch is one write of a 500-node upgrade: a node moves
// and the progress condition says so. Its cost must not grow with what did
// not change.
func BenchmarkStatusPatch(b *testing.B) {
	at := metav1.Now()
	stored := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "42"},
		Status: v1beta1.UpgradePlanStatus{
			CurrentPhase:    v1beta1.PhaseNodeUpgrading,
			PreviousVersion: ptr.To("v1.7.0"),
			ReleaseMetadata: &v1beta1.ReleaseMetadata{Harvester: "v1.8.0", HarvesterChart: "1.8.0", OS: "Harvester v1.8.0",
				Kubernetes: "v1.34.4+rke2r1", Rancher: "v2.13.1", MonitoringChart: "105.1.0", MinUpgradableVersion: "v1.7.0"},
			Version:             &v1beta1.VersionSnapshot{ISOURL: "https://releases.example/harvester-v1.8.0-amd64.iso", ISOChecksum: fmt.Sprintf("%0128d", 7)},
			Conditions:          []metav1.Condition{{Type: "Progressing", Status: "True", Reason: "NodeUpgrade", Message: "0 of 500 nodes upgraded", LastTransitionTime: at}},
			NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{},
		}}
	for _, p := range []v1beta1.UpgradePlanPhase{v1beta1.PhaseInitializing, v1beta1.PhaseISODownloading, v1beta1.PhaseRepoCreating,
		v1beta1.PhaseMetadataPopulating, v1beta1.PhaseImagePreloading, v1beta1.PhaseClusterUpgrading, v1beta1.PhaseNodeUpgrading} {
		stored.Status.PhaseTransitionTimestamps = append(stored.Status.PhaseTransitionTimestamps, v1beta1.PhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: at})
	}
	for i := range 500 {
		stored.Status.NodeUpgradeStatuses[fmt.Sprintf("node-%d", i)] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeStateImagePreloaded, LastTransitionTime: &at}
	}
	working := stored.DeepCopy()
	working.Status.NodeUpgradeStatuses["node-7"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeStatePreDraining, LastTransitionTime: &at}
	working.Status.Conditions[0].Message = "upgrading node node-7 (PreDraining)"
	b.ReportAllocs()
	for b.Loop() {
		if patch, _, err := statusPatch(stored, working); err != nil || patch == nil {
			b.Fatal(patch, err)
		}
	}
}

package phase_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// waitRebuilding waits until the nodes' counts of replicas being rebuilt
// are want (the nodes not named count none), and fails a count that came
// later than an engine's change brings a pass: sooner than the watchdog's
// look (phase.WatchInterval) would.
func waitRebuilding(t *testing.T, h *plantest.Harness, plan, what string, want map[string]int32) {
	t.Helper()
	start := time.Now()
	h.Eventually(what, func() (bool, string) {
		got := map[string]int32{}
		for node, st := range h.Get(plan).Status.NodeUpgradeStatuses {
			if st.ReplicasRebuilding != 0 {
				got[node] = st.ReplicasRebuilding
			}
		}
		return maps.Equal(got, want), fmt.Sprintf("replicas rebuilding %v, want %v", got, want)
	})
	if took := time.Since(start); took > phase.WatchInterval/3 {
		t.Errorf("%s took %s: the engines' change brought no pass", what, took.Round(time.Millisecond))
	}
}

// TestReplicasRebuildingPerNode: each node's status counts the Longhorn
// replicas on it that their volume's engine rebuilds (WO); replicas in sync
// (RW) or failed (ERR) do not count. The count follows the engines as they
// change, and is gone once every replica is in sync; while nothing changes,
// nothing is written.
func TestReplicasRebuildingPerNode(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(3)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)

	h.Replicas("pvc-a", "node-1=WO", "node-2=RW", "node-3=ERR")
	h.Replicas("pvc-b", "node-1=WO", "node-2=WO", "node-3=RW")
	waitRebuilding(t, h, p.Name, "the nodes to count their replicas rebuilding", map[string]int32{"node-1": 2, "node-2": 1})
	h.Eventually("a whole pass without a write", func() (bool, string) {
		writes := h.WritesDuring(func() { h.WholePass(p.Name) })
		return len(writes) == 0, apicount.Format(writes)
	})

	h.Replicas("pvc-b", "node-1=RW", "node-2=WO", "node-3=RW")
	waitRebuilding(t, h, p.Name, "node-1's rebuild to end", map[string]int32{"node-1": 1, "node-2": 1})
	h.Replicas("pvc-a", "node-1=RW", "node-2=RW", "node-3=WO")
	h.Replicas("pvc-b", "node-1=RW", "node-2=RW", "node-3=RW")
	waitRebuilding(t, h, p.Name, "node-3's replica to rebuild, the others in sync", map[string]int32{"node-3": 1})
	h.Replicas("pvc-a", "node-1=RW", "node-2=RW", "node-3=RW")
	waitRebuilding(t, h, p.Name, "every replica in sync", map[string]int32{})
}

// TestReplicasRebuildingToThePlansEnd: the counts are kept after the node
// upgrade, through the image cleanup and the final verification, so that
// the last node's rebuild is seen to its end.
func TestReplicasRebuildingToThePlansEnd(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(2)
	web := h.VM("web", "node-1")
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	for _, n := range nodes {
		h.UpgradeNode(p.Name, n)
	}
	p = h.WaitPhase(p.Name, v1beta1.PhaseCleaningUp)
	h.Replicas("pvc-a", "node-1=RW", "node-2=WO")
	waitRebuilding(t, h, p.Name, "the last node's rebuild, during the image cleanup", map[string]int32{"node-2": 1})
	h.Replicas("pvc-a", "node-1=RW", "node-2=RW")
	waitRebuilding(t, h, p.Name, "the rebuild's end, during the image cleanup", map[string]int32{})

	// A VM off holds the final verification (Final/VMsRunning).
	h.InstanceEnds(web, "Succeeded")
	for _, n := range nodes {
		h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImageCleanupPlan(p.Name), n), true)
	}
	h.Eventually("the final verification to wait for the VM", func() (bool, string) {
		p = h.Get(p.Name)
		for _, c := range p.Status.Checks {
			if c.Name == phase.GateFinal+"/VMsRunning" && c.Result == v1beta1.CheckPending {
				return true, ""
			}
		}
		return false, plantest.Describe(p)
	})
	h.Replicas("pvc-a", "node-1=WO", "node-2=RW")
	waitRebuilding(t, h, p.Name, "a rebuild during the final verification", map[string]int32{"node-1": 1})
}

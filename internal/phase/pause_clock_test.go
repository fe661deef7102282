package phase_test

import (
	"strings"
	"testing"
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestHealthGateClockStopsWhilePaused: a node held by the health gate, then
// the plan paused for longer than the gate's deadline. On resume the node
// still waits (the pause did not count); the deadline fails it only once
// the gate has held it that long while the plan ran.
func TestHealthGateClockStopsWhilePaused(t *testing.T) {
	h := plantest.New(t)
	p := h.Node1Upgraded(2)

	h.Volume("pvc-broken", cluster.LonghornRobustnessFaulted)
	h.RancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	h.WaitEventually(p.Name, "node-2", "Longhorn volume pvc-broken (faulted)")
	gate := h.Cfg.Deadlines.HealthGate

	h.Clock.Step(gate / 2)
	h.SetPaused(p.Name, true)
	h.Eventually("the pause recorded", func() (bool, string) {
		p = h.Get(p.Name)
		return len(p.Status.Pauses) == 1 && p.Status.Pauses[0].End == nil, plantest.Describe(p)
	})
	h.Clock.Step(2 * gate)
	h.SetPaused(p.Name, false)
	h.Eventually("the pause closed", func() (bool, string) {
		p = h.Get(p.Name)
		return len(p.Status.Pauses) == 1 && p.Status.Pauses[0].End != nil, plantest.Describe(p)
	})
	h.WholePass(p.Name)
	p = h.Get(p.Name)
	if p.Status.CurrentPhase != v1beta1.PhaseNodeUpgrading {
		t.Fatalf("the plan counted its pause against the health gate: %s", plantest.Describe(p))
	}
	if st := p.Status.NodeUpgradeStatuses["node-2"]; !strings.Contains(st.Message, "pvc-broken") {
		t.Errorf("node-2 after the pause: %+v", st)
	}

	// Half the gate ran before the pause: the other half fails it.
	h.Clock.Step(gate/2 + time.Second)
	h.Touch(p.Name)
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); c == nil || !strings.Contains(c.Message, "node node-2 waited") {
		t.Errorf("failure %+v", c)
	}
}

// TestVerificationClockStopsWhilePaused: the cluster-upgrade gate waits for
// Harvester's version; a pause longer than its deadline does not fail it.
func TestVerificationClockStopsWhilePaused(t *testing.T) {
	h := plantest.New(t)
	p, _ := h.ToClusterUpgrading(2)
	h.SetSetting(&managementv3.Setting{}, cluster.RancherServerVersionSetting, h.Repo.Release.Rancher)
	h.UpgradeHarvesterChart()
	h.ChartDeployed(cluster.HarvesterManagedChart)
	h.FinishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(p.Name), true)
	p = h.WaitProgressing(p.Name, "verifying the cluster upgrade")

	h.SetPaused(p.Name, true)
	h.Eventually("the pause recorded", func() (bool, string) {
		p = h.Get(p.Name)
		return len(p.Status.Pauses) == 1, plantest.Describe(p)
	})
	h.Clock.Step(2 * h.Cfg.Deadlines.Verify)
	h.SetPaused(p.Name, false)
	h.Eventually("the pause closed", func() (bool, string) {
		p = h.Get(p.Name)
		return len(p.Status.Pauses) == 1 && p.Status.Pauses[0].End != nil, plantest.Describe(p)
	})
	h.WholePass(p.Name)
	if p = h.Get(p.Name); p.Status.CurrentPhase != v1beta1.PhaseClusterUpgrading {
		t.Fatalf("the plan counted its pause against the verification deadline: %s", plantest.Describe(p))
	}
	h.Clock.Step(h.Cfg.Deadlines.Verify)
	h.Touch(p.Name)
	h.WaitPhase(p.Name, v1beta1.PhaseFailed)
}

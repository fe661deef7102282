package status

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
)

// Stall is a node or a step that has overrun its estimate by the margin.
type Stall struct {
	// What is "node node-3" or "step ClusterUpgrade"; Object the object
	// involved (Node/node-3, UpgradePlan/name).
	What   string `json:"what"`
	Object string `json:"object"`
	// Spent is the time it has taken so far, less the time the plan was
	// paused; Estimate what it was expected to take.
	Spent    metav1.Duration `json:"spent"`
	Estimate metav1.Duration `json:"estimate"`
}

// StallMargin is how far past its estimate a node or step may run before
// it is called stalled: half the estimate, at least 30 s.
func StallMargin(estimate time.Duration) time.Duration {
	return max(estimate/2, 30*time.Second)
}

// stalled finds, from the same history as the estimate (the nodes that
// finished, the steps of the previous successful plan), the node or step
// that runs past its estimate by StallMargin. A paused plan is not stalled.
func stalled(p *v1beta1.UpgradePlan, s *Status, previous *v1beta1.UpgradePlan, now time.Time) *Stall {
	st := &p.Status
	if p.IsPaused() || p.IsFinished() || !isActive(s.Phase) || len(s.Phases) == 0 {
		return nil
	}
	over := func(what, object string, began time.Time, spent, estimate time.Duration) *Stall {
		spent -= pipeline.PausedSince(st, began, now)
		if estimate <= 0 || spent <= estimate+StallMargin(estimate) {
			return nil
		}
		return &Stall{What: what, Object: object, Spent: metav1.Duration{Duration: spent}, Estimate: metav1.Duration{Duration: estimate}}
	}
	current := s.Phases[len(s.Phases)-1]
	if s.Step == v1beta1.StepNodeUpgrade {
		var sum time.Duration
		finished := 0
		var upgrading *Node
		for i, n := range s.Nodes {
			switch {
			case n.Upgrading:
				upgrading = &s.Nodes[i]
			case n.Upgrade != nil:
				sum += n.Upgrade.Duration
				finished++
			}
		}
		if upgrading == nil || finished == 0 {
			return nil
		}
		began := now.Add(-upgrading.Upgrade.Duration)
		return over("node "+upgrading.Name, "Node/"+upgrading.Name, began, upgrading.Upgrade.Duration, sum/time.Duration(finished))
	}
	if previous == nil {
		return nil
	}
	var typical time.Duration
	for _, pt := range phaseTimes(&previous.Status, now) {
		if pt.Step == current.Step {
			typical = pt.Duration.Duration
		}
	}
	return over("step "+current.Step, "UpgradePlan/"+p.Name, current.Started.Time, current.Duration.Duration, typical)
}

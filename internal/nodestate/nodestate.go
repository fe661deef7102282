// Package nodestate is the per-node state machine of the NodeUpgrade phase,
// as a pure function: given what is observed about each node (its recorded
// state, Rancher's drain-hook requests, its Jobs, whether it came back from
// its reboot), it decides each node's next state and which Job to start.
//
// Starting a Job is always decided from a state recorded in an earlier pass
// (PreDraining, PostDraining, SingleNodeUpgrading): the state is written
// first, with optimistic locking, and the Job is created only once the
// stored plan says so. A pass that decided on a stale plan therefore cannot
// start a second drain.
package nodestate

import (
	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// JobStatus is what is known about one of a node's Jobs.
type JobStatus int

// The Job statuses.
const (
	JobNone JobStatus = iota
	JobRunning
	JobSucceeded
	JobFailed
)

// Job is a node's Job of one type.
type Job struct {
	Status          JobStatus
	Reason, Message string
}

// Node is what is observed about one node in one pass.
type Node struct {
	Name  string
	State v1beta1.NodeUpgradeState
	// Paused: the node is listed in spec.nodeUpgradeOption.pauseNodes.
	Paused bool
	// PreDrainRequested: Rancher asks for the pre-drain hook of this node.
	PreDrainRequested bool
	// PostDrainRequested: Rancher asks for the post-drain hook.
	PostDrainRequested bool
	PreDrain           Job
	PostDrain          Job
	SingleNodeUpgrade  Job
	// Rebooted: the node is Ready and reports the release's OS image.
	Rebooted bool
	// RebootOverdue: the node has waited for its reboot longer than allowed.
	RebootOverdue bool
	// RebootReport describes the node while it is not back (for messages).
	RebootReport string
}

// Decision is what to do about one node.
type Decision struct {
	State   v1beta1.NodeUpgradeState
	Reason  string
	Message string
	// StartJob is the type of Job to create now (v1beta1.JobType…), or "".
	StartJob string
}

// drainSlot are the states of a node being drained, upgraded and rebooted;
// at most one node may be in them at any time.
var drainSlot = []v1beta1.NodeUpgradeState{
	v1beta1.NodeStatePreDraining, v1beta1.NodeStatePreDrained,
	v1beta1.NodeStatePostDraining, v1beta1.NodeStateWaitingReboot,
}

// InDrainSlot reports whether a state occupies the drain slot.
func InDrainSlot(s v1beta1.NodeUpgradeState) bool {
	for _, d := range drainSlot {
		if s == d {
			return true
		}
	}
	return false
}

// pausedMessage is what a paused node reports.
const pausedMessage = "Node upgrade paused as requested by the user: remove the node from spec.nodeUpgradeOption.pauseNodes to resume"

// Decide returns the decision for every node, keyed by name. singleNode
// selects the single-node path, which needs no Rancher request.
func Decide(nodes []Node, singleNode bool) map[string]Decision {
	busy := ""
	for _, n := range nodes {
		if InDrainSlot(n.State) {
			busy = n.Name
		}
	}
	out := make(map[string]Decision, len(nodes))
	for _, n := range nodes {
		d := decide(n, singleNode, busy)
		if !v1beta1.CanMoveNodeState(n.State, d.State) {
			// The machine never moves a node back; keep what is recorded.
			d = Decision{State: n.State}
		}
		out[n.Name] = d
	}
	return out
}

func decide(n Node, singleNode bool, busy string) Decision {
	keep := Decision{State: n.State}
	switch n.State {
	case "", v1beta1.NodeStateImagePreloading, v1beta1.NodeStateImagePreloaded, v1beta1.NodeStateUpgradePaused:
		if n.Paused {
			return Decision{State: v1beta1.NodeStateUpgradePaused, Reason: v1beta1.ReasonAdministrativelyPaused, Message: pausedMessage}
		}
		if singleNode {
			return Decision{State: v1beta1.NodeStateSingleNodeUpgrading}
		}
		if !n.PreDrainRequested {
			if n.State == v1beta1.NodeStateUpgradePaused {
				return Decision{State: n.State, Message: "resumed: waiting for Rancher to reach this node"}
			}
			return Decision{State: v1beta1.NodeStateImagePreloaded}
		}
		if busy != "" && busy != n.Name {
			return Decision{State: n.State, Message: "waiting for node " + busy + " to finish its upgrade"}
		}
		return Decision{State: v1beta1.NodeStatePreDraining}

	case v1beta1.NodeStatePreDraining:
		return jobStep(n.State, n.PreDrain, v1beta1.JobTypePreDrain, v1beta1.NodeStatePreDrained, v1beta1.NodeStatePreDrainFailed)

	case v1beta1.NodeStatePreDrained:
		if n.PostDrainRequested {
			return Decision{State: v1beta1.NodeStatePostDraining}
		}
		return keep

	case v1beta1.NodeStatePostDraining:
		return jobStep(n.State, n.PostDrain, v1beta1.JobTypePostDrain, v1beta1.NodeStateWaitingReboot, v1beta1.NodeStatePostDrainFailed)

	case v1beta1.NodeStateSingleNodeUpgrading:
		return jobStep(n.State, n.SingleNodeUpgrade, v1beta1.JobTypeSingleNodeUpgrade, v1beta1.NodeStateWaitingReboot, v1beta1.NodeStateSingleNodeUpgradeFailed)

	case v1beta1.NodeStateWaitingReboot:
		done, failed := v1beta1.NodeStatePostDrained, v1beta1.NodeStatePostDrainFailed
		if singleNode {
			done, failed = v1beta1.NodeStateSingleNodeUpgraded, v1beta1.NodeStateSingleNodeUpgradeFailed
		}
		switch {
		case n.Rebooted:
			return Decision{State: done}
		case n.RebootOverdue:
			return Decision{State: failed, Reason: "RebootTimeout", Message: "the node did not come back with the new OS in time: " + n.RebootReport}
		}
		return Decision{State: n.State, Message: n.RebootReport}
	}
	return keep
}

// jobStep decides a node whose state runs a Job: start it when it does not
// exist, move on when it succeeded, fail with its reason when it failed.
func jobStep(state v1beta1.NodeUpgradeState, j Job, jobType string, done, failed v1beta1.NodeUpgradeState) Decision {
	switch j.Status {
	case JobNone:
		return Decision{State: state, StartJob: jobType}
	case JobSucceeded:
		return Decision{State: done}
	case JobFailed:
		return Decision{State: failed, Reason: j.Reason, Message: j.Message}
	}
	return Decision{State: state}
}

// Upgraded reports whether a node finished its NodeUpgrade work.
func Upgraded(s v1beta1.NodeUpgradeState) bool {
	t, _ := s.Tier()
	return t >= 7 && !s.IsFailure()
}

// Acknowledged says which of Rancher's drain-hook requests may be
// acknowledged for a node in a state: pre-drain when the node's pre-drain
// work has just succeeded (Rancher then drains it), post-drain when the node
// is back with the new OS (Rancher then uncordons it and moves on). In any
// other state a request stays unanswered and Rancher waits: a failed node,
// or a node asked to drain again after its upgrade, is never drained without
// its VMs being taken care of first.
func Acknowledged(s v1beta1.NodeUpgradeState) (preDrain, postDrain bool) {
	return s == v1beta1.NodeStatePreDrained, s == v1beta1.NodeStatePostDrained
}

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
	"fmt"
	"slices"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
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
	// PlanPaused: the whole plan is paused (spec.paused).
	PlanPaused bool
	// Aborting: the plan is being aborted (spec.abort).
	Aborting bool
	// Excluded: the node is listed in spec.nodeUpgradeOption.excludeNodes.
	Excluded bool
	// PreDrainRequested: Rancher asks for the pre-drain hook of this node.
	PreDrainRequested bool
	// PostDrainRequested: Rancher asks for the post-drain hook.
	PostDrainRequested bool
	PreDrain           Job
	PostDrain          Job
	SingleNodeUpgrade  Job
	// Host is what the node reports of itself now.
	Host Host
	// Before is the boot ID and OS image the node reported when its OS
	// upgrade began (recorded in its status); empty when not recorded.
	Before Host
	// Target is what the node must report once upgraded.
	Target Target
	// Rancher says what Rancher reports of the node's machine while the
	// node waits for Rancher (for messages).
	Rancher string
	// DrainBlocked says what keeps Rancher's drain from evicting a pod, and
	// what to do about it; "" when its drain reports no error.
	DrainBlocked string
	// Waiting says since when the node is in its state and until when it
	// may wait there, for messages (e.g. "since 10:02:03Z; fails at
	// 10:47:03Z"); empty for states without a deadline.
	Waiting string
	// Overdue: the node has waited in its state longer than allowed.
	Overdue bool
	// Unhealthy says what keeps the cluster from draining another node
	// (the health gate); empty when it may.
	Unhealthy string
	// Breaker says what holds every further drain (the circuit breaker,
	// see Breaker); empty when it is closed.
	Breaker string
	// OutsideWindow says, while no maintenance window is open, when the
	// next one opens (e.g. "the next opens at …"); empty while a node may
	// begin its upgrade.
	OutsideWindow string
}

// Host is what a node reports of itself (status.nodeInfo and its Ready
// condition).
type Host struct {
	Ready          bool
	BootID         string
	OSImage        string
	KubeletVersion string
}

// Target is what an upgraded node reports: the release's OS image and
// kubelet version.
type Target struct {
	OSImage        string
	KubeletVersion string
}

// Decision is what to do about one node.
type Decision struct {
	State   v1beta1.NodeUpgradeState
	Reason  string
	Message string
	// HealthGate: the node waits for the cluster to be healthy before its
	// drain (Node.Unhealthy).
	HealthGate bool
	// Breaker: the circuit breaker holds the node's drain; it has no
	// deadline, so the health gate's does not run meanwhile.
	Breaker bool
	// Window: the node waits for a maintenance window before it begins;
	// no deadline runs meanwhile, the health gate's neither.
	Window bool
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

// UnderWay reports whether a node in state s is between the start of its
// drain, or of its single-node upgrade, and its return: a pause or an abort
// lets it finish.
func UnderWay(s v1beta1.NodeUpgradeState) bool {
	return InDrainSlot(s) || s == v1beta1.NodeStateSingleNodeUpgrading
}

// HealthGatePrefix begins the message of a node held by the health gate.
const HealthGatePrefix = "health gate: waiting for the cluster to be healthy before draining this node: "

// BreakerPrefix begins the message of a node held by the circuit breaker.
const BreakerPrefix = "circuit breaker: no node is drained while too many are down: "

// Breaker is the circuit breaker: down are the managed nodes, other than
// the one to drain, that are NotReady or unreachable, and limit how many
// may be unavailable at once, the drained node counted. It says what holds
// every further drain, "" while the breaker is closed. With no node down
// it is closed whatever the limit: one node is always drained.
func Breaker(down []string, limit int) string {
	if len(down) == 0 || len(down)+1 <= limit {
		return ""
	}
	return fmt.Sprintf("node %s not Ready or unreachable: draining another node would leave %d unavailable, more than "+
		"spec.nodeUpgradeOption.maxUnavailableNodes (%d); the next node is drained by itself once enough of them are back", names.List(down), len(down)+1, limit)
}

// WindowPrefix begins the message of a node that waits for a maintenance
// window.
const WindowPrefix = "waiting for a maintenance window (spec.nodeUpgradeOption.maintenanceWindows) before this node begins its upgrade: "

// pausedMessage is what a paused node reports; planPausedMessage what a
// node held by a paused plan reports.
const (
	pausedMessage     = "Node upgrade paused as requested by the user: remove the node from spec.nodeUpgradeOption.pauseNodes to resume"
	planPausedMessage = "Node upgrade held: the plan is paused (spec.paused); set spec.paused to false to resume"
	abortingMessage   = "Node upgrade not started: the plan is being aborted (spec.abort); a new plan for the same version upgrades this node"
)

// Decide returns the decision for every node, in the order of nodes.
// singleNode selects the single-node path, which needs no Rancher request.
func Decide(nodes []Node, singleNode bool) []Decision {
	return DecideInto(nil, nodes, singleNode)
}

// DecideInto is Decide writing into out's array when it is large enough: a
// pass of a large cluster decides for every node, and need not allocate the
// decisions anew each time.
func DecideInto(out []Decision, nodes []Node, singleNode bool) []Decision {
	busy := ""
	for i := range nodes {
		if InDrainSlot(nodes[i].State) {
			busy = nodes[i].Name
		}
	}
	out = slices.Grow(out[:0], len(nodes))[:len(nodes)]
	for i := range nodes {
		n := &nodes[i]
		d := decide(n, singleNode, busy)
		if !v1beta1.CanMoveNodeState(n.State, d.State) {
			// The machine never moves a node back; keep what is recorded.
			d = Decision{State: n.State}
		}
		out[i] = d
	}
	return out
}

// NotStarted reports whether a node in this state has not begun its
// upgrade: its drain, when Rancher asks for it, is still to be decided.
func NotStarted(s v1beta1.NodeUpgradeState) bool {
	switch s {
	case "", v1beta1.NodeStateImagePreloading, v1beta1.NodeStateImagePreloaded, v1beta1.NodeStateUpgradePaused:
		return true
	}
	return false
}

// AtHealthGate reports whether the health gate judges the node now: Rancher
// asks to drain it, it has not begun its upgrade and no closed maintenance
// window holds it.
func (n Node) AtHealthGate() bool {
	return n.PreDrainRequested && NotStarted(n.State) && n.OutsideWindow == ""
}

// waitForWindow holds a node that has not begun its upgrade until a
// maintenance window opens.
func waitForWindow(n *Node) Decision {
	state := n.State
	if state == "" {
		// A node the preload did not record waits as preloaded.
		state = v1beta1.NodeStateImagePreloaded
	}
	return Decision{State: state, Reason: v1beta1.ReasonOutsideMaintenanceWindow, Message: WindowPrefix + n.OutsideWindow, Window: true}
}

func decide(n *Node, singleNode bool, busy string) Decision {
	keep := Decision{State: n.State}
	switch {
	case NotStarted(n.State):
		if n.Paused {
			return Decision{State: v1beta1.NodeStateUpgradePaused, Reason: v1beta1.ReasonAdministrativelyPaused, Message: pausedMessage}
		}
		if n.Aborting {
			return Decision{State: v1beta1.NodeStateUpgradePaused, Reason: v1beta1.ReasonAborted, Message: abortingMessage}
		}
		if n.PlanPaused {
			return Decision{State: v1beta1.NodeStateUpgradePaused, Reason: v1beta1.ReasonAdministrativelyPaused, Message: planPausedMessage}
		}
		if singleNode {
			if n.OutsideWindow != "" {
				return waitForWindow(n)
			}
			return Decision{State: v1beta1.NodeStateSingleNodeUpgrading}
		}
		if !n.PreDrainRequested {
			if n.State == v1beta1.NodeStateUpgradePaused {
				return Decision{State: n.State, Message: "resumed: waiting for Rancher to reach this node"}
			}
			return Decision{State: v1beta1.NodeStateImagePreloaded, Message: "waiting for Rancher to reach this node (it upgrades one node at a time)"}
		}
		if busy != "" && busy != n.Name {
			return Decision{State: n.State, Message: "waiting for node " + busy + " to finish its upgrade"}
		}
		if n.OutsideWindow != "" {
			return waitForWindow(n)
		}
		if n.Breaker != "" {
			msg := BreakerPrefix + n.Breaker
			if n.Unhealthy != "" {
				msg += "; the health gate waits for: " + n.Unhealthy
			}
			return Decision{State: n.State, Breaker: true, Message: msg}
		}
		if n.Unhealthy != "" {
			return Decision{State: n.State, HealthGate: true, Message: HealthGatePrefix + n.Unhealthy}
		}
		return Decision{State: v1beta1.NodeStatePreDraining}

	case n.State == v1beta1.NodeStatePreDraining:
		return jobStep(n.State, n.PreDrain, v1beta1.JobTypePreDrain, v1beta1.NodeStatePreDrained, v1beta1.NodeStatePreDrainFailed)

	case n.State == v1beta1.NodeStatePreDrained:
		return waitForRancher(*n)

	case n.State == v1beta1.NodeStatePostDraining:
		return jobStep(n.State, n.PostDrain, v1beta1.JobTypePostDrain, v1beta1.NodeStateWaitingReboot, v1beta1.NodeStatePostDrainFailed)

	case n.State == v1beta1.NodeStateSingleNodeUpgrading:
		return jobStep(n.State, n.SingleNodeUpgrade, v1beta1.JobTypeSingleNodeUpgrade, v1beta1.NodeStateWaitingReboot, v1beta1.NodeStateSingleNodeUpgradeFailed)

	case n.State == v1beta1.NodeStateWaitingReboot:
		done, failed := v1beta1.NodeStatePostDrained, v1beta1.NodeStatePostDrainFailed
		if singleNode {
			done, failed = v1beta1.NodeStateSingleNodeUpgraded, v1beta1.NodeStateSingleNodeUpgradeFailed
		}
		switch verdict, msg := Reboot(*n); {
		case n.Excluded && !n.Host.Ready && !singleNode:
			return Decision{State: v1beta1.NodeStateExcluded, Reason: v1beta1.ReasonExcludedByOperator, Message: ExcludedMessage(msg)}
		case verdict == RebootDone:
			return Decision{State: done, Message: msg}
		case verdict == RebootFallback:
			return Decision{State: failed, Reason: v1beta1.ReasonFallbackBoot, Message: msg}
		case n.Overdue:
			msg = "the node did not come back on the new OS in time: " + msg + waited(*n)
			if !n.Host.Ready && !singleNode {
				msg += "; if it is lost for good, list it in spec.nodeUpgradeOption.excludeNodes and retry the plan to finish without it"
			}
			return Decision{State: failed, Reason: v1beta1.ReasonRebootTimeout, Message: msg}
		default:
			return Decision{State: n.State, Message: msg + waited(*n)}
		}
	}
	return keep
}

// ExcludedMessage is what an excluded node reports: what it reported as it
// was excluded, and what is left to do for it.
func ExcludedMessage(seen string) string {
	return "excluded from the upgrade (spec.nodeUpgradeOption.excludeNodes) while it was down; it was " + seen +
		". Remove it from the cluster, or repair it and upgrade it with a new plan"
}

// waitForRancher decides a node whose VMs are gone while Rancher drains it
// and upgrades RKE2: the post-drain work starts once Rancher asks for it and
// the node's kubelet runs the release's version.
func waitForRancher(n Node) Decision {
	var reason, msg string
	switch {
	case !n.PostDrainRequested:
		reason = v1beta1.ReasonRancherPlanNotApplied
		msg = "waiting for Rancher to drain the node and upgrade RKE2"
		if n.Target.KubeletVersion != "" {
			msg += " to " + n.Target.KubeletVersion
		}
		if n.DrainBlocked != "" {
			reason, msg = v1beta1.ReasonDrainBlocked, n.DrainBlocked
		}
		if n.Rancher != "" {
			msg += "; Rancher reports: " + n.Rancher
		}
	case n.Target.KubeletVersion != "" && n.Host.KubeletVersion != n.Target.KubeletVersion:
		reason = v1beta1.ReasonKubeletVersionMismatch
		msg = fmt.Sprintf("Rancher asks for the post-drain hook, so it applied the node's RKE2 plan, but the kubelet reports %s, not %s: "+
			"check rke2 and rancher-system-agent on the node (journalctl -u rke2-server -u rke2-agent -u rancher-system-agent)",
			orUnknown(n.Host.KubeletVersion), n.Target.KubeletVersion)
		if n.Rancher != "" {
			msg += "; Rancher reports: " + n.Rancher
		}
	default:
		return Decision{State: v1beta1.NodeStatePostDraining}
	}
	if n.Overdue {
		return Decision{State: v1beta1.NodeStatePostDrainFailed, Reason: reason, Message: msg + waited(n)}
	}
	if reason == v1beta1.ReasonDrainBlocked {
		// Said while it lasts: the drain needs the operator.
		return Decision{State: n.State, Reason: reason, Message: msg + waited(n)}
	}
	return Decision{State: n.State, Message: msg + waited(n)}
}

// RebootVerdict is how a node waiting for its reboot stands.
type RebootVerdict int

// The reboot verdicts.
const (
	// RebootPending: the node is not back on the release yet.
	RebootPending RebootVerdict = iota
	// RebootDone: the node is Ready on the release's OS image and kubelet
	// version, after a reboot when its OS image had to change.
	RebootDone
	// RebootFallback: the node rebooted and came back Ready on another OS
	// image: the bootloader fell back to the previous entry, or the new OS
	// was never installed. It will not fix itself.
	RebootFallback
)

// Reboot judges a node that waits to come back from its reboot into the
// release, and says what it sees.
func Reboot(n Node) (RebootVerdict, string) {
	h, t := n.Host, n.Target
	rebootNeeded := n.Before.OSImage != "" && n.Before.OSImage != t.OSImage
	rebooted := n.Before.BootID != "" && h.BootID != "" && h.BootID != n.Before.BootID
	switch {
	case !h.Ready:
		return RebootPending, fmt.Sprintf("waiting for the node to come back on %q: it is not Ready (rebooting)", t.OSImage)
	case rebooted && h.OSImage != t.OSImage:
		return RebootFallback, fmt.Sprintf("the node came back from its reboot (boot ID %s, was %s) on OS image %q, not the release's %q: "+
			"it booted the previous OS (the bootloader's fallback entry) or the new OS was never installed. "+
			"Check the node's boot entries (grub2-editenv list; the Harvester entries in /boot/grub2) and the install log of its upgrade Job",
			short(h.BootID), short(n.Before.BootID), h.OSImage, t.OSImage)
	case h.OSImage != t.OSImage:
		return RebootPending, fmt.Sprintf("waiting for the node to reboot into %q: it is Ready on %q with boot ID %s, unchanged since its upgrade began",
			t.OSImage, h.OSImage, short(h.BootID))
	case rebootNeeded && n.Before.BootID != "" && !rebooted:
		return RebootPending, fmt.Sprintf("waiting for the node to reboot: it reports %q but still boot ID %s, the one it had before its upgrade", h.OSImage, short(h.BootID))
	case t.KubeletVersion != "" && h.KubeletVersion != t.KubeletVersion:
		return RebootPending, fmt.Sprintf("the node is back on %q, but its kubelet reports %s, not %s: check rke2 on the node (journalctl -u rke2-server -u rke2-agent)",
			h.OSImage, orUnknown(h.KubeletVersion), t.KubeletVersion)
	}
	msg := fmt.Sprintf("Ready on %q with kubelet %s", h.OSImage, h.KubeletVersion)
	if rebooted {
		msg += fmt.Sprintf(", rebooted (boot ID %s, was %s)", short(h.BootID), short(n.Before.BootID))
	}
	return RebootDone, msg
}

// waited is the node's wait for messages: "; since …, fails at …".
func waited(n Node) string {
	if n.Waiting == "" {
		return ""
	}
	return "; " + n.Waiting
}

func orUnknown(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}

// short abbreviates a boot ID for messages.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return orUnknown(id)
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
	// A node whose image cleanup failed is upgraded all the same: the
	// cleanup runs as soon as a node is, while others still upgrade.
	return t >= 7 && (!s.IsFailure() || s == v1beta1.NodeStateImageCleanFailed) && s != v1beta1.NodeStateExcluded
}

// Finished reports whether the node upgrade has nothing left to do for a
// node: it is upgraded or excluded.
func Finished(s v1beta1.NodeUpgradeState) bool {
	return Upgraded(s) || s == v1beta1.NodeStateExcluded
}

// Acknowledged says which of Rancher's drain-hook requests may be
// acknowledged for a node in a state: pre-drain when the node's pre-drain
// work has just succeeded (Rancher then drains it), post-drain when the node
// is back with the new OS or was excluded while it was down (Rancher then
// uncordons it and moves on). In any
// other state a request stays unanswered and Rancher waits: a failed node,
// or a node asked to drain again after its upgrade, is never drained without
// its VMs being taken care of first.
func Acknowledged(s v1beta1.NodeUpgradeState) (preDrain, postDrain bool) {
	// A node being cleaned is back with the new OS too: its image cleanup
	// may begin before Rancher has seen the acknowledgement.
	return s == v1beta1.NodeStatePreDrained, s == v1beta1.NodeStatePostDrained || s == v1beta1.NodeStateExcluded || cleaning(s)
}

// cleaning reports whether a node is in a state of its image cleanup.
func cleaning(s v1beta1.NodeUpgradeState) bool {
	return s == v1beta1.NodeStateImageCleaning || s == v1beta1.NodeStateImageCleaned || s == v1beta1.NodeStateImageCleanFailed
}

// RetryState returns the state a node in a failure state goes back to when
// the plan is retried: the start of the step that failed, so that the step
// runs again and nothing before it does. A node that waited in vain for
// Rancher waits for it again; one that did not come back in time waits for
// its reboot again; one whose Job failed, or that came back on its old OS,
// runs its Job again. ok is false for a state that is not a failure.
func RetryState(s v1beta1.NodeUpgradeState, reason string) (v1beta1.NodeUpgradeState, bool) {
	switch s {
	case v1beta1.NodeStateImagePreloadFailed:
		return v1beta1.NodeStateImagePreloading, true
	case v1beta1.NodeStatePreDrainFailed:
		return v1beta1.NodeStatePreDraining, true
	case v1beta1.NodeStateImageCleanFailed:
		return v1beta1.NodeStateImageCleaning, true
	case v1beta1.NodeStatePostDrainFailed:
		switch reason {
		case v1beta1.ReasonRancherPlanNotApplied, v1beta1.ReasonDrainBlocked, v1beta1.ReasonKubeletVersionMismatch:
			return v1beta1.NodeStatePreDrained, true
		case v1beta1.ReasonRebootTimeout:
			return v1beta1.NodeStateWaitingReboot, true
		}
		return v1beta1.NodeStatePostDraining, true
	case v1beta1.NodeStateSingleNodeUpgradeFailed:
		if reason == v1beta1.ReasonRebootTimeout {
			return v1beta1.NodeStateWaitingReboot, true
		}
		return v1beta1.NodeStateSingleNodeUpgrading, true
	}
	return "", false
}

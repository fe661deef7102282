package v1beta1

// NodeUpgradeState is where one node is in the upgrade
// (status.nodeUpgradeStatuses[node].state).
//
// +kubebuilder:validation:Enum=ImagePreloading;ImagePreloaded;ImagePreloadFailed;UpgradePaused;PreDraining;PreDrained;PreDrainFailed;PostDraining;WaitingReboot;PostDrained;PostDrainFailed;SingleNodeUpgrading;SingleNodeUpgraded;SingleNodeUpgradeFailed;ImageCleaning;ImageCleaned;ImageCleanFailed;Excluded
type NodeUpgradeState string

// The node states. Multi-node clusters go ImagePreloading → ImagePreloaded →
// (UpgradePaused) → PreDraining → PreDrained → PostDraining → WaitingReboot →
// PostDrained → ImageCleaning → ImageCleaned; single-node clusters replace the
// drain states with SingleNodeUpgrading → WaitingReboot → SingleNodeUpgraded.
// A node lost while it waits for its reboot may be excluded
// (spec.nodeUpgradeOption.excludeNodes): Excluded is final.
const (
	NodeStateImagePreloading         NodeUpgradeState = "ImagePreloading"
	NodeStateImagePreloaded          NodeUpgradeState = "ImagePreloaded"
	NodeStateImagePreloadFailed      NodeUpgradeState = "ImagePreloadFailed"
	NodeStateUpgradePaused           NodeUpgradeState = "UpgradePaused"
	NodeStatePreDraining             NodeUpgradeState = "PreDraining"
	NodeStatePreDrained              NodeUpgradeState = "PreDrained"
	NodeStatePreDrainFailed          NodeUpgradeState = "PreDrainFailed"
	NodeStatePostDraining            NodeUpgradeState = "PostDraining"
	NodeStateWaitingReboot           NodeUpgradeState = "WaitingReboot"
	NodeStatePostDrained             NodeUpgradeState = "PostDrained"
	NodeStatePostDrainFailed         NodeUpgradeState = "PostDrainFailed"
	NodeStateSingleNodeUpgrading     NodeUpgradeState = "SingleNodeUpgrading"
	NodeStateSingleNodeUpgraded      NodeUpgradeState = "SingleNodeUpgraded"
	NodeStateSingleNodeUpgradeFailed NodeUpgradeState = "SingleNodeUpgradeFailed"
	NodeStateImageCleaning           NodeUpgradeState = "ImageCleaning"
	NodeStateImageCleaned            NodeUpgradeState = "ImageCleaned"
	NodeStateImageCleanFailed        NodeUpgradeState = "ImageCleanFailed"
	NodeStateExcluded                NodeUpgradeState = "Excluded"
)

// nodeStateTiers groups the states into ordinal tiers. A node only ever moves
// to a higher tier. States that are alternative outcomes of the same step
// share a tier.
var nodeStateTiers = map[NodeUpgradeState]int{
	NodeStateImagePreloading:         0,
	NodeStateImagePreloaded:          1,
	NodeStateImagePreloadFailed:      1,
	NodeStateUpgradePaused:           2,
	NodeStatePreDraining:             3,
	NodeStateSingleNodeUpgrading:     3,
	NodeStatePreDrained:              4,
	NodeStatePreDrainFailed:          4,
	NodeStatePostDraining:            5,
	NodeStateWaitingReboot:           6,
	NodeStatePostDrained:             7,
	NodeStatePostDrainFailed:         7,
	NodeStateSingleNodeUpgraded:      7,
	NodeStateSingleNodeUpgradeFailed: 7,
	NodeStateImageCleaning:           8,
	NodeStateImageCleaned:            9,
	NodeStateImageCleanFailed:        9,
	// Above every other: an excluded node never moves again.
	NodeStateExcluded: 10,
}

// AllNodeStates lists every node state in tier order.
func AllNodeStates() []NodeUpgradeState {
	return []NodeUpgradeState{
		NodeStateImagePreloading, NodeStateImagePreloaded, NodeStateImagePreloadFailed,
		NodeStateUpgradePaused, NodeStatePreDraining, NodeStateSingleNodeUpgrading,
		NodeStatePreDrained, NodeStatePreDrainFailed, NodeStatePostDraining,
		NodeStateWaitingReboot, NodeStatePostDrained, NodeStatePostDrainFailed,
		NodeStateSingleNodeUpgraded, NodeStateSingleNodeUpgradeFailed,
		NodeStateImageCleaning, NodeStateImageCleaned, NodeStateImageCleanFailed,
		NodeStateExcluded,
	}
}

// Tier returns the ordinal tier of the state and whether the state is known.
// The empty state (a node not seen yet) has tier -1.
func (s NodeUpgradeState) Tier() (int, bool) {
	if s == "" {
		return -1, true
	}
	t, ok := nodeStateTiers[s]
	return t, ok
}

// IsFailure reports whether the state is one of the …Failed states.
func (s NodeUpgradeState) IsFailure() bool {
	switch s {
	case NodeStateImagePreloadFailed, NodeStatePreDrainFailed, NodeStatePostDrainFailed,
		NodeStateSingleNodeUpgradeFailed, NodeStateImageCleanFailed:
		return true
	}
	return false
}

// CanMoveNodeState reports whether a node in state from may move to state to.
// A node moves only forward: to a strictly higher tier. Staying in the same
// state is allowed (a repeated event changes nothing); a sideways move within
// a tier is not, so the first outcome recorded for a step is final and a
// late or duplicate event cannot rewrite it. Unknown states never move and
// are never entered.
func CanMoveNodeState(from, to NodeUpgradeState) bool {
	ft, fok := from.Tier()
	tt, tok := to.Tier()
	if !fok || !tok || to == "" {
		return false
	}
	return from == to || tt > ft
}

package phase

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
)

// setNodeState moves a node to a state if the state machine allows it
// (forward only) and reports whether it moved. Reason and message are
// replaced with the new state's.
func (s *Scope) setNodeState(node string, state v1beta1.NodeUpgradeState, reason, message string) bool {
	st := &s.Plan.Status
	cur := st.NodeUpgradeStatuses[node]
	if cur.State == state && cur.Reason == reason && cur.Message == message {
		return false
	}
	if !v1beta1.CanMoveNodeState(cur.State, state) {
		return false
	}
	next := cur
	next.State, next.Reason, next.Message = state, reason, message
	if cur.State != state {
		now := metav1.NewTime(s.Now())
		next.LastTransitionTime = &now
		if nodestate.Upgraded(state) && !nodestate.Upgraded(cur.State) {
			next.UpgradedAt = &now
		}
	}
	s.putNode(node, next)
	return true
}

// nodeState returns a node's current state.
func (s *Scope) nodeState(node string) v1beta1.NodeUpgradeState {
	return s.Plan.Status.NodeUpgradeStatuses[node].State
}

// list joins names for a message, at most names.MaxListed of them.
func list(nodes []string) string { return names.List(nodes) }

// recordBoot records the boot ID and OS image a node reports as its OS
// upgrade begins.
func (s *Scope) recordBoot(node, bootID, osImage string) {
	st := s.Plan.Status.NodeUpgradeStatuses[node]
	st.PreviousBootID, st.PreviousOSImage = bootID, osImage
	s.putNode(node, st)
}

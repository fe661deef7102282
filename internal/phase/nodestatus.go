package phase

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
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
	if st.NodeUpgradeStatuses == nil {
		st.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	}
	next := cur
	next.State, next.Reason, next.Message = state, reason, message
	if cur.State != state {
		now := metav1.NewTime(s.Now())
		next.LastTransitionTime = &now
	}
	st.NodeUpgradeStatuses[node] = next
	return true
}

// nodeState returns a node's current state.
func (s *Scope) nodeState(node string) v1beta1.NodeUpgradeState {
	return s.Plan.Status.NodeUpgradeStatuses[node].State
}

// list joins names for a message.
func list(names []string) string { return strings.Join(names, ", ") }

// recordBoot records the boot ID and OS image a node reports as its OS
// upgrade begins.
func (s *Scope) recordBoot(node, bootID, osImage string) {
	st := s.Plan.Status.NodeUpgradeStatuses[node]
	st.PreviousBootID, st.PreviousOSImage = bootID, osImage
	s.Plan.Status.NodeUpgradeStatuses[node] = st
}

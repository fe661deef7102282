package kept

import (
	"maps"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// WorkingCopy is a pass's copy of a plan, which may be the cache's own: a
// deep copy, but for the node map (an entry per node), which stays shared
// with the plan it came from until the pass first changes an entry
// (PutNode). Most passes change no entry (they write a condition, or
// nothing), and a copy of every entry on each of them cost a large cluster
// more than the rest of the plan's copy.
type WorkingCopy struct {
	// Plan is the copy; everything but its node map may be changed in
	// place, and its node map only through PutNode.
	Plan *v1beta1.UpgradePlan
	// sharedNodes: Plan's node map is still the one of the plan it was
	// copied from.
	sharedNodes bool
}

// Copy makes a working copy of plan.
func Copy(plan *v1beta1.UpgradePlan) WorkingCopy {
	rest := *plan
	rest.Status.NodeUpgradeStatuses = nil
	w := WorkingCopy{Plan: rest.DeepCopy(), sharedNodes: true}
	w.Plan.Status.NodeUpgradeStatuses = plan.Status.NodeUpgradeStatuses
	return w
}

// Owned is a working copy of a plan the pass owns whole.
func Owned(plan *v1beta1.UpgradePlan) WorkingCopy { return WorkingCopy{Plan: plan} }

// PutNode records a node's entry: every change of the node map goes
// through here, so that a shared map is copied first.
func (w *WorkingCopy) PutNode(node string, ns v1beta1.NodeUpgradeStatus) {
	st := &w.Plan.Status
	if w.sharedNodes || st.NodeUpgradeStatuses == nil {
		owned := make(map[string]v1beta1.NodeUpgradeStatus, len(st.NodeUpgradeStatuses)+1)
		maps.Copy(owned, st.NodeUpgradeStatuses)
		st.NodeUpgradeStatuses, w.sharedNodes = owned, false
	}
	st.NodeUpgradeStatuses[node] = ns
}

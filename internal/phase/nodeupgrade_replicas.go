package phase

import (
	"context"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// Each node's count of Longhorn replicas being rebuilt
// (nodeUpgradeStatuses[node].replicasRebuilding): a node's replicas are
// rebuilt once it is back from its reboot, while the health gate holds the
// next drain. The node upgrade keeps the counts, and the image cleanup and
// the final verification after it, so that the last node's rebuild is seen
// to its end. Read through the cache, which the engines' watch keeps.
//
// +kubebuilder:rbac:groups=longhorn.io,namespace=longhorn-system,resources=engines;replicas,verbs=list;watch

// nodeReplicas brings the nodes' counts of replicas being rebuilt up to
// date, changing only those that changed.
func (s *Scope) nodeReplicas(ctx context.Context) error {
	counts, err := cluster.ReplicasRebuilding(ctx, s.Client)
	if err != nil {
		return err
	}
	for node, st := range s.Plan.Status.NodeUpgradeStatuses {
		if st.ReplicasRebuilding != counts[node] {
			st.ReplicasRebuilding = counts[node]
			s.putNode(node, st)
		}
	}
	return nil
}

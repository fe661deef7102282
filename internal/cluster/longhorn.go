package cluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
)

// ReplicasRebuilding counts, by node, the Longhorn replicas being rebuilt:
// those a volume's engine reports in mode WO (Longhorn's engine keeps each
// of its replicas' modes, RW in sync, WO rebuilding, ERR failed, under the
// replica's name); a replica's node is its spec.nodeID. Meant for the
// manager's cache: one list of the engines, and a read of each rebuilding
// replica only. A replica gone since its engine reported it is not counted.
func ReplicasRebuilding(ctx context.Context, c client.Reader) (map[string]int32, error) {
	var engines longhornv1beta2.EngineList
	if err := c.List(ctx, &engines, client.InNamespace(LonghornNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Longhorn engines: %w", err)
	}
	// A volume live-migrating has two engines; a replica counts once.
	seen := map[string]bool{}
	byNode := map[string]int32{}
	for i := range engines.Items {
		for name := range RebuildingReplicas(&engines.Items[i]) {
			if seen[name] {
				continue
			}
			seen[name] = true
			r := &longhornv1beta2.Replica{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: LonghornNamespace, Name: name}, r, client.UnsafeDisableDeepCopy); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("reading Longhorn replica %s: %w", name, err)
			}
			byNode[r.Spec.NodeID]++
		}
	}
	return byNode, nil
}

// RebuildingReplicas names the replicas an engine reports being rebuilt
// (mode WO).
func RebuildingReplicas(e *longhornv1beta2.Engine) map[string]bool {
	out := map[string]bool{}
	for name, mode := range e.Status.ReplicaModeMap {
		if mode == LonghornReplicaWO {
			out[name] = true
		}
	}
	return out
}

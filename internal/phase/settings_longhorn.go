package phase

import (
	"context"
	"fmt"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// The node upgrade changes the Longhorn setting; the cleanup reads it back
// from the API server.
//
// +kubebuilder:rbac:groups=longhorn.io,namespace=longhorn-system,resources=settings,verbs=get;patch

// longhornReplenishment is Longhorn's replica-replenishment-wait-interval,
// which the node upgrade raises so that Longhorn waits for a rebooting
// node's replicas instead of rebuilding them elsewhere.
type longhornReplenishment struct{}

func (longhornReplenishment) record(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (bool, error) {
	if saved.LonghornReplicaReplenishmentWaitInterval != nil {
		return false, nil
	}
	v, found, err := cluster.LonghornSetting(ctx, s.Client, cluster.LonghornReplicaReplenishmentWaitInterval)
	if err != nil || !found {
		return false, err
	}
	saved.LonghornReplicaReplenishmentWaitInterval = &v
	return true, nil
}

func (longhornReplenishment) change(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) error {
	if saved.LonghornReplicaReplenishmentWaitInterval == nil {
		return nil
	}
	return cluster.SetLonghornSetting(ctx, s.Client, cluster.LonghornReplicaReplenishmentWaitInterval, cluster.UpgradeReplicaReplenishmentWaitInterval)
}

func (longhornReplenishment) restore(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (restoration, error) {
	want := saved.LonghornReplicaReplenishmentWaitInterval
	if want == nil {
		return restoration{}, nil
	}
	if err := cluster.SetLonghornSetting(ctx, s.Client, cluster.LonghornReplicaReplenishmentWaitInterval, *want); err != nil {
		return restoration{}, err
	}
	now, found, err := cluster.LonghornSetting(ctx, s.APIReader, cluster.LonghornReplicaReplenishmentWaitInterval)
	if err != nil {
		return restoration{}, err
	}
	return restoration{
		what: fmt.Sprintf("Longhorn setting %s (%s)", cluster.LonghornReplicaReplenishmentWaitInterval, *want),
		back: !found || now == *want, seen: now,
	}, nil
}

func (longhornReplenishment) forget(saved *v1beta1.SavedSettings) {
	saved.LonghornReplicaReplenishmentWaitInterval = nil
}

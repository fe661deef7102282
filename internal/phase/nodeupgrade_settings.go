package phase

import (
	"context"

	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// The node upgrade reads the provisioning Cluster from the API server, and
// changes it, the Longhorn setting, the descheduler Addon and the nodes'
// annotations.
//
// +kubebuilder:rbac:groups=provisioning.cattle.io,namespace=fleet-local,resources=clusters,verbs=get;patch
// +kubebuilder:rbac:groups=longhorn.io,namespace=longhorn-system,resources=settings,verbs=patch
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=kube-system,resources=addons,verbs=patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=patch

// recordNodeUpgradeSettings records, before anything is changed, the
// settings the node upgrade changes and, on a multi-node cluster, the
// provisionGeneration it will give Rancher. It reports whether it recorded
// anything new, in which case the caller ends the pass so the record is
// written before any change is made.
func recordNodeUpgradeSettings(ctx context.Context, s *Scope, singleNode bool) (bool, error) {
	saved := ensureSaved(s.Plan)
	recorded := false
	if saved.LonghornReplicaReplenishmentWaitInterval == nil {
		v, found, err := cluster.LonghornSetting(ctx, s.Client, cluster.LonghornReplicaReplenishmentWaitInterval)
		if err != nil {
			return false, err
		}
		if found {
			saved.LonghornReplicaReplenishmentWaitInterval, recorded = &v, true
		}
	}
	if saved.DeschedulerEnabled == nil {
		enabled, found, err := cluster.AddonEnabled(ctx, s.Client, cluster.KubeSystemNamespace, cluster.DeschedulerAddon)
		if err != nil {
			return false, err
		}
		if found {
			saved.DeschedulerEnabled, recorded = &enabled, true
		}
	}
	if !singleNode && s.Plan.Status.ProvisionGeneration == nil {
		// The generation to bump must be fresh: a stale one could be a value
		// Rancher already rolled, and then nothing would happen.
		cl, err := cluster.LocalCluster(ctx, s.APIReader)
		if err != nil {
			return false, err
		}
		strategy, err := cluster.UpgradeStrategyJSON(cl)
		if err != nil {
			return false, err
		}
		gen := int64(1)
		if cl.Spec.RKEConfig != nil {
			gen = cl.Spec.RKEConfig.ProvisionGeneration + 1
		}
		s.Plan.Status.ProvisionGeneration = &gen
		saved.Rancher = &v1beta1.SavedRancher{UpgradeStrategy: strategy}
		recorded = true
	}
	return recorded, nil
}

// applyNodeUpgradeSettings makes the recorded changes; each is idempotent.
func applyNodeUpgradeSettings(ctx context.Context, s *Scope, singleNode bool) error {
	saved := s.Plan.Status.SavedSettings
	if saved.LonghornReplicaReplenishmentWaitInterval != nil {
		if err := cluster.SetLonghornSetting(ctx, s.Client, cluster.LonghornReplicaReplenishmentWaitInterval,
			cluster.UpgradeReplicaReplenishmentWaitInterval); err != nil {
			return err
		}
	}
	if ptr.Deref(saved.DeschedulerEnabled, false) {
		if err := cluster.SetAddonEnabled(ctx, s.Client, cluster.KubeSystemNamespace, cluster.DeschedulerAddon, false); err != nil {
			return err
		}
	}
	if singleNode {
		return nil
	}
	return cluster.RollNodes(ctx, s.Client, s.Plan.Status.ReleaseMetadata.Kubernetes, *s.Plan.Status.ProvisionGeneration)
}

package phase

import (
	"context"
	"encoding/json"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// The node upgrade of a multi-node cluster reads the provisioning Cluster
// from the API server and patches it; the cleanup puts its upgrade strategy
// back.
//
// +kubebuilder:rbac:groups=provisioning.cattle.io,namespace=fleet-local,resources=clusters,verbs=get;patch

// rancherStrategy is the upgrade strategy of the provisioning Cluster
// fleet-local/local. The node upgrade of a multi-node cluster hands the
// rollout of RKE2 to Rancher: one patch sets the release's Kubernetes
// version, the next provisionGeneration, concurrency 1, the drain options
// and the toolkit's drain hooks. The generation is recorded with the
// strategy, so that Rancher's Cluster is patched to exactly that value.
type rancherStrategy struct{}

func (rancherStrategy) record(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (bool, error) {
	if s.Plan.Status.ProvisionGeneration != nil {
		return false, nil
	}
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
	return true, nil
}

func (rancherStrategy) change(ctx context.Context, s *Scope, _ *v1beta1.SavedSettings) error {
	if s.Plan.Status.ProvisionGeneration == nil {
		return nil
	}
	return cluster.RollNodes(ctx, s.Client, s.Plan.Status.ReleaseMetadata.Kubernetes, *s.Plan.Status.ProvisionGeneration)
}

func (rancherStrategy) restore(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (restoration, error) {
	if saved.Rancher == nil {
		return restoration{}, nil
	}
	if err := cluster.RestoreUpgradeStrategy(ctx, s.Client, saved.Rancher.UpgradeStrategy); err != nil {
		return restoration{}, err
	}
	cl, err := cluster.LocalCluster(ctx, s.APIReader)
	if err != nil {
		return restoration{}, err
	}
	now, err := cluster.UpgradeStrategyJSON(cl)
	if err != nil {
		return restoration{}, err
	}
	return restoration{
		what: "the upgrade strategy of the provisioning Cluster fleet-local/local",
		back: sameJSON(now, saved.Rancher.UpgradeStrategy), seen: rawText(now),
	}, nil
}

func (rancherStrategy) forget(saved *v1beta1.SavedSettings) { saved.Rancher = nil }

// rawText is a recorded JSON value as text, "none" for none.
func rawText(raw *runtime.RawExtension) string {
	if raw == nil || len(raw.Raw) == 0 || string(raw.Raw) == "null" {
		return "none"
	}
	return string(raw.Raw)
}

// sameJSON reports whether two recorded JSON values are equal as data: the
// API server stores a schemaless status field with its keys sorted.
func sameJSON(a, b *runtime.RawExtension) bool {
	var x, y any
	if json.Unmarshal([]byte(rawText(a)), &x) != nil || json.Unmarshal([]byte(rawText(b)), &y) != nil {
		return rawText(a) == rawText(b)
	}
	return reflect.DeepEqual(x, y)
}

package phase

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// The cluster upgrade empties KubeVirt's workload update methods and tells
// Fleet to leave that change alone; the cleanup reads both back from the
// API server.
//
// +kubebuilder:rbac:groups=kubevirt.io,namespace=harvester-system,resources=kubevirts,verbs=get;patch
// +kubebuilder:rbac:groups=management.cattle.io,namespace=fleet-local,resources=managedcharts,verbs=get;patch

// kubeVirtUpdates are KubeVirt's workload update methods: emptied while the
// cluster is upgraded, so that upgrading KubeVirt does not live-migrate every
// VM of the cluster at once, with a comparePatch on the harvester
// ManagedChart so that Fleet does not revert it.
type kubeVirtUpdates struct{}

func (kubeVirtUpdates) record(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (bool, error) {
	if saved.KubeVirt != nil {
		return false, nil
	}
	methods, found, err := cluster.WorkloadUpdateMethods(ctx, s.Client)
	if err != nil || !found {
		return false, err
	}
	has, _, err := cluster.HasKubeVirtComparePatch(ctx, s.Client)
	if err != nil {
		return false, err
	}
	saved.KubeVirt = &v1beta1.SavedKubeVirt{ComparePatchAdded: !has}
	if methods != nil {
		saved.KubeVirt.WorkloadUpdateMethods = ptr.To(methods)
	}
	return true, nil
}

func (kubeVirtUpdates) change(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) error {
	if saved.KubeVirt == nil {
		return nil
	}
	if err := cluster.SetWorkloadUpdateMethods(ctx, s.Client, []string{}); err != nil {
		return err
	}
	if saved.KubeVirt.ComparePatchAdded {
		return cluster.SetKubeVirtComparePatch(ctx, s.Client, true)
	}
	return nil
}

func (kubeVirtUpdates) restore(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (restoration, error) {
	kv := saved.KubeVirt
	if kv == nil {
		return restoration{}, nil
	}
	want := ptr.Deref(kv.WorkloadUpdateMethods, nil)
	if err := cluster.SetWorkloadUpdateMethods(ctx, s.Client, want); err != nil {
		return restoration{}, err
	}
	if kv.ComparePatchAdded {
		if err := cluster.SetKubeVirtComparePatch(ctx, s.Client, false); err != nil {
			return restoration{}, err
		}
	}
	now, found, err := cluster.WorkloadUpdateMethods(ctx, s.APIReader)
	if err != nil {
		return restoration{}, err
	}
	patched, _, err := cluster.HasKubeVirtComparePatch(ctx, s.APIReader)
	if err != nil {
		return restoration{}, err
	}
	return restoration{
		what: fmt.Sprintf("KubeVirt's workload update methods (%v)", want),
		back: !found || (slices.Equal(now, want) && (now == nil) == (want == nil) && (!kv.ComparePatchAdded || !patched)),
		seen: fmt.Sprintf("%v (Fleet comparePatch present: %v)", now, patched),
	}, nil
}

func (kubeVirtUpdates) forget(saved *v1beta1.SavedSettings) { saved.KubeVirt = nil }

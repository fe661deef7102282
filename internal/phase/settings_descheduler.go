package phase

import (
	"context"
	"fmt"

	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// The node upgrade disables the descheduler Addon; the cleanup reads it
// back from the API server.
//
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=kube-system,resources=addons,verbs=get;patch

// deschedulerAddon is whether the descheduler Addon is enabled: the node
// upgrade disables it, so that it does not move the VMs the drains place.
type deschedulerAddon struct{}

func (deschedulerAddon) record(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (bool, error) {
	if saved.DeschedulerEnabled != nil {
		return false, nil
	}
	enabled, found, err := cluster.AddonEnabled(ctx, s.Client, cluster.KubeSystemNamespace, cluster.DeschedulerAddon)
	if err != nil || !found {
		return false, err
	}
	saved.DeschedulerEnabled = &enabled
	return true, nil
}

func (deschedulerAddon) change(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) error {
	if !ptr.Deref(saved.DeschedulerEnabled, false) {
		return nil
	}
	return cluster.SetAddonEnabled(ctx, s.Client, cluster.KubeSystemNamespace, cluster.DeschedulerAddon, false)
}

func (deschedulerAddon) restore(ctx context.Context, s *Scope, saved *v1beta1.SavedSettings) (restoration, error) {
	want := saved.DeschedulerEnabled
	if want == nil {
		return restoration{}, nil
	}
	if *want {
		if err := cluster.SetAddonEnabled(ctx, s.Client, cluster.KubeSystemNamespace, cluster.DeschedulerAddon, true); err != nil {
			return restoration{}, err
		}
	}
	now, found, err := cluster.AddonEnabled(ctx, s.APIReader, cluster.KubeSystemNamespace, cluster.DeschedulerAddon)
	if err != nil {
		return restoration{}, err
	}
	return restoration{
		what: fmt.Sprintf("the descheduler Addon (enabled=%v)", *want),
		back: !found || now == *want, seen: fmt.Sprintf("enabled=%v", now),
	}, nil
}

func (deschedulerAddon) forget(saved *v1beta1.SavedSettings) { saved.DeschedulerEnabled = nil }

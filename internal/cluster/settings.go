package cluster

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
)

// UpgradeReplicaReplenishmentWaitInterval is the Longhorn replica
// replenishment wait during the upgrade, in seconds: long enough for a node
// to reboot without its replicas being rebuilt elsewhere.
const UpgradeReplicaReplenishmentWaitInterval = "1800"

// LonghornSetting returns the value of a Longhorn setting; found is false
// when Longhorn or the setting does not exist.
func LonghornSetting(ctx context.Context, c client.Reader, name string) (value string, found bool, err error) {
	s := &longhornv1beta2.Setting{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: LonghornNamespace, Name: name}, s); err != nil {
		if absent(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("reading Longhorn setting %s: %w", name, err)
	}
	return s.Value, true, nil
}

// SetLonghornSetting sets a Longhorn setting; a missing one is left alone.
func SetLonghornSetting(ctx context.Context, c client.Client, name, value string) error {
	s := &longhornv1beta2.Setting{}
	// Read only (the cache's own object when c reads a cache), copied to
	// change: the node upgrade asks on every pass.
	if err := c.Get(ctx, client.ObjectKey{Namespace: LonghornNamespace, Name: name}, s, client.UnsafeDisableDeepCopy); err != nil {
		if absent(err) {
			return nil
		}
		return fmt.Errorf("reading Longhorn setting %s: %w", name, err)
	}
	if s.Value == value {
		return nil
	}
	changed := s.DeepCopy()
	changed.Value = value
	if err := c.Patch(ctx, changed, client.MergeFrom(s)); err != nil {
		return fmt.Errorf("setting Longhorn setting %s to %q: %w", name, value, err)
	}
	return nil
}

// AddonEnabled reports whether an Addon is enabled; found is false when it
// does not exist.
func AddonEnabled(ctx context.Context, c client.Reader, namespace, name string) (enabled, found bool, err error) {
	a := &harvesterv1beta1.Addon{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, a); err != nil {
		if absent(err) {
			return false, false, nil
		}
		return false, false, fmt.Errorf("reading Addon %s/%s: %w", namespace, name, err)
	}
	return a.Spec.Enabled, true, nil
}

// SetAddonEnabled enables or disables an Addon; a missing one is left alone.
func SetAddonEnabled(ctx context.Context, c client.Client, namespace, name string, enabled bool) error {
	a := &harvesterv1beta1.Addon{}
	// Read only, as in SetLonghornSetting.
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, a, client.UnsafeDisableDeepCopy); err != nil {
		if absent(err) {
			return nil
		}
		return fmt.Errorf("reading Addon %s/%s: %w", namespace, name, err)
	}
	if a.Spec.Enabled == enabled {
		return nil
	}
	changed := a.DeepCopy()
	changed.Spec.Enabled = enabled
	if err := c.Patch(ctx, changed, client.MergeFrom(a)); err != nil {
		return fmt.Errorf("setting Addon %s/%s enabled=%v: %w", namespace, name, enabled, err)
	}
	return nil
}

package helper

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// The restore list is the ConfigMap <plan>-restore-vm in harvester-system:
// for each node, data[<node>] lists the VMs shut down for its upgrade as
// "namespace/name,namespace/name", sorted. The manager starts a restore-vm
// Job for a node with a non-empty entry; restore-vm starts exactly those VMs.

// ParseVMList parses an entry of the restore list. Empty items (as in "" or
// "a/b,") are ignored; anything else that is not namespace/name is an error
// that names it.
func ParseVMList(s string) ([]types.NamespacedName, error) {
	var vms []types.NamespacedName
	var bad []string
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ns, name, ok := strings.Cut(item, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			bad = append(bad, fmt.Sprintf("%q", item))
			continue
		}
		vms = append(vms, types.NamespacedName{Namespace: ns, Name: name})
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("restore list %q: %s not of the form namespace/name", s, strings.Join(bad, ", "))
	}
	return vms, nil
}

// FormatVMList writes VMs as an entry of the restore list: sorted, without
// duplicates.
func FormatVMList(vms []types.NamespacedName) string {
	keys := make([]string, 0, len(vms))
	for _, vm := range vms {
		keys = append(keys, vm.String())
	}
	slices.Sort(keys)
	return strings.Join(slices.Compact(keys), ",")
}

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update

// RecordVMs adds vms to the node's entry of the plan's restore list, creating
// the ConfigMap if needed. It is owned by the plan, not labelled with it: it
// is the record of the VMs the upgrade shut down, so the plan's cleanup
// keeps it, and it goes when the plan is deleted. VMs already listed stay listed, so that a job
// that restarts after stopping some VMs (whose instances are gone) does not
// forget them. It reports whether it created the ConfigMap.
func RecordVMs(ctx context.Context, c client.Client, plan *v1beta1.UpgradePlan, node string, vms []types.NamespacedName) (created bool, err error) {
	key := types.NamespacedName{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(plan.Name)}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, key, cm); err != nil {
			if !apierrors.IsNotFound(err) {
				return err
			}
			cm = &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: key.Namespace, Name: key.Name,
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: v1beta1.GroupVersion.String(), Kind: "UpgradePlan", Name: plan.Name, UID: plan.UID,
					}},
				},
				Data: map[string]string{node: FormatVMList(vms)},
			}
			if err := c.Create(ctx, cm); err != nil {
				// Another writer created it first: merge into theirs.
				if apierrors.IsAlreadyExists(err) {
					return apierrors.NewConflict(corev1.Resource("configmaps"), key.Name, err)
				}
				return err
			}
			created = true
			return nil
		}
		listed, err := ParseVMList(cm.Data[node])
		if err != nil {
			return err
		}
		entry := FormatVMList(append(listed, vms...))
		if v, ok := cm.Data[node]; ok && v == entry {
			return nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[node] = entry
		return c.Update(ctx, cm)
	})
	if err != nil {
		return false, fmt.Errorf("recording the VMs of node %s in ConfigMap %s: %w", node, key, err)
	}
	return created, nil
}

// RecordedVMs returns the node's entry of the plan's restore list; found is
// false when the plan has no restore list.
func RecordedVMs(ctx context.Context, c client.Reader, plan, node string) (vms []types.NamespacedName, found bool, err error) {
	key := types.NamespacedName{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(plan)}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("reading the restore list ConfigMap %s: %w", key, err)
	}
	vms, err = ParseVMList(cm.Data[node])
	if err != nil {
		return nil, true, fmt.Errorf("ConfigMap %s, key %s: %w", key, node, err)
	}
	return vms, true, nil
}

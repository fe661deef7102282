package phase

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
)

// createdKinds are the kinds of the objects a plan creates, with the
// namespaces they live in. The restore-vm ConfigMap is not labelled with the
// plan, only owned by it: it is the record of the VMs the upgrade shut down,
// kept as long as the plan.
var createdKinds = []struct {
	list      client.ObjectList
	obj       client.Object
	namespace string
}{
	{&harvesterv1beta1.VirtualMachineImageList{}, &harvesterv1beta1.VirtualMachineImage{}, cluster.HarvesterNamespace},
	{&appsv1.DeploymentList{}, &appsv1.Deployment{}, cluster.HarvesterNamespace},
	{&corev1.ServiceList{}, &corev1.Service{}, cluster.HarvesterNamespace},
	{&corev1.ConfigMapList{}, &corev1.ConfigMap{}, cluster.HarvesterNamespace},
	{&batchv1.JobList{}, &batchv1.Job{}, cluster.HarvesterNamespace},
	{&batchv1.JobList{}, &batchv1.Job{}, cluster.CattleNamespace},
	{&upgradev1.PlanList{}, &upgradev1.Plan{}, cluster.CattleNamespace},
}

// Cleanup deletes the plan's objects by label, a collection at a time.
//
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=services;configmaps,verbs=deletecollection
// +kubebuilder:rbac:groups=apps,namespace=harvester-system,resources=deployments,verbs=deletecollection
// +kubebuilder:rbac:groups=batch,namespace=harvester-system,resources=jobs,verbs=deletecollection
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=harvester-system,resources=virtualmachineimages,verbs=deletecollection
// +kubebuilder:rbac:groups=batch,namespace=cattle-system,resources=jobs,verbs=deletecollection
// +kubebuilder:rbac:groups=upgrade.cattle.io,namespace=cattle-system,resources=plans,verbs=deletecollection

// Cleanup undoes what a finished or deleted plan created and changed: it
// deletes every object carrying the plan's label, unmarks the nodes, and
// puts back each setting it recorded, clearing the record once restored so
// that each is restored exactly once. It is done when nothing is left.
func Cleanup(ctx context.Context, s *Scope) (Result, error) {
	sel := client.MatchingLabels{v1beta1.LabelUpgradePlan: s.Plan.Name}
	var left []string
	for _, k := range createdKinds {
		if err := s.Client.List(ctx, k.list, client.InNamespace(k.namespace), sel); err != nil {
			if meta.IsNoMatchError(err) {
				continue
			}
			return Result{}, err
		}
		items, err := meta.ExtractList(k.list)
		if err != nil {
			return Result{}, err
		}
		if len(items) == 0 {
			continue
		}
		for _, o := range items {
			mo := o.(client.Object)
			left = append(left, fmt.Sprintf("%T %s/%s", mo, mo.GetNamespace(), mo.GetName()))
		}
		err = s.Client.DeleteAllOf(ctx, k.obj, client.InNamespace(k.namespace), sel,
			client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !meta.IsNoMatchError(err) {
			return Result{}, fmt.Errorf("deleting the plan's %T objects in %s: %w", k.obj, k.namespace, err)
		}
	}
	if err := unmarkNodes(ctx, s); err != nil {
		return Result{}, err
	}
	if err := restoreSettings(ctx, s); err != nil {
		return Result{}, err
	}
	if len(left) > 0 {
		return Wait("cleaning up: waiting for %s to be deleted", strings.Join(left, ", ")), nil
	}
	return Done(), nil
}

// unmarkNodes removes the plan's marks from the nodes: the pending OS image
// annotation and the KubeVirt drain taint the pre-drain work puts on.
func unmarkNodes(ctx context.Context, s *Scope) error {
	var nodes corev1.NodeList
	if err := s.Client.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		before := n.DeepCopy()
		delete(n.Annotations, v1beta1.AnnotationPendingOSImage)
		n.Spec.Taints = without(n.Spec.Taints, cluster.TaintKubeVirtDrain, cluster.KubeVirtDrainTaintValue)
		if len(n.Annotations) == len(before.Annotations) && len(n.Spec.Taints) == len(before.Spec.Taints) {
			continue
		}
		if err := s.Client.Patch(ctx, n, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("unmarking node %s: %w", n.Name, client.IgnoreNotFound(err))
		}
	}
	return nil
}

func without(taints []corev1.Taint, key, value string) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if t.Key != key || t.Value != value {
			out = append(out, t)
		}
	}
	return out
}

// restoreSettings puts back every recorded setting and forgets the record.
func restoreSettings(ctx context.Context, s *Scope) error {
	saved := s.Plan.Status.SavedSettings
	if saved == nil {
		return nil
	}
	if saved.Rancher != nil {
		if err := cluster.RestoreUpgradeStrategy(ctx, s.Client, saved.Rancher.UpgradeStrategy); err != nil {
			return err
		}
		saved.Rancher = nil
	}
	if saved.LonghornReplicaReplenishmentWaitInterval != nil {
		if err := cluster.SetLonghornSetting(ctx, s.Client, cluster.LonghornReplicaReplenishmentWaitInterval,
			*saved.LonghornReplicaReplenishmentWaitInterval); err != nil {
			return err
		}
		saved.LonghornReplicaReplenishmentWaitInterval = nil
	}
	if saved.DeschedulerEnabled != nil {
		if *saved.DeschedulerEnabled {
			if err := cluster.SetAddonEnabled(ctx, s.Client, cluster.KubeSystemNamespace, cluster.DeschedulerAddon, true); err != nil {
				return err
			}
		}
		saved.DeschedulerEnabled = nil
	}
	if saved.KubeVirt != nil {
		if err := cluster.SetWorkloadUpdateMethods(ctx, s.Client, ptr.Deref(saved.KubeVirt.WorkloadUpdateMethods, nil)); err != nil {
			return err
		}
		if saved.KubeVirt.ComparePatchAdded {
			if err := cluster.SetKubeVirtComparePatch(ctx, s.Client, false); err != nil {
				return err
			}
		}
		saved.KubeVirt = nil
	}
	if *saved == (v1beta1.SavedSettings{}) {
		s.Plan.Status.SavedSettings = nil
	}
	return nil
}

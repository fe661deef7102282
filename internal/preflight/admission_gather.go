package preflight

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// GatherAdmissionFacts reads what the create-time checks judge plan against.
// Pass a reader that goes to the API server (the manager's APIReader): a
// plan is created rarely, and the checks want the current state rather than
// a cache of every kind.
func GatherAdmissionFacts(ctx context.Context, r client.Reader, plan *v1beta1.UpgradePlan) (*AdmissionFacts, error) {
	f := &AdmissionFacts{}
	var err error
	fleetLocal := client.InNamespace(cluster.FleetLocalNamespace)
	switch {
	case plan.Spec.Image != nil:
		f.ImageExists, err = admissionGet(ctx, r, cluster.HarvesterNamespace, *plan.Spec.Image, &harvesterv1beta1.VirtualMachineImage{})
	case plan.Spec.Version != nil:
		f.VersionExists, err = admissionGet(ctx, r, cluster.HarvesterNamespace, *plan.Spec.Version, &harvesterv1beta1.Version{})
	}
	if err != nil {
		return nil, err
	}

	plans := &v1beta1.UpgradePlanList{}
	if err := admissionList(ctx, r, plans, "UpgradePlans"); err != nil {
		return nil, err
	}
	for _, p := range plans.Items {
		if p.Name != plan.Name {
			f.OtherPlans = append(f.OtherPlans, p)
		}
	}

	c := &provisioningv1.Cluster{}
	if ok, err := admissionGet(ctx, r, cluster.FleetLocalNamespace, cluster.LocalClusterName, c); err != nil {
		return nil, err
	} else if ok {
		f.Cluster = c
	}

	nodes := &corev1.NodeList{}
	machines := &capiv1beta1.MachineList{}
	volumes := &longhornv1beta2.VolumeList{}
	backups := &harvesterv1beta1.VirtualMachineBackupList{}
	schedules := &harvesterv1beta1.ScheduleVMBackupList{}
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	charts := &managementv3.ManagedChartList{}
	addons := &harvesterv1beta1.AddonList{}
	for _, l := range []struct {
		list client.ObjectList
		what string
		opts []client.ListOption
	}{
		{nodes, "Nodes", nil},
		{machines, "CAPI Machines", []client.ListOption{fleetLocal}},
		{volumes, "Longhorn volumes", []client.ListOption{client.InNamespace(cluster.LonghornNamespace)}},
		{backups, "VM backups", nil},
		{schedules, "VM backup schedules", nil},
		{vmis, "VirtualMachineInstances", nil},
		{charts, "ManagedCharts", []client.ListOption{fleetLocal}},
		{addons, "Addons", nil},
	} {
		if err := admissionList(ctx, r, l.list, l.what, l.opts...); err != nil {
			return nil, err
		}
	}
	f.Nodes, f.Machines, f.Volumes = nodes.Items, machines.Items, volumes.Items
	f.Backups, f.BackupSchedules, f.VMIs = backups.Items, schedules.Items, vmis.Items
	f.ManagedCharts, f.Addons = charts.Items, addons.Items
	return f, nil
}

// AdmissionManagedNodeNames lists the names of the managed nodes, for AdmitUpdate.
func AdmissionManagedNodeNames(ctx context.Context, r client.Reader) ([]string, error) {
	nodes := &corev1.NodeList{}
	if err := admissionList(ctx, r, nodes, "Nodes", client.MatchingLabels{cluster.LabelManagedNode: "true"}); err != nil {
		return nil, err
	}
	return admissionNodeNames(nodes.Items), nil
}

func admissionGet(ctx context.Context, r client.Reader, namespace, name string, obj client.Object) (bool, error) {
	err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("reading %T %s/%s: %w", obj, namespace, name, err)
}

func admissionList(ctx context.Context, r client.Reader, l client.ObjectList, what string, opts ...client.ListOption) error {
	if err := r.List(ctx, l, opts...); err != nil {
		return fmt.Errorf("listing %s: %w", what, err)
	}
	return nil
}

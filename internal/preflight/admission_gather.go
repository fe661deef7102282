package preflight

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// What the risks are judged on, read straight from the API server by the
// manager at Initialize and for a dry run (the webhook's role says the same).
//
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans,verbs=list
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=harvester-system,resources=versions;virtualmachineimages,verbs=get
// +kubebuilder:rbac:groups=harvesterhci.io,resources=virtualmachinebackups;schedulevmbackups;addons,verbs=list
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=list
// +kubebuilder:rbac:groups=provisioning.cattle.io,namespace=fleet-local,resources=clusters,verbs=get
// +kubebuilder:rbac:groups=cluster.x-k8s.io,namespace=fleet-local,resources=machines,verbs=list
// +kubebuilder:rbac:groups=cluster.x-k8s.io,namespace=fleet-local,resources=clusters,verbs=get
// +kubebuilder:rbac:groups=management.cattle.io,namespace=fleet-local,resources=managedcharts,verbs=list
// +kubebuilder:rbac:groups=longhorn.io,namespace=longhorn-system,resources=volumes,verbs=list
// +kubebuilder:rbac:groups=fleet.cattle.io,namespace=fleet-local,resources=bundles,verbs=list
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=kube-node-lease,resources=leases,verbs=list
// +kubebuilder:rbac:groups="",resources=pods,verbs=list

// GatherAdmissionFacts reads what the create-time checks judge plan against.
// Pass a reader that goes to the API server (the manager's APIReader): a
// plan is created rarely, and the checks want the current state rather than
// a cache of every kind. alerts, when not nil, is asked for the alerts
// firing; now is the judge's clock.
func GatherAdmissionFacts(ctx context.Context, r client.Reader, plan *v1beta1.UpgradePlan, alerts AlertSource, now time.Time) (*AdmissionFacts, error) {
	f := &AdmissionFacts{Now: now}
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
	capi := &capiv1beta1.Cluster{}
	if ok, err := admissionGet(ctx, r, cluster.FleetLocalNamespace, cluster.LocalClusterName, capi); err != nil {
		return nil, err
	} else if ok {
		f.CAPICluster = capi
	}

	nodes := &corev1.NodeList{}
	machines := &capiv1beta1.MachineList{}
	volumes := &longhornv1beta2.VolumeList{}
	backups := &harvesterv1beta1.VirtualMachineBackupList{}
	schedules := &harvesterv1beta1.ScheduleVMBackupList{}
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	charts := &managementv3.ManagedChartList{}
	addons := &harvesterv1beta1.AddonList{}
	bundles := &fleetv1alpha1.BundleList{}
	budgets := &policyv1.PodDisruptionBudgetList{}
	leases := &coordinationv1.LeaseList{}
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
		{bundles, "Fleet bundles", []client.ListOption{fleetLocal}},
		{budgets, "PodDisruptionBudgets", nil},
		{leases, "node Leases", []client.ListOption{client.InNamespace(cluster.NodeLeaseNamespace)}},
	} {
		if err := admissionList(ctx, r, l.list, l.what, l.opts...); err != nil {
			return nil, err
		}
	}
	f.Nodes, f.Machines, f.Volumes = nodes.Items, machines.Items, volumes.Items
	f.Backups, f.BackupSchedules, f.VMIs = backups.Items, schedules.Items, vmis.Items
	f.ManagedCharts, f.Addons = charts.Items, addons.Items
	f.Bundles, f.Budgets, f.Leases = bundles.Items, budgets.Items, leases.Items
	for _, ns := range SystemNamespaces {
		pods := &corev1.PodList{}
		if err := admissionList(ctx, r, pods, "pods in "+ns, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		f.SystemPods = append(f.SystemPods, pods.Items...)
	}
	if alerts != nil {
		f.Alerts, f.AlertsError = alerts.Firing(ctx)
	}
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

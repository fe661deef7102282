package helper

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// ErrVMShutdown is matched (errors.Is) by the error of a shutdown that could
// not stop every VM.
var ErrVMShutdown = errors.New("some VMs could not be stopped")

// ErrVMCannotLeave is matched (errors.Is) by the error of a node with a VM
// that can neither live-migrate nor be stopped by the upgrade.
var ErrVMCannotLeave = errors.New("a VM can neither live-migrate nor be stopped by the upgrade")

// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans,verbs=get

// Plan reads an UpgradePlan, with a message that says which one is missing.
func Plan(ctx context.Context, c client.Reader, name string) (*v1beta1.UpgradePlan, error) {
	plan := &v1beta1.UpgradePlan{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, plan); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("UpgradePlan %s not found: check the plan name (kubectl get upgradeplans)", name)
		}
		return nil, fmt.Errorf("reading UpgradePlan %s: %w", name, err)
	}
	return plan, nil
}

// Detector finds the VMs on a node that cannot be live-migrated away and,
// for an upgrade, records and stops them.
type Detector struct {
	Client client.Client
	Power  VMPower
	Events *Recorder
}

// NodeVMs is what the detector found on a node.
type NodeVMs struct {
	// NonMigratable are the instances that cannot move, with the reason.
	NonMigratable []NonMigratableVMI
	// Skipped are the non-migratable instances left alone: paused ones and
	// upgrade-repo VMs of an older upgrade.
	Skipped []string
	// Paused are the skipped instances that are paused: they block the
	// node's drain until someone unpauses or stops them.
	Paused []NonMigratableVMI
}

// VMs returns the VirtualMachines of the non-migratable instances.
func (n NodeVMs) VMs() []types.NamespacedName {
	out := make([]types.NamespacedName, 0, len(n.NonMigratable))
	for _, v := range n.NonMigratable {
		out = append(out, types.NamespacedName{Namespace: v.Namespace, Name: v.Name})
	}
	return out
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=list
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list

// Detect lists the instances on the node that cannot be live-migrated, by
// the one rule the admission webhook uses too (NonMigratableVMIs).
func (d *Detector) Detect(ctx context.Context, node string) (NodeVMs, error) {
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := d.Client.List(ctx, &vmis, client.MatchingLabels{cluster.LabelVMINodeName: node}); err != nil {
		return NodeVMs{}, fmt.Errorf("listing the VirtualMachineInstances on node %s: %w", node, err)
	}
	var nodes corev1.NodeList
	if err := d.Client.List(ctx, &nodes); err != nil {
		return NodeVMs{}, fmt.Errorf("listing nodes: %w", err)
	}
	skip := map[types.NamespacedName]string{}
	for i := range vmis.Items {
		if why := ShutdownSkipReason(&vmis.Items[i]); why != "" {
			skip[client.ObjectKeyFromObject(&vmis.Items[i])] = why
		}
	}
	var out NodeVMs
	for _, v := range NonMigratableVMIs(vmis.Items, nodes.Items) {
		if v.Node != node {
			continue
		}
		if why, ok := skip[types.NamespacedName{Namespace: v.Namespace, Name: v.Name}]; ok {
			out.Skipped = append(out.Skipped, fmt.Sprintf("%s/%s (%s)", v.Namespace, v.Name, why))
			if why == skipPaused {
				out.Paused = append(out.Paused, v)
			}
			continue
		}
		out.NonMigratable = append(out.NonMigratable, v)
	}
	return out, nil
}

// IsPaused reports whether the instance is paused (its Paused condition).
func IsPaused(vmi *kubevirtv1.VirtualMachineInstance) bool {
	return kubevirtv1.ConditionStatus(vmi.Status.Conditions, cluster.ConditionPaused) == "True"
}

// skipPaused is why the detector leaves a paused instance alone: its guest
// cannot shut down while paused.
const skipPaused = "paused"

// CannotLeave returns ErrVMCannotLeave, naming each VM and what the operator
// can do, when a VM on the node can neither live-migrate nor be stopped by
// the upgrade: a paused VM that cannot migrate. Nil otherwise.
func (n NodeVMs) CannotLeave(node string) error {
	if len(n.Paused) == 0 {
		return nil
	}
	vms := make([]string, 0, len(n.Paused))
	for _, v := range n.Paused {
		vms = append(vms, fmt.Sprintf("VM %s/%s is paused and cannot live-migrate (%s): unpause it (virtctl unpause vm %s -n %s), "+
			"so that the upgrade shuts it down and starts it again after, or stop it (virtctl stop %s -n %s)",
			v.Namespace, v.Name, v.Reason, v.Name, v.Namespace, v.Name, v.Namespace))
	}
	return fmt.Errorf("%w on node %s: %s; or make it live-migratable (evictionStrategy LiveMigrate, no node pinning or host devices)",
		ErrVMCannotLeave, node, strings.Join(vms, "; "))
}

// ShutdownResult is what a shutdown did.
type ShutdownResult struct {
	Found           NodeVMs
	Stopped, Failed []string
}

// Record adds the node's non-migratable VMs to the plan's restore list and
// records RestoreVMConfigMapCreated (or RestoreVMConfigMapFailed) on the
// plan.
func (d *Detector) Record(ctx context.Context, plan *v1beta1.UpgradePlan, node string) (found NodeVMs, err error) {
	if found, err = d.Detect(ctx, node); err != nil {
		return found, err
	}
	cmName := cluster.HarvesterNamespace + "/" + names.RestoreVMConfigMap(plan.Name)
	created, err := RecordVMs(ctx, d.Client, plan, node, found.VMs())
	if err != nil {
		d.Events.Event(ctx, plan, corev1.EventTypeWarning, v1beta1.EventRestoreVMConfigMapFailed,
			"Failed to record the VMs of node %s in ConfigMap %s, so none was shut down: %v", node, cmName, err)
		return found, err
	}
	if created {
		d.Events.Event(ctx, plan, corev1.EventTypeNormal, v1beta1.EventRestoreVMConfigMapCreated, "ConfigMap %s created", cmName)
	}
	return found, nil
}

// Shutdown records the node's non-migratable VMs in the plan's restore list,
// then, only once they are recorded, stops them. It records the events
// RestoreVMConfigMapCreated (or RestoreVMConfigMapFailed), VMShutdownCompleted
// and, when a VM could not be stopped, VMShutdownFailed on the plan. A VM
// that cannot be stopped makes it fail with ErrVMShutdown, after it tried
// every VM.
func (d *Detector) Shutdown(ctx context.Context, planName, node string) (ShutdownResult, error) {
	plan, err := Plan(ctx, d.Client, planName)
	if err != nil {
		return ShutdownResult{}, err
	}
	var res ShutdownResult
	if res.Found, err = d.Record(ctx, plan, node); err != nil {
		return res, err
	}
	var failures []string
	for _, vm := range res.Found.VMs() {
		if err := d.Power.Stop(ctx, vm); err != nil {
			if apierrors.IsNotFound(err) {
				err = fmt.Errorf("instance %s has no VirtualMachine to stop: delete the instance by hand", vm)
			}
			res.Failed = append(res.Failed, vm.String())
			failures = append(failures, err.Error())
			continue
		}
		res.Stopped = append(res.Stopped, vm.String())
	}
	total := len(res.Found.NonMigratable)
	d.Events.Event(ctx, plan, corev1.EventTypeNormal, v1beta1.EventVMShutdownCompleted,
		"Shutdown completed for %d VM(s) on node %s, success: %d, failed: %d", total, node, len(res.Stopped), len(res.Failed))
	if len(res.Failed) > 0 {
		d.Events.Event(ctx, plan, corev1.EventTypeWarning, v1beta1.EventVMShutdownFailed,
			"Shutdown failed for %d of %d VM(s) on node %s: %s", len(res.Failed), total, node, strings.Join(failures, "; "))
		return res, fmt.Errorf("%w on node %s: %s; stop them by hand (virtctl stop), then let the job retry", ErrVMShutdown, node, strings.Join(failures, "; "))
	}
	return res, nil
}

// ShutdownSkipReason says why the detector leaves a non-migratable instance
// running ("paused", "upgrade repo VM"), or "" when it stops it.
func ShutdownSkipReason(vmi *kubevirtv1.VirtualMachineInstance) string {
	switch {
	case IsPaused(vmi):
		return skipPaused
	case vmi.Labels[cluster.LabelHarvesterUpgrade] != "":
		return "upgrade repo VM"
	}
	return ""
}

package cluster

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
)

// HasStatusSubresource reports whether obj's kind takes its status through
// the status subresource. Some foreign kinds have none (their real CRDs):
// Harvester's VirtualMachineImage, Version, Setting and backups, KubeVirt's
// VirtualMachineInstance, Rancher's Setting; a Lease has no status at all. Their status is written with
// the object.
func HasStatusSubresource(obj client.Object) bool {
	switch obj.(type) {
	case *harvesterv1beta1.VirtualMachineImage, *harvesterv1beta1.Version, *harvesterv1beta1.Setting,
		*harvesterv1beta1.VirtualMachineBackup, *harvesterv1beta1.ScheduleVMBackup,
		*kubevirtv1.VirtualMachineInstance, *managementv3.Setting, *coordinationv1.Lease:
		return false
	}
	return true
}

// UpdateStatus writes obj's status the way its kind takes it (see
// HasStatusSubresource).
func UpdateStatus(ctx context.Context, c client.Client, obj client.Object) error {
	if HasStatusSubresource(obj) {
		return c.Status().Update(ctx, obj)
	}
	return c.Update(ctx, obj)
}

package helper

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
)

// VMPower stops and starts VirtualMachines. Stopping a stopped VM and
// starting a running one do nothing, so a restarted job can repeat them.
type VMPower interface {
	Stop(ctx context.Context, vm types.NamespacedName) error
	Start(ctx context.Context, vm types.NamespacedName) error
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;patch

// RunStrategyPower powers VMs by their spec.runStrategy: Halted stops a VM,
// and the run strategy it had before comes back to start it. Stopping
// records that strategy in the VM's annotation
// management.harvesterhci.io/restore-run-strategy, in the same write that
// halts it, so a VM is never halted without the record.
//
// Why not KubeVirt's stop and start subresources (what virtctl calls): they
// are served by virt-api through API aggregation, which a test API server
// cannot serve, and they forget the strategy: start turns a Halted VM into
// Always, so a Harvester VM (RerunOnFailure) would come back with another
// strategy. Changing runStrategy is what those subresources do to such VMs
// anyway. A VM that ran by Manual or Once is started with Always, because
// those strategies never start an instance by themselves; the log says so.
type RunStrategyPower struct {
	Client client.Client
}

// update applies change to the VM with a merge patch guarded by its
// resourceVersion, retrying on conflicts; change reports whether it changed
// anything.
func (p RunStrategyPower) update(ctx context.Context, key types.NamespacedName, change func(*kubevirtv1.VirtualMachine) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vm := &kubevirtv1.VirtualMachine{}
		if err := p.Client.Get(ctx, key, vm); err != nil {
			return err
		}
		before := vm.DeepCopy()
		if !change(vm) {
			return nil
		}
		return p.Client.Patch(ctx, vm, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
}

// Stop halts the VM and remembers its run strategy.
func (p RunStrategyPower) Stop(ctx context.Context, key types.NamespacedName) error {
	err := p.update(ctx, key, func(vm *kubevirtv1.VirtualMachine) bool {
		current := cluster.RunStrategy(vm)
		if current == cluster.RunStrategyHalted {
			return false
		}
		if vm.Annotations == nil {
			vm.Annotations = map[string]string{}
		}
		if vm.Annotations[v1beta1.AnnotationRestoreRunStrategy] == "" {
			vm.Annotations[v1beta1.AnnotationRestoreRunStrategy] = current
		}
		vm.Spec.Running = nil
		vm.Spec.RunStrategy = ptr.To(cluster.RunStrategyHalted)
		return true
	})
	if err != nil {
		return fmt.Errorf("stopping VM %s (runStrategy Halted): %w", key, err)
	}
	return nil
}

// Start gives the VM back the run strategy Stop recorded (RerunOnFailure,
// Harvester's default, when a halted VM has no record) and removes the
// record. A VM someone started meanwhile keeps its strategy.
func (p RunStrategyPower) Start(ctx context.Context, key types.NamespacedName) error {
	err := p.update(ctx, key, func(vm *kubevirtv1.VirtualMachine) bool {
		recorded := vm.Annotations[v1beta1.AnnotationRestoreRunStrategy]
		halted := cluster.RunStrategy(vm) == cluster.RunStrategyHalted
		if !halted && recorded == "" {
			return false
		}
		delete(vm.Annotations, v1beta1.AnnotationRestoreRunStrategy)
		if !halted {
			return true
		}
		target := recorded
		switch target {
		case cluster.RunStrategyAlways, cluster.RunStrategyRerunOnFailure:
		case "":
			target = cluster.RunStrategyRerunOnFailure
		default:
			log.FromContext(ctx).Info("starting the VM with run strategy Always: its recorded strategy never starts an instance by itself",
				"vm", key.String(), "recorded", recorded)
			target = cluster.RunStrategyAlways
		}
		vm.Spec.Running = nil
		vm.Spec.RunStrategy = ptr.To(target)
		return true
	})
	if err != nil {
		return fmt.Errorf("starting VM %s: %w", key, err)
	}
	return nil
}

package cluster

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
)

// WorkloadUpdateMethodsPointer is the JSON pointer of KubeVirt's workload
// update methods, which Fleet must leave alone while the upgrade empties them.
const WorkloadUpdateMethodsPointer = "/spec/workloadUpdateStrategy/workloadUpdateMethods"

// absent reports whether err means the object, or its kind, does not exist.
func absent(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}

// WorkloadUpdateMethods returns KubeVirt's workload update methods (nil when
// the field is not set); found is false when the cluster has no KubeVirt
// object.
func WorkloadUpdateMethods(ctx context.Context, c client.Reader) (methods []string, found bool, err error) {
	kv := &kubevirtv1.KubeVirt{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: HarvesterNamespace, Name: KubeVirtName}, kv); err != nil {
		if absent(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("reading KubeVirt %s/%s: %w", HarvesterNamespace, KubeVirtName, err)
	}
	return kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods, true, nil
}

// SetWorkloadUpdateMethods sets KubeVirt's workload update methods: an empty
// list keeps running VMs where they are when KubeVirt is upgraded; nil
// removes the field so KubeVirt's default applies. A missing KubeVirt object
// is left alone.
func SetWorkloadUpdateMethods(ctx context.Context, c client.Client, methods []string) error {
	kv := &kubevirtv1.KubeVirt{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: HarvesterNamespace, Name: KubeVirtName}, kv); err != nil {
		if absent(err) {
			return nil
		}
		return fmt.Errorf("reading KubeVirt %s/%s: %w", HarvesterNamespace, KubeVirtName, err)
	}
	current := kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods
	if (current == nil) == (methods == nil) && slices.Equal(current, methods) {
		return nil
	}
	before := kv.DeepCopy()
	kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods = methods
	if err := c.Patch(ctx, kv, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("setting the workload update methods of KubeVirt %s/%s to %v: %w", HarvesterNamespace, KubeVirtName, methods, err)
	}
	return nil
}

func kubeVirtComparePatch(p managementv3.ComparePatch) bool {
	return p.Kind == "KubeVirt" && p.Name == KubeVirtName && slices.Contains(p.JSONPointers, WorkloadUpdateMethodsPointer)
}

// HasKubeVirtComparePatch reports whether the harvester ManagedChart tells
// Fleet to ignore KubeVirt's workload update methods; found is false when
// there is no such ManagedChart.
func HasKubeVirtComparePatch(ctx context.Context, c client.Reader) (has, found bool, err error) {
	mc := &managementv3.ManagedChart{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: FleetLocalNamespace, Name: HarvesterManagedChart}, mc); err != nil {
		if absent(err) {
			return false, false, nil
		}
		return false, false, fmt.Errorf("reading ManagedChart %s/%s: %w", FleetLocalNamespace, HarvesterManagedChart, err)
	}
	return mc.Spec.Diff != nil && slices.ContainsFunc(mc.Spec.Diff.ComparePatches, kubeVirtComparePatch), true, nil
}

// SetKubeVirtComparePatch adds (want true) or removes the comparePatch that
// keeps Fleet from reverting KubeVirt's workload update methods.
func SetKubeVirtComparePatch(ctx context.Context, c client.Client, want bool) error {
	mc := &managementv3.ManagedChart{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: FleetLocalNamespace, Name: HarvesterManagedChart}, mc); err != nil {
		if absent(err) {
			return nil
		}
		return fmt.Errorf("reading ManagedChart %s/%s: %w", FleetLocalNamespace, HarvesterManagedChart, err)
	}
	before := mc.DeepCopy()
	if mc.Spec.Diff == nil {
		mc.Spec.Diff = &managementv3.DiffOptions{}
	}
	has := slices.ContainsFunc(mc.Spec.Diff.ComparePatches, kubeVirtComparePatch)
	switch {
	case want && !has:
		mc.Spec.Diff.ComparePatches = append(mc.Spec.Diff.ComparePatches, managementv3.ComparePatch{
			APIVersion: kubevirtv1.GroupVersion.String(), Kind: "KubeVirt",
			Namespace: HarvesterNamespace, Name: KubeVirtName,
			JSONPointers: []string{WorkloadUpdateMethodsPointer},
		})
	case !want && has:
		mc.Spec.Diff.ComparePatches = slices.DeleteFunc(mc.Spec.Diff.ComparePatches, kubeVirtComparePatch)
	default:
		return nil
	}
	// The whole list is replaced, so the write must not race another one.
	if err := c.Patch(ctx, mc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("updating the comparePatches of ManagedChart %s/%s: %w", FleetLocalNamespace, HarvesterManagedChart, err)
	}
	return nil
}

// KubeVirtReady judges the KubeVirt installation: ready when its phase is
// Deployed and its Available condition is not False. The status says what
// it reports otherwise.
func KubeVirtReady(kv *kubevirtv1.KubeVirt) (ready bool, status string) {
	st := kv.Status
	status = fmt.Sprintf("KubeVirt %s/%s is in phase %q", kv.Namespace, kv.Name, st.Phase)
	if c := kubevirtv1.FindCondition(st.Conditions, ConditionAvailable); c != nil {
		status += fmt.Sprintf(", Available=%s", c.Status)
		if c.Message != "" {
			status += " (" + c.Message + ")"
		}
		if c.Status == "False" {
			return false, status
		}
	}
	if st.ObservedKubeVirtVersion != "" {
		status += ", version " + st.ObservedKubeVirtVersion
	}
	return st.Phase == KubeVirtPhaseDeployed, status
}

// KubeVirtObject reads harvester-system/kubevirt.
func KubeVirtObject(ctx context.Context, c client.Reader) (*kubevirtv1.KubeVirt, error) {
	kv := &kubevirtv1.KubeVirt{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: HarvesterNamespace, Name: KubeVirtName}, kv); err != nil {
		return nil, fmt.Errorf("reading KubeVirt %s/%s: %w", HarvesterNamespace, KubeVirtName, err)
	}
	return kv, nil
}

// RunStrategy is a VM's effective run strategy: spec.runStrategy, else the
// deprecated spec.running (true is Always), else Halted.
func RunStrategy(vm *kubevirtv1.VirtualMachine) string {
	switch {
	case vm.Spec.RunStrategy != nil:
		return *vm.Spec.RunStrategy
	case vm.Spec.Running != nil && *vm.Spec.Running:
		return RunStrategyAlways
	}
	return RunStrategyHalted
}

// StateChangeStop is the action of a stop request (virtctl stop of a
// RerunOnFailure or Manual VM, which keeps its run strategy).
const StateChangeStop = "Stop"

// StopRequested reports whether the VM has a stop request KubeVirt has not
// carried out yet.
func StopRequested(vm *kubevirtv1.VirtualMachine) bool {
	for _, r := range vm.Status.StateChangeRequests {
		if r.Action == StateChangeStop {
			return true
		}
	}
	return false
}

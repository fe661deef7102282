package plantest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// VMNamespace holds the tests' VMs; the cleanup deletes them.
const VMNamespace = "default"

// VM creates a running RerunOnFailure VM (Harvester's default) and its
// instance on a node, as Harvester and KubeVirt make them.
func (h *Harness) VM(name, node string) types.NamespacedName {
	h.T.Helper()
	key := types.NamespacedName{Namespace: VMNamespace, Name: name}
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(cluster.RunStrategyRerunOnFailure),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{EvictionStrategy: ptr.To("LiveMigrateIfPossible")}}}}
	h.Must(h.C.Create(h.Ctx(), vm))
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		Labels:          map[string]string{cluster.LabelVMINodeName: node},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: kubevirtv1.GroupVersion.String(), Kind: "VirtualMachine", Name: name, UID: vm.UID, Controller: ptr.To(true)}}},
		Spec: vm.Spec.Template.Spec}
	h.Must(h.C.Create(h.Ctx(), vmi))
	vmi.Status = kubevirtv1.VirtualMachineInstanceStatus{NodeName: node, Phase: "Running"}
	h.Must(cluster.UpdateStatus(h.Ctx(), h.C, vmi))
	return key
}

// Migration plays KubeVirt's evacuation migration name of a VM, created if
// needed, in a phase: Running from its node to target, Succeeded with the
// instance moved there, Failed with reason.
func (h *Harness) Migration(vm types.NamespacedName, name, phase, target, reason string) {
	h.T.Helper()
	m := &kubevirtv1.VirtualMachineInstanceMigration{}
	key := types.NamespacedName{Namespace: vm.Namespace, Name: name}
	if err := h.C.Get(h.Ctx(), key, m); err != nil {
		m = &kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: name,
			Labels: map[string]string{cluster.LabelMigrationVMIName: vm.Name}}, Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vm.Name}}
		h.Must(h.C.Create(h.Ctx(), m))
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	h.Must(h.C.Get(h.Ctx(), vm, vmi))
	now := metav1.Now()
	st := m.Status.MigrationState
	if st == nil {
		st = &kubevirtv1.MigrationState{StartTimestamp: &now, SourceNode: vmi.Status.NodeName, TargetNode: target, MigrationUID: m.UID}
	}
	m.Status.Phase = phase
	switch phase {
	case cluster.MigrationPhaseSucceeded:
		st.EndTimestamp, st.Completed = &now, true
		vmi.Labels[cluster.LabelVMINodeName] = target
		h.Must(h.C.Update(h.Ctx(), vmi))
		vmi.Status.NodeName = target
		h.Must(cluster.UpdateStatus(h.Ctx(), h.C, vmi))
	case cluster.MigrationPhaseFailed:
		st.EndTimestamp, st.Failed, st.FailureReason = &now, true, reason
	}
	m.Status.MigrationState = st
	h.Must(h.C.Status().Update(h.Ctx(), m))
}

// InstanceEnds plays KubeVirt ending a VM's instance: a phase (Succeeded,
// Failed), or deleted when phase is empty.
func (h *Harness) InstanceEnds(vm types.NamespacedName, phase string) {
	h.T.Helper()
	vmi := &kubevirtv1.VirtualMachineInstance{}
	h.Must(h.C.Get(h.Ctx(), vm, vmi))
	if phase == "" {
		h.Must(h.C.Delete(h.Ctx(), vmi))
		return
	}
	vmi.Status.Phase = phase
	h.Must(cluster.UpdateStatus(h.Ctx(), h.C, vmi))
}

// ChangeVM changes a VM as the named client (field manager) would.
func (h *Harness) ChangeVM(vm types.NamespacedName, manager string, change func(*kubevirtv1.VirtualMachine)) {
	h.T.Helper()
	v := &kubevirtv1.VirtualMachine{}
	h.Must(h.C.Get(h.Ctx(), vm, v))
	before := v.DeepCopy()
	change(v)
	h.Must(h.C.Patch(h.Ctx(), v, client.MergeFrom(before), client.FieldOwner(manager)))
}

// GetVM reads a VM.
func (h *Harness) GetVM(vm types.NamespacedName) *kubevirtv1.VirtualMachine {
	h.T.Helper()
	v := &kubevirtv1.VirtualMachine{}
	h.Must(h.C.Get(h.Ctx(), vm, v))
	return v
}

// Ledger reads the plan's VM ledger, nil when it has none.
func (h *Harness) Ledger(plan string) *vmledger.Ledger {
	h.T.Helper()
	l, _, err := vmledger.Read(h.Ctx(), h.C, plan)
	h.Must(err)
	return l
}

package vmledger

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/helper"
)

// Snapshot records every VM as it is when the plan starts: whether and where
// it runs, and how it will leave its node, by the rule the pre-drain Job
// applies (helper.NonMigratableVMIs): a VM that cannot live-migrate is shut
// down, and started again after its node's upgrade when restore is set
// (spec.restoreVM).
func Snapshot(at time.Time, vms []kubevirtv1.VirtualMachine, vmis []kubevirtv1.VirtualMachineInstance, nodes []corev1.Node, restore bool) *Ledger {
	byKey := map[types.NamespacedName]*kubevirtv1.VirtualMachineInstance{}
	for i := range vmis {
		byKey[types.NamespacedName{Namespace: vmis[i].Namespace, Name: vmis[i].Name}] = &vmis[i]
	}
	stuck := map[types.NamespacedName]string{}
	for _, v := range helper.NonMigratableVMIs(vmis, nodes) {
		stuck[types.NamespacedName{Namespace: v.Namespace, Name: v.Name}] = v.Reason
	}
	l := &Ledger{Started: at.UTC().Truncate(time.Second), Records: make([]Record, 0, len(vms))}
	for i := range vms {
		key := types.NamespacedName{Namespace: vms[i].Namespace, Name: vms[i].Name}
		r := Record{VM: key.String(), State: Stopped, Leave: LeaveNone}
		if vmi := byKey[key]; vmi != nil && !Final(vmi) {
			r.State, r.Node, r.Instance, r.Leave = Running, vmi.Status.NodeName, InstanceName(vmi), LeaveMigrate
			if helper.IsPaused(vmi) {
				r.State = Paused
			}
			if why, ok := stuck[key]; ok {
				r.Leave, r.Why, r.Restore = LeaveStop, why, restore
				if skip := helper.ShutdownSkipReason(vmi); skip != "" {
					r.Why += "; left running by the upgrade: " + skip
				}
			}
		}
		l.Records = append(l.Records, r)
	}
	l.Sort()
	return l
}

// InstanceName names an instance in the ledger: the start of its UID, enough
// to tell one instance of a VM from the next.
func InstanceName(vmi *kubevirtv1.VirtualMachineInstance) string {
	uid := strings.ReplaceAll(string(vmi.UID), "-", "")
	return uid[:min(8, len(uid))]
}

// Final reports whether an instance has ended, or is being deleted.
func Final(vmi *kubevirtv1.VirtualMachineInstance) bool {
	p := vmi.Status.Phase
	return p == cluster.VMIPhaseSucceeded || p == cluster.VMIPhaseFailed || vmi.DeletionTimestamp != nil
}

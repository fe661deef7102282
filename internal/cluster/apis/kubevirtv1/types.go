// Package kubevirtv1 holds the kubevirt.io/v1 kinds the toolkit reads or
// writes, reduced to the fields it uses.
//
// +kubebuilder:object:generate=true
// +groupName=kubevirt.io
// +versionName=v1
package kubevirtv1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion of the KubeVirt kinds.
var GroupVersion = schema.GroupVersion{Group: "kubevirt.io", Version: "v1"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(
		&KubeVirt{}, &KubeVirtList{},
		&VirtualMachine{}, &VirtualMachineList{},
		&VirtualMachineInstance{}, &VirtualMachineInstanceList{},
		&VirtualMachineInstanceMigration{}, &VirtualMachineInstanceMigrationList{},
	)
}

// KubeVirt configures the KubeVirt installation (harvester-system/kubevirt).
//
// +kubebuilder:object:root=true
type KubeVirt struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              KubeVirtSpec `json:"spec"`
	// +optional
	Status KubeVirtStatus `json:"status,omitempty"`
}

// KubeVirtSpec holds the workload update strategy.
type KubeVirtSpec struct {
	// +optional
	WorkloadUpdateStrategy KubeVirtWorkloadUpdateStrategy `json:"workloadUpdateStrategy,omitempty"`
}

// KubeVirtWorkloadUpdateStrategy says how running VMs follow a KubeVirt
// update; an empty method list leaves them alone.
type KubeVirtWorkloadUpdateStrategy struct {
	// WorkloadUpdateMethods is a list of LiveMigrate and Evict.
	// +optional
	// +listType=atomic
	WorkloadUpdateMethods []string `json:"workloadUpdateMethods"`
	// +optional
	BatchEvictionSize *int `json:"batchEvictionSize,omitempty"`
}

// KubeVirtStatus reports the deployment of KubeVirt.
type KubeVirtStatus struct {
	// Phase is e.g. Deploying or Deployed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	ObservedKubeVirtVersion string `json:"observedKubeVirtVersion,omitempty"`
	// +optional
	TargetKubeVirtVersion string `json:"targetKubeVirtVersion,omitempty"`
	// +optional
	Conditions []Condition `json:"conditions,omitempty"`
}

// Condition is KubeVirt's condition shape (no lastUpdateTime, unlike
// wrangler's).
type Condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	// +optional
	LastProbeTime metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// ConditionStatus returns the status of the condition of type t, "" when
// there is none.
func ConditionStatus(conds []Condition, t string) string {
	if c := FindCondition(conds, t); c != nil {
		return c.Status
	}
	return ""
}

// FindCondition returns the condition of type t, or nil.
func FindCondition(conds []Condition, t string) *Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// KubeVirtList is a list of KubeVirts.
//
// +kubebuilder:object:root=true
type KubeVirtList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KubeVirt `json:"items"`
}

// VirtualMachine is a VM definition; its run strategy says whether an
// instance should run.
//
// +kubebuilder:object:root=true
type VirtualMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineSpec `json:"spec"`
	// +optional
	Status VirtualMachineStatus `json:"status,omitempty"`
}

// VirtualMachineSpec holds the run strategy and the instance template.
type VirtualMachineSpec struct {
	// +optional
	Running *bool `json:"running,omitempty"`
	// RunStrategy is Always, Halted, Manual, RerunOnFailure or Once.
	// +optional
	RunStrategy *string `json:"runStrategy,omitempty"`
	// +optional
	Template *VirtualMachineInstanceTemplateSpec `json:"template,omitempty"`
}

// VirtualMachineInstanceTemplateSpec is the template of the VM's instances.
type VirtualMachineInstanceTemplateSpec struct {
	// +optional
	ObjectMeta metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec VirtualMachineInstanceSpec `json:"spec,omitempty"`
}

// VirtualMachineStatus reports the VM.
type VirtualMachineStatus struct {
	// PrintableStatus is e.g. Running, Stopped, Migrating, Starting.
	// +optional
	PrintableStatus string `json:"printableStatus,omitempty"`
	// +optional
	Ready bool `json:"ready,omitempty"`
	// +optional
	Created bool `json:"created,omitempty"`
	// RunStrategy is the run strategy KubeVirt last acted on: a
	// RerunOnFailure VM whose instance succeeded starts again only on a
	// start request or a change of its run strategy.
	// +optional
	RunStrategy string `json:"runStrategy,omitempty"`
	// StateChangeRequests are the start and stop requests of virtctl
	// (virt-api's start, stop and restart subresources).
	// +optional
	StateChangeRequests []StateChangeRequest `json:"stateChangeRequests,omitempty"`
}

// StateChangeRequest asks KubeVirt to start or stop a VM's instance.
type StateChangeRequest struct {
	// Action is Start or Stop.
	Action string `json:"action"`
	// UID is the instance a Stop applies to.
	// +optional
	UID *types.UID `json:"uid,omitempty"`
}

// VirtualMachineList is a list of VirtualMachines.
//
// +kubebuilder:object:root=true
type VirtualMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachine `json:"items"`
}

// VirtualMachineInstance is a running VM.
//
// +kubebuilder:object:root=true
type VirtualMachineInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineInstanceSpec `json:"spec"`
	// +optional
	Status VirtualMachineInstanceStatus `json:"status,omitempty"`
}

// VirtualMachineInstanceSpec holds what decides whether the instance can be
// live-migrated.
type VirtualMachineInstanceSpec struct {
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	Domain DomainSpec `json:"domain,omitempty"`
	// EvictionStrategy is None, LiveMigrate, LiveMigrateIfPossible or External.
	// +optional
	EvictionStrategy *string `json:"evictionStrategy,omitempty"`
}

// DomainSpec holds the devices of the instance.
type DomainSpec struct {
	// +optional
	Devices Devices `json:"devices,omitempty"`
}

// Devices lists passthrough devices, which pin an instance to its node.
type Devices struct {
	// +optional
	HostDevices []HostDevice `json:"hostDevices,omitempty"`
	// +optional
	GPUs []HostDevice `json:"gpus,omitempty"`
}

// HostDevice is a PCI, USB or vGPU device passed through to the instance.
type HostDevice struct {
	Name       string `json:"name"`
	DeviceName string `json:"deviceName"`
}

// VirtualMachineInstanceStatus reports where and how the instance runs.
type VirtualMachineInstanceStatus struct {
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Phase is Pending, Scheduling, Scheduled, Running, Succeeded, Failed or
	// Unknown.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Conditions such as Ready, Paused and LiveMigratable.
	// +optional
	Conditions []Condition `json:"conditions,omitempty"`
	// MigrationState is the instance's last live migration.
	// +optional
	MigrationState *MigrationState `json:"migrationState,omitempty"`
}

// MigrationState is what KubeVirt reports of a live migration, on the
// instance (its last one) and on the migration object.
type MigrationState struct {
	// +optional
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`
	// +optional
	EndTimestamp *metav1.Time `json:"endTimestamp,omitempty"`
	// +optional
	SourceNode string `json:"sourceNode,omitempty"`
	// +optional
	TargetNode string `json:"targetNode,omitempty"`
	// +optional
	Completed bool `json:"completed,omitempty"`
	// +optional
	Failed bool `json:"failed,omitempty"`
	// FailureReason says why the migration failed, e.g. "Live migration has
	// been aborted" for one that did not converge before its completion
	// timeout.
	// +optional
	FailureReason string `json:"failureReason,omitempty"`
	// MigrationUID is the migration object's UID.
	// +optional
	MigrationUID types.UID `json:"migrationUid,omitempty"`
}

// VirtualMachineInstanceList is a list of VirtualMachineInstances.
//
// +kubebuilder:object:root=true
type VirtualMachineInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstance `json:"items"`
}

// VirtualMachineInstanceMigration moves an instance to another node.
//
// +kubebuilder:object:root=true
type VirtualMachineInstanceMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineInstanceMigrationSpec `json:"spec"`
	// +optional
	Status VirtualMachineInstanceMigrationStatus `json:"status,omitempty"`
}

// VirtualMachineInstanceMigrationSpec names the instance to move.
type VirtualMachineInstanceMigrationSpec struct {
	VMIName string `json:"vmiName"`
}

// VirtualMachineInstanceMigrationStatus reports the migration.
type VirtualMachineInstanceMigrationStatus struct {
	// Phase is Pending, Scheduling, Scheduled, PreparingTarget, TargetReady,
	// Running, Succeeded or Failed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// PhaseTransitionTimestamps record when the migration entered each
	// phase.
	// +optional
	PhaseTransitionTimestamps []MigrationPhaseTransition `json:"phaseTransitionTimestamps,omitempty"`
	// MigrationState is how the migration went.
	// +optional
	MigrationState *MigrationState `json:"migrationState,omitempty"`
}

// MigrationPhaseTransition is when a migration entered a phase.
type MigrationPhaseTransition struct {
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp,omitempty"`
}

// VirtualMachineInstanceMigrationList is a list of migrations.
//
// +kubebuilder:object:root=true
type VirtualMachineInstanceMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstanceMigration `json:"items"`
}

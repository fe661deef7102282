// Package harvesterv1beta1 holds the harvesterhci.io/v1beta1 kinds the
// toolkit reads or writes, reduced to the fields it uses.
//
// +kubebuilder:object:generate=true
// +groupName=harvesterhci.io
// +versionName=v1beta1
package harvesterv1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
)

// GroupVersion of the Harvester kinds.
var GroupVersion = schema.GroupVersion{Group: "harvesterhci.io", Version: "v1beta1"}

var (
	schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme registers the kinds of this package.
	AddToScheme = schemeBuilder.AddToScheme
)

func init() {
	schemeBuilder.Register(
		&Version{}, &VersionList{},
		&VirtualMachineImage{}, &VirtualMachineImageList{},
		&Setting{}, &SettingList{},
		&Addon{}, &AddonList{},
		&VirtualMachineBackup{}, &VirtualMachineBackupList{},
		&ScheduleVMBackup{}, &ScheduleVMBackupList{},
		&Upgrade{}, &UpgradeList{},
	)
}

// Version describes a Harvester release that can be upgraded to.
//
// +kubebuilder:object:root=true
type Version struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VersionSpec `json:"spec"`
}

// VersionSpec is where the release ISO lives.
type VersionSpec struct {
	ISOURL string `json:"isoURL"`
	// +optional
	ISOChecksum string `json:"isoChecksum,omitempty"`
	// +optional
	ReleaseDate string `json:"releaseDate,omitempty"`
	// +optional
	MinUpgradableVersion string `json:"minUpgradableVersion,omitempty"`
	// +optional
	Tags []string `json:"tags,omitempty"`
}

// VersionList is a list of Versions.
//
// +kubebuilder:object:root=true
type VersionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Version `json:"items"`
}

// VirtualMachineImage is an image (here: the release ISO) imported into the
// cluster's storage by Harvester and CDI.
//
// +kubebuilder:object:root=true
type VirtualMachineImage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineImageSpec `json:"spec"`
	// +optional
	Status VirtualMachineImageStatus `json:"status,omitempty"`
}

// VirtualMachineImageSpec says where the image comes from and where it goes.
type VirtualMachineImageSpec struct {
	DisplayName string `json:"displayName"`
	// +optional
	Description string `json:"description,omitempty"`
	// SourceType is download, upload, export-from-volume, restore or clone.
	SourceType string `json:"sourceType"`
	// +optional
	URL string `json:"url,omitempty"`
	// +optional
	Checksum string `json:"checksum,omitempty"`
	// +optional
	Retry int `json:"retry,omitempty"`
	// Backend is backingimage or cdi.
	// +optional
	Backend string `json:"backend,omitempty"`
	// +optional
	TargetStorageClassName string `json:"targetStorageClassName,omitempty"`
	// +optional
	StorageClassParameters map[string]string `json:"storageClassParameters,omitempty"`
}

// VirtualMachineImageStatus reports the import.
type VirtualMachineImageStatus struct {
	// +optional
	AppliedURL string `json:"appliedUrl,omitempty"`
	// Progress is the import progress in percent.
	// +optional
	Progress int `json:"progress,omitempty"`
	// +optional
	Size int64 `json:"size,omitempty"`
	// +optional
	VirtualSize int64 `json:"virtualSize,omitempty"`
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`
	// +optional
	TargetStorageClassName string `json:"targetStorageClassName,omitempty"`
	// Failed counts failed import attempts.
	// +optional
	Failed int `json:"failed,omitempty"`
	// Conditions: Initialized, Imported, RetryLimitExceeded.
	// +optional
	Conditions []common.Condition `json:"conditions,omitempty"`
}

// VirtualMachineImageList is a list of VirtualMachineImages.
//
// +kubebuilder:object:root=true
type VirtualMachineImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineImage `json:"items"`
}

// Setting is a cluster-wide Harvester setting such as server-version.
//
// +kubebuilder:object:root=true
type Setting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Value string `json:"value,omitempty"`
	// +optional
	Default string `json:"default,omitempty"`
}

// SettingList is a list of Settings.
//
// +kubebuilder:object:root=true
type SettingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Setting `json:"items"`
}

// Addon is an optional Harvester component deployed as a Helm chart.
//
// +kubebuilder:object:root=true
type Addon struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              AddonSpec `json:"spec"`
	// +optional
	Status AddonStatus `json:"status,omitempty"`
}

// AddonSpec is the chart and whether it is enabled.
type AddonSpec struct {
	// Every field is required by the schema, empty values included: an
	// Addon written without valuesContent is refused.
	Repo          string `json:"repo"`
	Chart         string `json:"chart"`
	Version       string `json:"version"`
	Enabled       bool   `json:"enabled"`
	ValuesContent string `json:"valuesContent"`
}

// AddonStatus reports the deployment of the addon.
type AddonStatus struct {
	// Status is e.g. AddonEnabling, AddonDeploySuccessful, AddonDeployFailed,
	// AddonDisabling, AddonUpdating.
	// +optional
	Status string `json:"status,omitempty"`
	// +optional
	Conditions []common.Condition `json:"conditions,omitempty"`
}

// AddonList is a list of Addons.
//
// +kubebuilder:object:root=true
type AddonList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Addon `json:"items"`
}

// VirtualMachineBackup is a backup or snapshot of one VM.
//
// +kubebuilder:object:root=true
type VirtualMachineBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineBackupSpec `json:"spec"`
	// +optional
	Status *VirtualMachineBackupStatus `json:"status,omitempty"`
}

// VirtualMachineBackupSpec names the VM and the kind of backup.
type VirtualMachineBackupSpec struct {
	Source BackupSource `json:"source"`
	// Type is backup or snapshot.
	// +optional
	Type string `json:"type,omitempty"`
}

// BackupSource is a typed local object reference.
type BackupSource struct {
	// +optional
	APIGroup *string `json:"apiGroup,omitempty"`
	Kind     string  `json:"kind"`
	Name     string  `json:"name"`
}

// BackupSourceSpec is the copy of the virtual machine a backup holds; the
// toolkit does not read it.
type BackupSourceSpec struct{}

// VirtualMachineBackupStatus reports the backup.
type VirtualMachineBackupStatus struct {
	// Source is required by the schema once there is a status.
	Source BackupSourceSpec `json:"source"`
	// +optional
	ReadyToUse *bool `json:"readyToUse,omitempty"`
	// +optional
	Progress int `json:"progress,omitempty"`
	// +optional
	Error *BackupError `json:"error,omitempty"`
}

// BackupError is the last error of a backup.
type BackupError struct {
	// +optional
	Message *string `json:"message,omitempty"`
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// VirtualMachineBackupList is a list of VirtualMachineBackups.
//
// +kubebuilder:object:root=true
type VirtualMachineBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineBackup `json:"items"`
}

// ScheduleVMBackup takes VM backups or snapshots on a cron schedule.
//
// +kubebuilder:object:root=true
type ScheduleVMBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScheduleVMBackupSpec `json:"spec"`
	// +optional
	Status ScheduleVMBackupStatus `json:"status,omitempty"`
}

// ScheduleVMBackupSpec is the schedule.
type ScheduleVMBackupSpec struct {
	Cron string `json:"cron"`
	// VMBackup is the backup each run takes (required by the schema).
	VMBackup VirtualMachineBackupSpec `json:"vmbackup"`
	// +optional
	Retain int `json:"retain,omitempty"`
	// +optional
	MaxFailure int `json:"maxFailure,omitempty"`
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ScheduleVMBackupStatus reports the schedule.
type ScheduleVMBackupStatus struct {
	// +optional
	Suspended bool `json:"suspended,omitempty"`
}

// ScheduleVMBackupList is a list of ScheduleVMBackups.
//
// +kubebuilder:object:root=true
type ScheduleVMBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ScheduleVMBackup `json:"items"`
}

// Upgrade is Harvester's built-in (V1) upgrade, reduced to whether it has
// finished: its Completed condition is True or False once it has.
//
// +kubebuilder:object:root=true
type Upgrade struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              UpgradeSpec `json:"spec"`
	// +optional
	Status UpgradeStatus `json:"status,omitempty"`
}

// UpgradeSpec is the version the upgrade goes to.
type UpgradeSpec struct {
	// +optional
	Version string `json:"version,omitempty"`
}

// UpgradeStatus holds the upgrade's conditions.
type UpgradeStatus struct {
	// +optional
	Conditions []UpgradeCondition `json:"conditions,omitempty"`
}

// UpgradeCondition is one of an Upgrade's conditions (wrangler's shape).
type UpgradeCondition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	// +optional
	Message string `json:"message,omitempty"`
}

// Finished reports whether the upgrade has ended, in success or failure.
func (u *Upgrade) Finished() bool {
	for _, c := range u.Status.Conditions {
		if c.Type == "Completed" {
			return c.Status == "True" || c.Status == "False"
		}
	}
	return false
}

// UpgradeList is a list of Upgrades.
//
// +kubebuilder:object:root=true
type UpgradeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Upgrade `json:"items"`
}

package cluster

// Values of the status fields of foreign kinds that the toolkit judges.
const (
	// ConditionReady is the Ready condition of Rancher, Fleet and Harvester
	// objects (ManagedChart, provisioning Cluster) and of Nodes.
	ConditionReady = "Ready"

	// MachinePhaseRunning is the phase of a CAPI Machine whose node runs.
	MachinePhaseRunning = "Running"

	// LonghornRobustnessDegraded is a volume with fewer healthy replicas than
	// it asks for.
	LonghornRobustnessDegraded = "degraded"
	// Longhorn volume states: creating, attaching and attached volumes are
	// in use; detached ones are not.
	LonghornVolumeCreating  = "creating"
	LonghornVolumeAttaching = "attaching"
	LonghornVolumeAttached  = "attached"

	// VMIPhaseSucceeded and VMIPhaseFailed are the final phases of a
	// VirtualMachineInstance: it no longer runs anywhere.
	VMIPhaseSucceeded = "Succeeded"
	VMIPhaseFailed    = "Failed"
)

// Harvester Addon status.status values. An enabled addon has settled when it
// reports AddonDeploySuccessful; a disabled one when it reports nothing
// (never enabled, or disabled successfully) or AddonDisabled (older
// releases). Every other value means an operation is under way or failed.
const (
	AddonStateInit     = ""
	AddonStateDeployed = "AddonDeploySuccessful"
	AddonStateDisabled = "AddonDisabled"
)

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
	// LonghornRobustnessFaulted is a volume with no healthy replica.
	LonghornRobustnessFaulted = "faulted"
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

// Longhorn volume and engine values the node jobs judge.
const (
	LonghornRobustnessHealthy = "healthy"
	// LonghornEngineRunning is the state of an engine that serves its volume.
	LonghornEngineRunning = "running"
	// LonghornReplicaRW is the mode of a replica in sync with its engine.
	LonghornReplicaRW = "RW"
	// LonghornReplicaWO is the mode of a replica its engine rebuilds: it
	// takes writes but serves no reads until it is in sync.
	LonghornReplicaWO = "WO"
	// Longhorn's defaults of the settings the Harvester chart overrides, and
	// the values it wants instead.
	LonghornNodeDrainPolicyDefault    = "block-if-contains-last-replica"
	LonghornNodeDrainPolicyHarvester  = "allow-if-replica-is-stopped"
	LonghornDetachWhenCordonedDefault = "false"
)

// KubeVirt values.
const (
	// KubeVirtPhaseDeployed is the phase of a KubeVirt installation whose
	// components all run the observed version.
	KubeVirtPhaseDeployed = "Deployed"
	// ConditionAvailable is KubeVirt's condition that its API and
	// controllers serve.
	ConditionAvailable = "Available"
	// ConditionPaused is True on a paused VirtualMachineInstance.
	ConditionPaused = "Paused"
	// VirtualMachine run strategies.
	RunStrategyAlways         = "Always"
	RunStrategyRerunOnFailure = "RerunOnFailure"
	RunStrategyManual         = "Manual"
	RunStrategyHalted         = "Halted"
	RunStrategyOnce           = "Once"
	// Phases of a VirtualMachineInstanceMigration: created, waiting (for a
	// target, or out KubeVirt's backoff after a failed attempt), running, and
	// the two ends.
	MigrationPhasePending   = "Pending"
	MigrationPhaseRunning   = "Running"
	MigrationPhaseSucceeded = "Succeeded"
	MigrationPhaseFailed    = "Failed"
)

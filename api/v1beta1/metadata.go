package v1beta1

// Condition types of an UpgradePlan.
const (
	// ConditionAvailable is True while the plan may be executed and False
	// once it reached a terminal phase.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while the plan holds the cluster's upgrade
	// slot and works; its reason is the current phase and its message says
	// what it waits for.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the last reconcile failed, or when a
	// step reported success but the cluster has not shown its effect for a
	// while (reason VerificationPending; the message says what is missing).
	ConditionDegraded = "Degraded"
	// ConditionStalled is True while a node or a step has overrun its
	// estimate by a margin; its message says what the plan waits for.
	ConditionStalled = "Stalled"
	// ConditionNodesExcluded is True when nodes lost during the upgrade
	// were excluded (spec.nodeUpgradeOption.excludeNodes); its message
	// names them and says what to do for them.
	ConditionNodesExcluded = "NodesExcluded"
)

// Condition reasons. The Progressing condition's reason is otherwise the
// current phase.
const (
	ReasonExecutable               = "Executable"
	ReasonExecuted                 = "Executed"
	ReasonConcurrentUpgradeBlocked = "ConcurrentUpgradeBlocked"
	ReasonReconcileSuccess         = "ReconcileSuccess"
	ReasonReconcileError           = "ReconcileError"
	ReasonSucceeded                = "Succeeded"
	ReasonFailed                   = "Failed"
	// ReasonAborted is the Progressing reason of a plan that ended Aborted,
	// and of one that stops for its abort (spec.abort).
	ReasonAborted = "Aborted"
	// ReasonPreviewed is the Progressing reason of a finished dry run.
	ReasonPreviewed = "Previewed"
	// ReasonVerificationPending is the Degraded reason while a step's work
	// reported success but the cluster does not show its effect yet.
	ReasonVerificationPending = "VerificationPending"
	// ReasonAdministrativelyPaused is the node status reason of a node held
	// by spec.nodeUpgradeOption.pauseNodes or spec.paused.
	ReasonAdministrativelyPaused = "AdministrativelyPaused"
	// ReasonPaused is the Progressing reason of a plan held by spec.paused
	// at a safe point.
	ReasonPaused = "Paused"
	// ReasonOutsideMaintenanceWindow is the node status reason of a node
	// that waits for a maintenance window before it begins its upgrade
	// (spec.nodeUpgradeOption.maintenanceWindows).
	ReasonOutsideMaintenanceWindow = "OutsideMaintenanceWindow"
)

// Node status reasons of a node whose upgrade failed without its Job failing.
const (
	// ReasonFallbackBoot: the node came back from its reboot on an OS image
	// other than the release's.
	ReasonFallbackBoot = "FallbackBoot"
	// ReasonRebootTimeout: the node did not come back, Ready on the
	// release's OS, before the reboot deadline.
	ReasonRebootTimeout = "RebootTimeout"
	// ReasonRancherPlanNotApplied: Rancher did not upgrade RKE2 on the node
	// before the deadline.
	ReasonRancherPlanNotApplied = "RancherPlanNotApplied"
	// ReasonKubeletVersionMismatch: the node's kubelet does not run the
	// release's Kubernetes version although Rancher applied its plan.
	ReasonKubeletVersionMismatch = "KubeletVersionMismatch"
	// ReasonDrainBlocked: Rancher's drain of the node cannot evict a pod,
	// e.g. one a PodDisruptionBudget protects.
	ReasonDrainBlocked = "DrainBlocked"
	// ReasonWrongNode: a node's Job ran on another node.
	ReasonWrongNode = "WrongNode"
	// ReasonMigrationFailing: the live migration of a VM off the draining
	// node failed or makes no progress; KubeVirt tries again.
	ReasonMigrationFailing = "MigrationFailing"
	// ReasonMigrationHeld: a VM's live migration has failed or stalled past
	// the migration deadline; the node waits for the operator's choice (the
	// VM annotations retry-migration or shutdown-for-upgrade).
	ReasonMigrationHeld = "MigrationHeld"
	// ReasonExcludedByOperator: the node, lost while it waited for its
	// reboot, was excluded from the upgrade (spec.nodeUpgradeOption.
	// excludeNodes); it is the NodesExcluded condition's reason too.
	ReasonExcludedByOperator = "ExcludedByOperator"
)

// Event reasons.
const (
	EventPhaseTransition  = "PhaseTransition"
	EventPhaseCompleted   = "PhaseCompleted"
	EventReconcileError   = "ReconcileError"
	EventUpgradeSucceeded = "UpgradeSucceeded"
	EventUpgradeFailed    = "UpgradeFailed"
	// EventUpgradeAborted: the plan stopped for spec.abort and ended
	// Aborted.
	EventUpgradeAborted = "UpgradeAborted"
	// EventPreviewed says what a dry run (spec.dryRun) found.
	EventPreviewed                = "Previewed"
	EventConcurrentUpgradeBlocked = "ConcurrentUpgradeBlocked"
	EventImagePreloadSkipped      = "ImagePreloadSkipped"
	EventImageCleanupSkipped      = "ImageCleanupSkipped"
	// EventImageCleanupFailed: removing the previous release's images
	// from an upgraded node failed while other nodes still upgrade; the
	// phase ImageCleanup fails on it, and a retry runs it again.
	EventImageCleanupFailed = "ImageCleanupFailed"
	// EventRiskAccepted: Initialize found a risk the plan accepts by name
	// (spec.acceptRisks) and went on; status.acceptedRisks records it.
	EventRiskAccepted       = "RiskAccepted"
	EventNodeRebootVerified = "NodeRebootVerified"
	// EventNodeExcluded: a node lost while it waited for its reboot was
	// excluded from the upgrade (spec.nodeUpgradeOption.excludeNodes).
	EventNodeExcluded              = "NodeExcluded"
	EventVerificationPending       = "VerificationPending"
	EventVerified                  = "Verified"
	EventPaused                    = "Paused"
	EventResumed                   = "Resumed"
	EventRestoreVMConfigMapCreated = "RestoreVMConfigMapCreated"
	EventRestoreVMConfigMapFailed  = "RestoreVMConfigMapFailed"
	EventVMShutdownCompleted       = "VMShutdownCompleted"
	EventVMShutdownFailed          = "VMShutdownFailed"
	EventRestoreVMCompleted        = "RestoreVMCompleted"
	EventRestoreVMFailed           = "RestoreVMFailed"
	EventDrainBlocked              = "DrainBlocked"
	EventUpgradeRetried            = "UpgradeRetried"
	// EventLogIncomplete: a Warning on the plan, once per node, when the
	// kubelet of the node does not answer the log capture's requests.
	EventLogIncomplete = "LogIncomplete"
	// EventInsight: a Warning on the plan when an insight appears or its
	// level rises to Warning or Error.
	EventInsight = "Insight"
	// EventVMMigrationFailing: a Warning, once per VM and drain, when a
	// VM's live migration off a draining node fails or makes no progress.
	EventVMMigrationFailing = "VMMigrationFailing"
	// EventVMMigrationHeld: a Warning, once per node, when a VM's failing
	// migration outlived the migration deadline and the node waits for the
	// operator's choice.
	EventVMMigrationHeld = "VMMigrationHeld"
	// EventVMMigrationRetried: the operator's retry-migration annotation
	// made KubeVirt try a VM's migration again.
	EventVMMigrationRetried = "VMMigrationRetried"
	// EventVMShutdownConsented: the upgrade shut a VM down with the
	// operator's consent (annotation shutdown-for-upgrade); it is started
	// again after its node's upgrade.
	EventVMShutdownConsented = "VMShutdownConsented"
	// EventVMStoppedByOwner: a VM that ran when the plan started was
	// stopped (or deleted) by someone other than the upgrade.
	EventVMStoppedByOwner = "VMStoppedByOwner"
	// EventVMUnexpectedlyOff: a Warning when a VM's instance ended while its
	// run strategy still asks it to run, not stopped by the upgrade nor by
	// its owner (e.g. its virt-launcher pod was deleted by a forced drain).
	EventVMUnexpectedlyOff = "VMUnexpectedlyOff"
)

// Event reasons of the maintenance windows
// (spec.nodeUpgradeOption.maintenanceWindows).
const (
	// EventMaintenanceWindowClosed: the nodes that have not begun wait for
	// the next maintenance window (status.nextMaintenanceWindow).
	EventMaintenanceWindowClosed = "MaintenanceWindowClosed"
	// EventMaintenanceWindowOpened: the nodes that waited for a
	// maintenance window may begin again.
	EventMaintenanceWindowOpened = "MaintenanceWindowOpened"
)

// Insight types (status.insights[].type) and the Stalled condition's
// reasons. docs/verification.md has a section for each.
const (
	// InsightDrainBlockedByPDB: a pod on the draining node whose eviction a
	// PodDisruptionBudget refuses.
	InsightDrainBlockedByPDB = "DrainBlockedByPDB"
	// InsightDrainRefusedPod: a pod on the draining node that Rancher's
	// drain options refuse to delete (no controller, or local storage).
	InsightDrainRefusedPod = "DrainRefusedPod"
	// InsightDrainTaintRemoved: the draining node lost its kubevirt.io/drain
	// taint, so VMs may be scheduled back onto it.
	InsightDrainTaintRemoved = "DrainTaintRemoved"
	// InsightNodeUnavailable: a managed node other than the one being
	// upgraded is cordoned or NotReady; the next drain waits for it.
	InsightNodeUnavailable = "NodeUnavailable"
	// InsightCircuitBreakerOpen: draining another node would leave more
	// managed nodes unavailable than spec.nodeUpgradeOption.maxUnavailableNodes
	// allows; no node is drained until enough of them are back.
	InsightCircuitBreakerOpen = "CircuitBreakerOpen"
	// InsightConcurrentV1Upgrade: Harvester's built-in upgrade
	// (upgrades.harvesterhci.io) runs at the same time.
	InsightConcurrentV1Upgrade = "ConcurrentV1Upgrade"
	// InsightProvisioningPaused: the cluster's provisioning (Rancher's
	// cluster or Cluster API's) is paused, so Rancher upgrades no node.
	InsightProvisioningPaused = "ProvisioningPaused"
	// InsightStalled: a node or a step overran its estimate by a margin.
	InsightStalled = "Stalled"
	// ReasonNotStalled is the Stalled condition's reason while it is False.
	ReasonNotStalled = "WithinEstimate"
)

// Prefix is the prefix of every label and annotation this API owns.
const Prefix = "management.harvesterhci.io/"

// Labels on every object a plan creates.
const (
	// LabelUpgradePlan names the plan that created the object; cleanup
	// deletes by this label.
	LabelUpgradePlan = Prefix + "upgrade-plan"
	// LabelUpgradeComponent says which part of the upgrade the object serves:
	// one of the Component… values.
	LabelUpgradeComponent = Prefix + "upgrade-component"
	// LabelJobType is the kind of node Job: one of the JobType… values.
	LabelJobType = Prefix + "job-type"
	// LabelNode is the node a node Job works on.
	LabelNode = Prefix + "node"
)

// Values of LabelUpgradeComponent.
const (
	ComponentISO            = "iso"
	ComponentRepo           = "repo"
	ComponentImagePreload   = "image-preload"
	ComponentClusterUpgrade = "cluster-upgrade"
	ComponentNodeUpgrade    = "node-upgrade"
	ComponentImageCleanup   = "image-cleanup"
)

// Values of LabelJobType.
const (
	JobTypePreDrain          = "pre-drain"
	JobTypePostDrain         = "post-drain"
	JobTypeSingleNodeUpgrade = "single-node-upgrade"
	JobTypeRestoreVM         = "restore-vm"
)

// Annotations written by the controller on foreign objects.
const (
	// AnnotationPreHook on a Rancher machine-plan Secret acknowledges
	// Rancher's pre-drain request by carrying the same value.
	AnnotationPreHook = Prefix + "pre-hook"
	// AnnotationPostHook acknowledges Rancher's post-drain request.
	AnnotationPostHook = Prefix + "post-hook"
	// AnnotationPendingOSImage on a Node is the osImage the node must report
	// after its reboot for the upgrade of that node to count as done.
	AnnotationPendingOSImage = Prefix + "pendingOSImage"
	// AnnotationRestoreRunStrategy on a VirtualMachine the upgrade stopped
	// holds the run strategy it had, which restore-vm puts back.
	AnnotationRestoreRunStrategy = Prefix + "restore-run-strategy"
)

// User annotations on a VirtualMachine, the operator's choice for a VM whose
// live migration off a draining node fails or makes no progress.
const (
	// AnnotationRetryMigration: set it to a new value (e.g. the time) to
	// have KubeVirt try the VM's migration again at once: the upgrade
	// deletes the VM's failed and unfinished evacuation migrations, which
	// also clears KubeVirt's backoff, and gives the VM the whole migration
	// deadline again. The plan's VM ledger records each value it acted on.
	AnnotationRetryMigration = Prefix + "retry-migration"
	// AnnotationShutdownForUpgrade: set it to the UpgradePlan's name to let
	// that upgrade shut the VM down now, while its node drains, and start it
	// again after the node's upgrade (whatever spec.restoreVM says). The
	// upgrade never shuts down a VM that could migrate without it; the
	// plan's VM ledger records the consent and who gave it.
	AnnotationShutdownForUpgrade = Prefix + "shutdown-for-upgrade"
)

// FinalizerCleanup keeps a plan until everything it created and changed has
// been cleaned up and restored.
const FinalizerCleanup = Prefix + "upgradeplan-cleanup"

// User annotations on an UpgradePlan.
const (
	// AnnotationSkipWebhook "true" bypasses all create-time admission checks.
	AnnotationSkipWebhook = Prefix + "skip-webhook"
	// AnnotationSkipSingleReplicaDetachedVol "true" skips the detached
	// single-replica Longhorn volume check (attached ones still block).
	AnnotationSkipSingleReplicaDetachedVol = Prefix + "skip-single-replica-detached-vol"
	// AnnotationAllowDeletion "true" allows deleting a progressing plan,
	// except while the cluster or the nodes are being upgraded.
	AnnotationAllowDeletion = Prefix + "allow-deletion"
	// AnnotationSkipGCThresholdCheck "true" skips the disk-space pre-flight
	// check against the kubelet image garbage collection threshold.
	AnnotationSkipGCThresholdCheck = Prefix + "skip-garbage-collection-threshold-check"
	// AnnotationMinCertsExpirationInDay is an integer > 0: the API server
	// certificate must stay valid at least that many days (default 7).
	AnnotationMinCertsExpirationInDay = Prefix + "min-certs-expiration-in-day"
	// AnnotationUpgradeToolkitImage overrides the repository and name of the
	// upgrade-toolkit image (default rancher/harvester-upgrade-toolkit); the
	// tag still comes from spec.upgrade or the release.
	AnnotationUpgradeToolkitImage = Prefix + "upgrade-toolkit-image"
	// AnnotationRetry retries a failed plan whose failure a retry can cure
	// (status.failures[-1].retryDeadline is set): set it to any value other
	// than status.observedRetry, e.g. the time. The failed step runs again
	// and the plan carries on from there.
	AnnotationRetry = Prefix + "retry"
)

// DefaultMinCertsExpirationInDay is the certificate validity the API server
// must have left when no annotation says otherwise.
const DefaultMinCertsExpirationInDay = 7

// DefaultUpgradeToolkitRepository is the image repository of the toolkit.
const DefaultUpgradeToolkitRepository = "rancher/harvester-upgrade-toolkit"

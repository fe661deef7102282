package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// UpgradePlanSpec is what the user asks for: which release to upgrade the
// cluster to, and how.
//
// +kubebuilder:validation:XValidation:rule="has(self.version) || has(self.image)",message="at least one of spec.version or spec.image must be set"
// +kubebuilder:validation:XValidation:rule="has(self.version) == has(oldSelf.version) && (!has(self.version) || self.version == oldSelf.version)",message="spec.version is immutable after creation"
// +kubebuilder:validation:XValidation:rule="has(self.image) == has(oldSelf.image) && (!has(self.image) || self.image == oldSelf.image)",message="spec.image is immutable after creation"
// +kubebuilder:validation:XValidation:rule="has(self.upgrade) == has(oldSelf.upgrade) && (!has(self.upgrade) || self.upgrade == oldSelf.upgrade)",message="spec.upgrade is immutable after creation"
// +kubebuilder:validation:XValidation:rule="has(self.dryRun) == has(oldSelf.dryRun) && (!has(self.dryRun) || self.dryRun == oldSelf.dryRun)",message="spec.dryRun is immutable after creation: create a new plan without it to upgrade"
// +kubebuilder:validation:XValidation:rule="has(self.logEnabled) == has(oldSelf.logEnabled) && (!has(self.logEnabled) || self.logEnabled == oldSelf.logEnabled)",message="spec.logEnabled is immutable after creation: a capture switched on or off midway would keep only part of the logs"
type UpgradePlanSpec struct {
	// Version is the name of a Harvester Version object
	// (versions.harvesterhci.io, namespace harvester-system) that describes
	// the target release: the ISO URL and its SHA-512 checksum. Required
	// unless spec.image is set. Immutable after creation.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="spec.version must be the name of a Version object in harvester-system: lowercase letters, digits, '-' and '.'"
	Version *string `json:"version,omitempty"`

	// Image is the name of an existing VirtualMachineImage in
	// harvester-system that holds the release ISO (uploaded or downloaded
	// beforehand, annotated harvesterhci.io/os-upgrade-image: "True"). When
	// set, the ISO is not downloaded again and no Version lookup happens.
	// A plain name without a namespace. Immutable after creation.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="spec.image must be the plain name of a VirtualMachineImage in harvester-system, without a namespace: lowercase letters, digits, '-' and '.'"
	Image *string `json:"image,omitempty"`

	// Upgrade is the tag of the upgrade-toolkit container image that runs
	// the repo, the cluster upgrade and the node jobs. When empty the tag is
	// the target Harvester version read from the release metadata. The image
	// repository can be overridden with the annotation
	// management.harvesterhci.io/upgrade-toolkit-image. Immutable after
	// creation.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_][A-Za-z0-9_.-]*$')",message="spec.upgrade must be a container image tag: letters, digits, '_', '.' and '-', not starting with '.' or '-'"
	Upgrade *string `json:"upgrade,omitempty"`

	// Force skips the upgrade eligibility check (no downgrade, minimum
	// upgradable version, prerelease and development version rules), in the
	// controller and in the node jobs alike, and nothing else: it accepts
	// no risk of the cluster's state (see spec.acceptRisks). Use with care:
	// an ineligible upgrade may leave the cluster in an unsupported state.
	// +optional
	// +kubebuilder:default=false
	Force *bool `json:"force,omitempty"`

	// AcceptRisks names the risks of the cluster's state the operator
	// accepts, one by one: an Error-level risk that is not named here
	// refuses the plan at admission, and fails it at Initialize when it
	// appeared since. Names are those of the risk catalogue
	// (docs/risks.md; `upgrade-toolkit preflight` lists the risks found),
	// e.g. NodeCordoned, PodDisruptionBudgetAtLimit, CriticalAlertFiring.
	// The risks accepted and found are recorded in status.acceptedRisks.
	// May be changed at any time: Initialize judges the risks again with
	// the list it reads then.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[A-Z][A-Za-z0-9]*$`
	AcceptRisks []string `json:"acceptRisks,omitempty"`

	// ImagePreloadOption controls how container images of the new release are
	// preloaded onto the nodes before anything is upgraded.
	// +optional
	ImagePreloadOption *ImagePreloadOption `json:"imagePreloadOption,omitempty"`

	// NodeUpgradeOption controls how nodes are upgraded.
	// +optional
	NodeUpgradeOption *NodeUpgradeOption `json:"nodeUpgradeOption,omitempty"`

	// ImageCleanupOption controls how the previous release's container
	// images are removed from the nodes.
	// +optional
	ImageCleanupOption *ImageCleanupOption `json:"imageCleanupOption,omitempty"`

	// Paused holds the upgrade at its next safe point, and setting it back to
	// false resumes it where it stopped. A phase that has started finishes
	// (its Jobs are never interrupted) and the next one does not start;
	// during NodeUpgrade a node whose upgrade has started finishes, so its
	// VMs run again, and no other node starts (waiting nodes stop in
	// UpgradePaused). The Progressing condition says when the plan is held
	// (reason Paused) and where. No deadline runs out while the plan is
	// held: nothing it waits for is under way.
	// +optional
	Paused *bool `json:"paused,omitempty"`

	// Abort stops the upgrade for good and cleans up after it; it cannot be
	// taken back. Before ClusterUpgrade, nothing of the release has reached
	// the cluster: the plan ends Aborted at once, and everything it made is
	// deleted and every setting it changed restored. From ClusterUpgrade on
	// there is no downgrade: the plan stops at its next safe point (a
	// cluster upgrade under way finishes; during NodeUpgrade the node
	// between its drain and its return finishes and no other node starts),
	// then ends Aborted, naming the nodes upgraded and those not, and
	// cleans up as above. To finish such an upgrade later, create a new plan
	// for the same version: it upgrades the nodes left. The webhook refuses
	// an abort of a plan that has ended (delete it instead) or of a dry run.
	// +optional
	Abort *bool `json:"abort,omitempty"`

	// RestoreVM restarts, after each node is upgraded, the virtual machines
	// that could not be live-migrated and were therefore shut down before
	// the node was drained. When false they stay off. Either way they are
	// recorded in the ConfigMap <plan>-restore-vm in harvester-system.
	// +optional
	// +kubebuilder:default=false
	RestoreVM *bool `json:"restoreVM,omitempty"`

	// DryRun previews the upgrade and changes nothing: the controller runs
	// the admission checks and the version eligibility rules against the
	// target, writes what the upgrade would do into status.preview (the
	// nodes in upgrade order, the VMs it would shut down, the Longhorn
	// volumes at risk, an estimate of the duration), records the event
	// Previewed and ends in the phase Previewed. It downloads nothing,
	// creates no repo and no Job, changes no setting, and does not hold the
	// cluster's one upgrade slot; the webhook does not refuse it for the
	// cluster's state, which it reports instead. Immutable after creation.
	// `upgrade-toolkit preflight` prints the full report.
	// +optional
	// +kubebuilder:default=false
	DryRun *bool `json:"dryRun,omitempty"`

	// LogEnabled keeps the logs of every pod the upgrade runs (its own Jobs
	// and the system-upgrade-controller Jobs of its Plans) in the cluster,
	// in the UpgradeLog named after the plan, until the plan is deleted:
	// `upgrade-toolkit logs PLAN` prints them and writes a support bundle.
	// Unset or true keeps them when the manager captures logs (its
	// --upgrade-log flag, the chart's upgradeLog.enabled: on by default);
	// false captures nothing for this plan: no UpgradeLog, no pod held.
	// Immutable after creation.
	// +optional
	LogEnabled *bool `json:"logEnabled,omitempty"`
}

// PreviewStatus is the outcome of a dry run (spec.dryRun), in short.
type PreviewStatus struct {
	// WouldRun: no check failed, so a plan with this spec would start.
	WouldRun bool `json:"wouldRun"`
	// Failures are the messages of the checks that failed.
	// +optional
	Failures []string `json:"failures,omitempty"`
	// Warnings are the messages of the checks that warned.
	// +optional
	Warnings []string `json:"warnings,omitempty"`
	// Nodes are the managed nodes in the order they would be upgraded,
	// each as name (role), with "paused" when it is in pauseNodes.
	// +optional
	Nodes []string `json:"nodes,omitempty"`
	// ShutDownVMs are the VMs that cannot be live-migrated and would be
	// shut down, as namespace/name on node.
	// +optional
	ShutDownVMs []string `json:"shutDownVMs,omitempty"`
	// VolumesAtRisk are the degraded, faulted or single-replica Longhorn
	// volumes, with why.
	// +optional
	VolumesAtRisk []string `json:"volumesAtRisk,omitempty"`
	// EstimatedMinutes is a rough estimate of the upgrade's duration.
	EstimatedMinutes int `json:"estimatedMinutes"`
	// NotChecked lists what only the upgrade itself checks.
	// +optional
	NotChecked []string `json:"notChecked,omitempty"`
}

// ImagePreloadOption controls the image preload phase.
type ImagePreloadOption struct {
	// Concurrency is how many nodes preload images at the same time. Unset or
	// 0 means all managed nodes at once; a positive value is capped at the
	// number of managed nodes; a negative value skips image preloading
	// entirely (images are then pulled during the node upgrade).
	// +optional
	Concurrency *int `json:"concurrency,omitempty"`
}

// ImageCleanupOption controls the image cleanup. A node's previous images
// are removed as soon as its upgrade is verified (it rebooted into the new
// OS), while the other nodes still upgrade; the ImageCleanup phase only
// waits for the last ones. A node in the drain slot is never cleaned.
type ImageCleanupOption struct {
	// Concurrency is how many nodes remove images at the same time. Unset
	// means DefaultImageCleanupConcurrency (2): removing images is disk I/O
	// on nodes that carry VMs again, so it is bounded; two keep up with the
	// node upgrades even when a cleanup takes twice as long as a node's
	// drain, OS upgrade and reboot, and one slow or hung cleanup does not
	// hold up the others'.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Concurrency *int `json:"concurrency,omitempty"`
}

// DefaultImageCleanupConcurrency is spec.imageCleanupOption.concurrency
// when unset (see ImageCleanupOption).
const DefaultImageCleanupConcurrency = 2

// NodeUpgradeOption controls the node upgrade phase.
type NodeUpgradeOption struct {
	// PauseNodes lists the names of nodes that must wait before they are
	// drained and upgraded. A listed node stops in the UpgradePaused state
	// once its images are preloaded; removing its name resumes it. Pausing
	// has no effect on a node whose upgrade has already started. To pause
	// every node, list them all.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	PauseNodes []string `json:"pauseNodes,omitempty"`

	// HealthGate is what must be healthy before Rancher may drain the next
	// node. Strict (the default) waits until the node is Ready and no
	// other node is cordoned (the other nodes that are down are the circuit
	// breaker's, maxUnavailableNodes), the API server and its etcd report
	// ready, no Longhorn volume is degraded or faulted and the VMs of the
	// upgraded nodes are restored. Relaxed waits
	// only for the nodes and the control plane. Risk of Relaxed: a volume
	// still rebuilding a replica lost in the last drain may lose another
	// one in the next, and with its last healthy replica its data; use it
	// only when the volumes named by the gate are known to be expendable or
	// backed up. It may be changed while the plan runs, to release a node
	// the gate holds.
	// +optional
	// +kubebuilder:validation:Enum=Strict;Relaxed
	HealthGate *HealthGateMode `json:"healthGate,omitempty"`

	// MaxUnavailableNodes is the circuit breaker: the most managed nodes
	// that may be NotReady or unreachable at once, the node being upgraded
	// counted. No further node is drained while draining it would make
	// more of them unavailable than this; the plan names the nodes (the
	// insight CircuitBreakerOpen, the held node's message and the
	// Progressing condition) and drains the next node by itself once
	// enough of them are back. Unlike the rest of the health gate, the
	// breaker never fails the plan: a node that stays down holds it until
	// it returns or the plan is deleted. Default 1: no node is drained
	// while another one is down. Risk of more: a volume with a replica on
	// a node that is down loses another one with each drain.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxUnavailableNodes *int32 `json:"maxUnavailableNodes,omitempty"`

	// ExcludeNodes lists nodes lost during the upgrade, so that it finishes
	// on the others. A listed node is excluded only while it waits for its
	// reboot into the new OS (state WaitingReboot, or failed there with
	// reason RebootTimeout and retried) and is NotReady or unreachable: its
	// state becomes Excluded for good, Rancher's post-drain hook of it is
	// answered so that Rancher goes on with the next node, the circuit
	// breaker and the health gate no longer count it, the image cleanup and
	// the final checks skip it, and the plan ends Succeeded with the
	// condition NodesExcluded naming it. A node listed in any other state,
	// or Ready, is upgraded as usual. Afterwards, remove the node from the
	// cluster, or repair it and upgrade it with a new plan (README: "A node
	// lost during the upgrade"). Not on a single-node cluster.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	ExcludeNodes []string `json:"excludeNodes,omitempty"`

	// MaintenanceWindows are the times a node may begin its upgrade (its
	// drain, or on a single node its upgrade Job): when one of them is
	// open. A node whose upgrade has begun finishes when its window closes;
	// the rest of the upgrade (downloads, image preload, the cluster
	// upgrade, the image cleanup of upgraded nodes) never waits for a
	// window. While nodes wait, status.nextMaintenanceWindow says when the
	// next window opens; no deadline counts the wait. The node Rancher has
	// reached waits cordoned, its drain held at the pre-drain hook, as with
	// pauseNodes. Empty: at any time. It may be changed while the plan
	// runs; spec.paused and pauseNodes hold nodes as well.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`
}

// HealthGateMode is how much the health gate between two nodes checks.
type HealthGateMode string

// The health gate modes.
const (
	// HealthGateStrict waits for the nodes, the control plane, the Longhorn
	// volumes and the restored VMs.
	HealthGateStrict HealthGateMode = "Strict"
	// HealthGateRelaxed waits for the nodes and the control plane only.
	HealthGateRelaxed HealthGateMode = "Relaxed"
)

// UpgradePlanStatus is what the controller knows about the upgrade. It is the
// controller's only memory: a restarted controller carries on from here.
type UpgradePlanStatus struct {
	// Conditions summarise the plan: Available (the plan may run; False once
	// it reached a terminal phase), Progressing (the plan holds the cluster's
	// one upgrade slot and is working; its reason is the current phase and
	// its message says what it waits for) and Degraded (the last reconcile
	// failed; the message is the error).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// CurrentPhase is the phase the upgrade is in. Each phase has an active
	// value (…ing) and a completed value (…ed); Succeeded and Failed are
	// terminal.
	// +optional
	CurrentPhase UpgradePlanPhase `json:"currentPhase,omitempty"`

	// PhaseTransitionTimestamps records when each phase was entered, one
	// entry per phase change, in order.
	// +optional
	// +listType=atomic
	PhaseTransitionTimestamps []PhaseTransitionTimestamp `json:"phaseTransitionTimestamps,omitempty"`

	// NodeUpgradeStatuses is the per-node state during ImagePreload,
	// NodeUpgrade and ImageCleanup, keyed by node name. States only move
	// forward.
	// +optional
	// +mapType=atomic
	NodeUpgradeStatuses map[string]NodeUpgradeStatus `json:"nodeUpgradeStatuses,omitempty"`

	// NextMaintenanceWindow is when the next maintenance window opens
	// (spec.nodeUpgradeOption.maintenanceWindows), set while nodes wait
	// for it during NodeUpgrade and cleared once they may begin again.
	// +optional
	NextMaintenanceWindow *metav1.Time `json:"nextMaintenanceWindow,omitempty"`

	// MaintenanceWindowWaits are the times the node upgrade waited for a
	// maintenance window with no node under way, newest last: the time a
	// node's upgrade took (estimates, the Stalled check, the node upgrade
	// metric) leaves them out. An open wait has no end.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	MaintenanceWindowWaits []Pause `json:"maintenanceWindowWaits,omitempty"`

	// PreviousVersion is the Harvester version the cluster ran when the plan
	// started (the server-version setting).
	// +optional
	PreviousVersion *string `json:"previousVersion,omitempty"`

	// ReleaseMetadata is read from harvester-release.yaml in the upgrade repo.
	// +optional
	ReleaseMetadata *ReleaseMetadata `json:"releaseMetadata,omitempty"`

	// ISOImageID is the name of the VirtualMachineImage in harvester-system
	// that holds the release ISO: <plan>-iso, or spec.image.
	// +optional
	ISOImageID *string `json:"isoImageID,omitempty"`

	// Version is a snapshot of the Version object taken when the plan
	// started, so that later edits of the Version do not change a running
	// upgrade.
	// +optional
	Version *VersionSnapshot `json:"version,omitempty"`

	// SingleNode is the name of the only managed node when the cluster has
	// exactly one; single-node clusters are upgraded by one job instead of
	// Rancher's drain hooks.
	// +optional
	SingleNode *string `json:"singleNode,omitempty"`

	// Preview is the outcome of a dry run (spec.dryRun); empty for an
	// upgrade.
	// +optional
	Preview *PreviewStatus `json:"preview,omitempty"`

	// ProvisionGeneration is the provisionGeneration the controller writes
	// into the Rancher provisioning Cluster fleet-local/local to roll the
	// nodes. It is recorded before the Cluster is patched, so that the
	// Cluster is patched exactly once even across controller restarts.
	// +optional
	ProvisionGeneration *int64 `json:"provisionGeneration,omitempty"`

	// SavedSettings holds the original values of cluster settings the
	// upgrade changes temporarily, recorded before they are changed, so that
	// they are restored exactly once when the plan ends.
	// +optional
	SavedSettings *SavedSettings `json:"savedSettings,omitempty"`

	// Checks are what the plan observed in the cluster before it called a
	// step done: a Job exiting 0 is not enough. The ClusterUpgrade checks run
	// once the cluster-upgrade Job succeeded; the Final checks run before the
	// plan may become Succeeded, so a Succeeded plan lists every Final check
	// as Passed. Each check names the object, the value expected and the
	// value seen.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Checks []Check `json:"checks,omitempty"`

	// Failures is the history of the plan's failures, oldest first. A
	// failure a retry can cure keeps the plan, its Jobs and the settings it
	// changed until its retryDeadline: set the retry annotation to go on
	// from the failed step, or delete the plan to give up. Once retried,
	// a failure stays here with when and how.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Failures []Failure `json:"failures,omitempty"`

	// ObservedRetry is the value of the annotation
	// management.harvesterhci.io/retry the controller last took into
	// account: a retry is asked for by setting the annotation to another
	// value.
	// +optional
	ObservedRetry string `json:"observedRetry,omitempty"`

	// Insights are the problems the toolkit sees while the plan runs, one
	// entry per problem, most severe first: a drain a PodDisruptionBudget
	// or a VM blocks, a node or phase that overran its estimate, and what
	// interferes with the upgrade (another node cordoned or NotReady, the
	// drain taint removed, Harvester's own upgrade running, the cluster's
	// provisioning paused). Each says since when, what it affects, the
	// objects involved and what to do (docs/verification.md, "Insights").
	// An entry goes when its problem does.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Insights []Insight `json:"insights,omitempty"`

	// AcceptedRisks are the risks found at Initialize that the plan
	// accepted (spec.acceptRisks), with what was found: the record of what
	// the operator chose to go on with.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	AcceptedRisks []AcceptedRisk `json:"acceptedRisks,omitempty"`

	// Pauses are the times the plan was paused (spec.paused), newest last:
	// no deadline counts them. An open pause has no end.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Pauses []Pause `json:"pauses,omitempty"`
}

// AcceptedRisk is a risk found and accepted by name.
type AcceptedRisk struct {
	// Name is the risk's name in the catalogue.
	Name string `json:"name"`
	// Level is Error or Warning.
	// +kubebuilder:validation:Enum=Error;Warning
	Level string `json:"level"`
	// Message is what was found: the objects and how they stood.
	Message string `json:"message"`
	// AcceptedAt is when Initialize found it and went on.
	AcceptedAt metav1.Time `json:"acceptedAt"`
}

// The bounds of status.insights that the CRD enforces (its MaxItems markers
// say the same numbers): a status beyond them is refused whole.
const (
	MaxInsights       = 32
	MaxInsightObjects = 16
	MaxInsightMessage = 2048
)

// Pause is one time the plan was held: paused (status.pauses) or waiting
// for a maintenance window (status.maintenanceWindowWaits).
type Pause struct {
	// Start is when the controller first saw it held: spec.paused true,
	// or every node left waiting for a maintenance window.
	Start metav1.Time `json:"start"`
	// End is when it first saw it going again; unset while held.
	// +optional
	End *metav1.Time `json:"end,omitempty"`
}

// InsightLevel is how severe an insight is; it rises while the problem lasts.
//
// +kubebuilder:validation:Enum=Info;Warning;Error
type InsightLevel string

// The insight levels.
const (
	InsightInfo    InsightLevel = "Info"
	InsightWarning InsightLevel = "Warning"
	InsightError   InsightLevel = "Error"
)

// InsightImpact is what a problem puts at risk.
//
// +kubebuilder:validation:Enum=UpgradeStalled;APIAvailability;VMAvailability;DataRedundancy
type InsightImpact string

// The insight impacts.
const (
	// ImpactUpgradeStalled: the upgrade does not move on until it is solved.
	ImpactUpgradeStalled InsightImpact = "UpgradeStalled"
	// ImpactAPIAvailability: the cluster's API or its control plane.
	ImpactAPIAvailability InsightImpact = "APIAvailability"
	// ImpactVMAvailability: VMs may stop or land on a node being upgraded.
	ImpactVMAvailability InsightImpact = "VMAvailability"
	// ImpactDataRedundancy: volumes may lose replicas.
	ImpactDataRedundancy InsightImpact = "DataRedundancy"
)

// Insight is one problem the toolkit sees while the plan runs.
type Insight struct {
	// Type names the problem (one of the Insight… reasons); with the
	// objects it identifies the entry.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Type string `json:"type"`
	// Level is Info, Warning or Error, rising the longer it lasts.
	Level InsightLevel `json:"level"`
	// Impact is what the problem puts at risk.
	Impact InsightImpact `json:"impact"`
	// Since is when the toolkit first saw the problem.
	Since metav1.Time `json:"since"`
	// Objects are the objects involved, e.g. Node/node-1,
	// PodDisruptionBudget/default/guard, Pod/default/app-0.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Objects []string `json:"objects,omitempty"`
	// Message says what is wrong, where, and what to do.
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message"`
	// Doc is where the documentation says more, e.g.
	// docs/verification.md#drainblockedbypdb.
	// +optional
	Doc string `json:"doc,omitempty"`
}

// Failure is one failure of the plan.
type Failure struct {
	// Phase is the phase the plan was in when it failed; a retry goes back
	// to it.
	Phase UpgradePlanPhase `json:"phase"`
	// Message says what failed and what to do.
	Message string `json:"message"`
	// FailedAt is when the plan failed.
	FailedAt metav1.Time `json:"failedAt"`
	// RetryDeadline, set when a retry can cure the failure (a Job, a node
	// step, a download or a wait failed), is until when the plan may be
	// retried; after it, the plan is cleaned up like any finished plan.
	// Failures a retry cannot cure (pre-flight checks, eligibility, a bad
	// ISO) have none: their message says what to change.
	// +optional
	RetryDeadline *metav1.Time `json:"retryDeadline,omitempty"`
	// RetriedAt is when the failure was retried.
	// +optional
	RetriedAt *metav1.Time `json:"retriedAt,omitempty"`
	// Retry is the value of the retry annotation that retried it.
	// +optional
	Retry string `json:"retry,omitempty"`
	// Nodes lists the nodes the retry moved back to the start of their
	// failed step: the one exception to node states moving only forward.
	// +optional
	// +listType=map
	// +listMapKey=node
	Nodes []NodeRetry `json:"nodes,omitempty"`
}

// NodeRetry is a node a retry moved back to redo its failed step.
type NodeRetry struct {
	Node string `json:"node"`
	// From is the failure state the node was in.
	From NodeUpgradeState `json:"from"`
	// To is the state it went back to.
	To NodeUpgradeState `json:"to"`
}

// CheckResult is the outcome of one verification check.
//
// +kubebuilder:validation:Enum=Passed;Pending;Failed;Warning
type CheckResult string

// The check results.
const (
	// CheckPassed: the cluster shows the expected state.
	CheckPassed CheckResult = "Passed"
	// CheckPending: not yet; the plan waits for it until the check's
	// deadline, then fails.
	CheckPending CheckResult = "Pending"
	// CheckFailed: the expected state will not come by itself; the plan
	// failed on it.
	CheckFailed CheckResult = "Failed"
	// CheckWarning: something the operator should look at that does not hold
	// up the upgrade (e.g. an add-on that is not deployed again).
	CheckWarning CheckResult = "Warning"
)

// Check is one verification of the cluster's real state.
type Check struct {
	// Name is <step>/<check>, e.g. ClusterUpgrade/HarvesterVersion or
	// Final/NodesUpgraded.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// Result is Passed, Pending, Failed or Warning.
	Result CheckResult `json:"result"`
	// Message names what was checked, the value expected and the value seen.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when the result last changed.
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
}

// PhaseTransitionTimestamp records when a phase was entered.
type PhaseTransitionTimestamp struct {
	// Phase is the phase that was entered.
	Phase UpgradePlanPhase `json:"phase"`
	// PhaseTransitionTimestamp is when it was entered.
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp"`
}

// NodeUpgradeStatus is the upgrade state of one node.
type NodeUpgradeStatus struct {
	// State is where the node is in its upgrade; see NodeUpgradeState.
	// +optional
	State NodeUpgradeState `json:"state,omitempty"`
	// Reason is a machine-readable reason for the state, e.g. the failed
	// Job's condition reason or AdministrativelyPaused.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says, for a human, why the node is in this state and what to
	// do about it.
	// +optional
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when the node entered this state.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`

	// UpgradedAt is when the node's upgrade was verified (it entered
	// PostDrained or SingleNodeUpgraded). It stays while the node's image
	// cleanup, which begins at once, moves its state on: how long each
	// node's upgrade took is measured to it.
	// +optional
	UpgradedAt *metav1.Time `json:"upgradedAt,omitempty"`
	// PreviousBootID is the node's boot ID (status.nodeInfo.bootID) when its
	// OS upgrade began: recorded as the node entered PostDraining or
	// SingleNodeUpgrading, before the Job that reboots it started. A node
	// counts as rebooted only once it reports another one.
	// +optional
	PreviousBootID string `json:"previousBootID,omitempty"`
	// PreviousOSImage is the OS image the node reported when its OS upgrade
	// began. A node that comes back from its reboot on an image other than
	// the release's (the bootloader's fallback entry after a failed install)
	// fails at once.
	// +optional
	PreviousOSImage string `json:"previousOSImage,omitempty"`
	// HealthGateSince is when the health gate first held the node before
	// its drain, Rancher having reached it: another node cordoned, a
	// Longhorn volume degraded or faulted, or the previous node's VMs
	// still being restored. The plan fails when the cluster is not healthy
	// within the health-gate deadline from then. It is cleared while the
	// circuit breaker holds the node, which has no deadline.
	// +optional
	HealthGateSince *metav1.Time `json:"healthGateSince,omitempty"`
	// VMs counts what the upgrade did to the node's VMs, from the plan's VM
	// ledger (ConfigMap <plan>-vm-ledger in harvester-system, which has
	// every VM's record); absent for a node that never ran a VM.
	// +optional
	VMs *NodeVMs `json:"vms,omitempty"`
	// ReplicasRebuilding is how many Longhorn replicas on the node are being
	// rebuilt: those their volume's engine reports in mode WO
	// (status.replicaModeMap of engines.longhorn.io; the replica's node is
	// its spec.nodeID). Kept up to date from the node upgrade to the plan's
	// end; absent when none is.
	// +optional
	ReplicasRebuilding int32 `json:"replicasRebuilding,omitempty"`
}

// NodeVMs counts the VMs of one node in the upgrade. A VM is counted on the
// node it leaves: one that moved onto the node and later moved on counts
// there too.
type NodeVMs struct {
	// ToMove is how many VMs had, or have, to leave the node by live
	// migration: Moved + Pending + Failed.
	// +optional
	ToMove int32 `json:"toMove,omitempty"`
	// Moved is how many live migrations off the node succeeded.
	// +optional
	Moved int32 `json:"moved,omitempty"`
	// Pending is how many VMs still run on the node, not yet upgraded, and
	// will have to move.
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// Failed is how many VMs on the node have a live migration that failed
	// or makes no progress, and have not moved since.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// Stopped is how many VMs the upgrade shut down on the node: those
	// that cannot live-migrate, and those the operator consented to.
	// +optional
	Stopped int32 `json:"stopped,omitempty"`
	// MigrationDeadline is when the node is held for the operator's choice
	// if a VM's migration still fails or makes no progress: the migration
	// deadline after the first trouble of its drain or the operator's last
	// retry; the time the plan spent paused (status.pauses) does not count.
	// +optional
	MigrationDeadline *metav1.Time `json:"migrationDeadline,omitempty"`
}

// ReleaseMetadata is the part of the release's harvester-release.yaml that
// the plan records.
type ReleaseMetadata struct {
	// Harvester is the Harvester version of the release, e.g. v1.8.0.
	// +optional
	Harvester string `json:"harvester,omitempty"`
	// HarvesterChart is the version of the Harvester Helm chart.
	// +optional
	HarvesterChart string `json:"harvesterChart,omitempty"`
	// OS is the operating system image name the nodes report after the
	// upgrade (node.status.nodeInfo.osImage), e.g. "Harvester v1.8.0".
	// +optional
	OS string `json:"os,omitempty"`
	// Kubernetes is the RKE2 version, e.g. v1.35.2+rke2r1.
	// +optional
	Kubernetes string `json:"kubernetes,omitempty"`
	// Rancher is the embedded Rancher version.
	// +optional
	Rancher string `json:"rancher,omitempty"`
	// MonitoringChart is the version of the rancher-monitoring chart.
	// +optional
	MonitoringChart string `json:"monitoringChart,omitempty"`
	// MinUpgradableVersion is the oldest Harvester version that may upgrade
	// to this release.
	// +optional
	MinUpgradableVersion string `json:"minUpgradableVersion,omitempty"`
}

// VersionSnapshot is a copy of the Version object's spec taken when the plan
// started.
type VersionSnapshot struct {
	// ISOURL is where the release ISO is downloaded from.
	// +kubebuilder:validation:MinLength=1
	ISOURL string `json:"isoURL"`
	// ISOChecksum is the ISO's SHA-512 digest in hex; empty skips the check.
	// +optional
	ISOChecksum string `json:"isoChecksum,omitempty"`
}

// SavedSettings are the original values of settings the upgrade changes for
// its duration, recorded before the change. A nil field means "not changed by
// this plan (yet)"; a field is cleared once its value has been restored.
type SavedSettings struct {
	// LonghornReplicaReplenishmentWaitInterval is the original value of the
	// Longhorn setting replica-replenishment-wait-interval.
	// +optional
	LonghornReplicaReplenishmentWaitInterval *string `json:"longhornReplicaReplenishmentWaitInterval,omitempty"`
	// DeschedulerEnabled is whether the descheduler Addon was enabled before
	// the plan disabled it.
	// +optional
	DeschedulerEnabled *bool `json:"deschedulerEnabled,omitempty"`
	// KubeVirt is the original workload update strategy of the KubeVirt
	// object, emptied during the upgrade to avoid a cluster-wide migration
	// storm when KubeVirt itself is upgraded.
	// +optional
	KubeVirt *SavedKubeVirt `json:"kubeVirt,omitempty"`
	// Rancher is the original upgrade strategy of the provisioning Cluster
	// fleet-local/local.
	// +optional
	Rancher *SavedRancher `json:"rancher,omitempty"`
}

// SavedKubeVirt records what the plan changed on KubeVirt.
type SavedKubeVirt struct {
	// WorkloadUpdateMethods is the original
	// spec.workloadUpdateStrategy.workloadUpdateMethods; absent when the field
	// was not set (KubeVirt's default applies), empty when it was empty.
	// +optional
	// +listType=atomic
	WorkloadUpdateMethods *[]string `json:"workloadUpdateMethods,omitempty"`
	// ComparePatchAdded is true when the plan added the comparePatch that
	// keeps Fleet from reverting the change on the harvester ManagedChart.
	// +optional
	ComparePatchAdded bool `json:"comparePatchAdded,omitempty"`
}

// SavedRancher records what the plan changed on the provisioning Cluster.
type SavedRancher struct {
	// UpgradeStrategy is the original spec.rkeConfig.upgradeStrategy as JSON;
	// empty when there was none.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	UpgradeStrategy *runtime.RawExtension `json:"upgradeStrategy,omitempty"`
}

// UpgradePlan upgrades a whole Harvester cluster (Kubernetes, KubeVirt,
// Longhorn, the embedded Rancher and every node's operating system) from the
// running release to another, one phase at a time and one node at a time.
// At most one plan runs at a time; others wait for it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName={up,ups}
// +kubebuilder:printcolumn:name="VERSION",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="PHASE",type=string,JSONPath=`.status.currentPhase`
// +kubebuilder:printcolumn:name="AVAILABLE",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="PROGRESSING",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].status`
// +kubebuilder:printcolumn:name="DEGRADED",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`
// +kubebuilder:printcolumn:name="PAUSED",type=boolean,JSONPath=`.spec.paused`,priority=1
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type UpgradePlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the upgrade the user asks for.
	// +required
	Spec UpgradePlanSpec `json:"spec"`

	// Status is what the controller observed and decided.
	// +optional
	Status UpgradePlanStatus `json:"status,omitempty"`
}

// UpgradePlanList is a list of UpgradePlans.
//
// +kubebuilder:object:root=true
type UpgradePlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []UpgradePlan `json:"items"`
}

func init() {
	SchemeBuilder.Register(&UpgradePlan{}, &UpgradePlanList{})
}

package v1beta1

// UpgradePlanPhase is the overall phase of an UpgradePlan
// (status.currentPhase). Each phase has an active value, set while its work
// runs, and a completed value, set when its work is done; Succeeded and
// Failed are terminal.
//
// +kubebuilder:validation:Enum=Initializing;Initialized;ISODownloading;ISODownloaded;RepoCreating;RepoCreated;MetadataPopulating;MetadataPopulated;ImagePreloading;ImagePreloaded;ClusterUpgrading;ClusterUpgraded;NodeUpgrading;NodeUpgraded;CleaningUp;CleanedUp;Succeeded;Failed;Previewed;Aborted
type UpgradePlanPhase string

// The phase values, in the order a successful upgrade passes through them.
const (
	PhaseInitializing       UpgradePlanPhase = "Initializing"
	PhaseInitialized        UpgradePlanPhase = "Initialized"
	PhaseISODownloading     UpgradePlanPhase = "ISODownloading"
	PhaseISODownloaded      UpgradePlanPhase = "ISODownloaded"
	PhaseRepoCreating       UpgradePlanPhase = "RepoCreating"
	PhaseRepoCreated        UpgradePlanPhase = "RepoCreated"
	PhaseMetadataPopulating UpgradePlanPhase = "MetadataPopulating"
	PhaseMetadataPopulated  UpgradePlanPhase = "MetadataPopulated"
	PhaseImagePreloading    UpgradePlanPhase = "ImagePreloading"
	PhaseImagePreloaded     UpgradePlanPhase = "ImagePreloaded"
	PhaseClusterUpgrading   UpgradePlanPhase = "ClusterUpgrading"
	PhaseClusterUpgraded    UpgradePlanPhase = "ClusterUpgraded"
	PhaseNodeUpgrading      UpgradePlanPhase = "NodeUpgrading"
	PhaseNodeUpgraded       UpgradePlanPhase = "NodeUpgraded"
	PhaseCleaningUp         UpgradePlanPhase = "CleaningUp"
	PhaseCleanedUp          UpgradePlanPhase = "CleanedUp"
	PhaseSucceeded          UpgradePlanPhase = "Succeeded"
	PhaseFailed             UpgradePlanPhase = "Failed"
	// PhasePreviewed ends a dry run (spec.dryRun): the checks ran, the
	// outcome is in status.preview, and nothing was changed.
	PhasePreviewed UpgradePlanPhase = "Previewed"
	// PhaseAborted ends a plan stopped by spec.abort at a safe point; what
	// it made and changed is then cleaned up.
	PhaseAborted UpgradePlanPhase = "Aborted"
)

// IsTerminal reports whether the phase is Succeeded, Failed, Previewed or
// Aborted.
func (p UpgradePlanPhase) IsTerminal() bool {
	return p == PhaseSucceeded || p == PhaseFailed || p == PhasePreviewed || p == PhaseAborted
}

// The names of the pipeline's steps, as events and messages call them
// ("Entering phase ISODownload"). Each step owns one active and one
// completed phase value.
const (
	StepInitialize       = "Initialize"
	StepISODownload      = "ISODownload"
	StepRepoCreate       = "RepoCreate"
	StepMetadataPopulate = "MetadataPopulate"
	StepImagePreload     = "ImagePreload"
	StepClusterUpgrade   = "ClusterUpgrade"
	StepNodeUpgrade      = "NodeUpgrade"
	StepImageCleanup     = "ImageCleanup"
)

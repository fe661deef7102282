package sim

import (
	"time"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// Names that only the components the simulator plays use internally. The
// ones the toolkit shares with them live in internal/cluster.
const (
	// system-upgrade-controller.
	sucControllerName     = "system-upgrade-controller"
	labelSUCController    = "upgrade.cattle.io/controller"
	labelSUCVersion       = "upgrade.cattle.io/version"
	labelSUCExclusive     = "upgrade.cattle.io/exclusive"
	annotationSUCJobTTL   = "upgrade.cattle.io/ttl-seconds-after-finished"
	sucJobTTLSeconds      = 900
	sucJobBackoffLimit    = 2
	sucJobDeadlineSeconds = 600
	sucCondValidated      = "Validated"
	sucCondLatestResolved = "LatestResolved"
	sucCondComplete       = "Complete"

	// Rancher.
	labelMachineControlPlane = cluster.LabelMachineControlPlane
	labelMachineEtcd         = cluster.LabelMachineEtcd
	labelMachineWorker       = "rke.cattle.io/worker-role"
	labelMachineClusterName  = "rke.cattle.io/cluster-name"
	// rancherDrainTimeout is Rancher's drain timeout when the drain
	// options set none.
	rancherDrainTimeout   = 600 * time.Second
	labelNodeControlPlane = "node-role.kubernetes.io/control-plane"
	labelNodeEtcd         = "node-role.kubernetes.io/etcd"
	labelNodeMaster       = "node-role.kubernetes.io/master"
	labelNodeWorker       = "node-role.kubernetes.io/worker"
	labelHostname         = "kubernetes.io/hostname"

	// KubeVirt.
	runStrategyAlways             = "Always"
	runStrategyRerunOnFailure     = "RerunOnFailure"
	runStrategyManual             = "Manual"
	runStrategyHalted             = "Halted"
	evictionLiveMigrate           = "LiveMigrate"
	evictionLiveMigrateIfPossible = "LiveMigrateIfPossible"
	annotationEvacuationMigration = "kubevirt.io/evacuationMigration"
	labelMigrationVMIName         = "kubevirt.io/vmi-name"
	evacuationPrefix              = "kubevirt-evacuation-"
	vmiPhaseRunning               = "Running"
	vmiPhaseScheduling            = "Scheduling"
	migrationPending              = "Pending"
	migrationRunning              = "Running"
	migrationSucceeded            = "Succeeded"
	migrationFailed               = "Failed"

	// Longhorn: the labels it gives a replica (its volume, its node), the
	// modes its engine reports of a replica, an instance's states.
	labelLonghornVolume = "longhornvolume"
	labelLonghornNode   = "longhornnode"
	robustnessHealthy   = "healthy"
	robustnessDegraded  = cluster.LonghornRobustnessDegraded
	replicaModeRW       = cluster.LonghornReplicaRW
	replicaModeWO       = cluster.LonghornReplicaWO
	replicaModeERR      = "ERR"
	instanceRunning     = cluster.LonghornEngineRunning
	instanceUnknown     = "unknown"

	// Harvester's image controller (CDI backend).
	condImageInitialized     = "Initialized"
	condImageImported        = "Imported"
	condImageRetryLimit      = "RetryLimitExceeded"
	defaultImportFailMessage = "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found"

	// The service accounts of Harvester's Jobs and of system-upgrade-
	// controller's.
	harvesterServiceAccount = "harvester"
	sucServiceAccount       = "system-upgrade-controller"

	// kube-controller-manager.
	labelEndpointSliceManagedBy = "endpointslice.kubernetes.io/managed-by"
	endpointSliceController     = "endpointslice-controller.k8s.io"
)

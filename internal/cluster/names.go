package cluster

// Namespaces of the well-known objects.
const (
	// HarvesterNamespace holds the Version, VirtualMachineImage, repo, jobs
	// and ConfigMaps of an upgrade.
	HarvesterNamespace = "harvester-system"
	// CattleNamespace holds the system-upgrade-controller Plans and their Jobs.
	CattleNamespace = "cattle-system"
	// FleetLocalNamespace holds the provisioning Cluster, the CAPI Machines,
	// the machine-plan Secrets and the ManagedCharts.
	FleetLocalNamespace = "fleet-local"
	// LonghornNamespace holds the Longhorn settings and volumes.
	LonghornNamespace = "longhorn-system"
	// KubeSystemNamespace holds the descheduler Addon.
	KubeSystemNamespace = "kube-system"
	// CAPISystemNamespace runs the Cluster API controllers embedded in
	// Rancher.
	CAPISystemNamespace = "cattle-provisioning-capi-system"
	// NodeLeaseNamespace holds each kubelet's Lease, renewed with its
	// node's clock.
	NodeLeaseNamespace = "kube-node-lease"
)

// Names of well-known objects.
const (
	// LocalClusterName is Harvester's own provisioning Cluster in fleet-local.
	LocalClusterName = "local"
	// AnnotationCAPIPaused on a Cluster API object pauses its
	// reconciliation, as spec.paused does on its Cluster.
	AnnotationCAPIPaused = "cluster.x-k8s.io/paused"
	// TaintEtcd keeps workloads off a witness node (and is tolerated by the
	// toolkit's node Jobs).
	TaintEtcd = "node-role.kubernetes.io/etcd"
	// ServerVersionSetting is the Harvester Setting that holds the running
	// Harvester version.
	ServerVersionSetting = "server-version"
	// LonghornReplicaReplenishmentWaitInterval is the Longhorn setting raised
	// while nodes reboot so replicas are not rebuilt elsewhere.
	LonghornReplicaReplenishmentWaitInterval = "replica-replenishment-wait-interval"
	// DeschedulerAddon is the descheduler Addon in kube-system.
	DeschedulerAddon = "descheduler"
	// KubeVirtName is the KubeVirt object in harvester-system.
	KubeVirtName = "kubevirt"
	// HarvesterManagedChart is the ManagedChart in fleet-local that deploys
	// Harvester (and KubeVirt with it).
	HarvesterManagedChart = "harvester"
	// LonghornStaticStorageClass is the storage class of the ISO image.
	LonghornStaticStorageClass = "longhorn-static"
)

// Labels and annotations set by Harvester and its components.
const (
	// LabelManagedNode marks the nodes Harvester manages ("true").
	LabelManagedNode = "harvesterhci.io/managed"
	// LabelWitnessNode marks a witness node, which runs no workloads.
	LabelWitnessNode = "node-role.harvesterhci.io/witness"
	// AnnotationOSUpgradeImage marks a VirtualMachineImage as a release ISO.
	AnnotationOSUpgradeImage = "harvesterhci.io/os-upgrade-image"
	// AnnotationInternalIP is the node's internal IP, written by RKE2.
	AnnotationInternalIP = "rke2.io/internal-ip"
	// AnnotationCAPIMachine on a Node names its CAPI Machine.
	AnnotationCAPIMachine = "cluster.x-k8s.io/machine"
	// LabelHarvesterUpgrade on a VMI marks an upgrade-repo VM of the V1
	// upgrade, which is never recorded for restore.
	LabelHarvesterUpgrade = "harvesterhci.io/upgrade"
)

// Rancher's machine-plan Secrets and their drain-hook handshake.
const (
	// MachinePlanSecretType is the type of the Secret Rancher keeps per
	// machine in fleet-local.
	MachinePlanSecretType = "rke.cattle.io/machine-plan"
	// LabelMachineName on a machine-plan Secret names the CAPI Machine.
	LabelMachineName = "rke.cattle.io/machine-name"
	// AnnotationRancherPreDrain is Rancher's pre-drain request; the value must
	// be echoed into the pre-hook annotation before Rancher drains.
	AnnotationRancherPreDrain = "rke.cattle.io/pre-drain"
	// AnnotationRancherPostDrain is Rancher's post-drain request; the value
	// must be echoed into the post-hook annotation before Rancher uncordons.
	AnnotationRancherPostDrain = "rke.cattle.io/post-drain"
	// AnnotationRancherDrainOptions carries the drain options Rancher uses.
	AnnotationRancherDrainOptions = "rke.cattle.io/drain-options"
	// AnnotationRancherDrainDone says Rancher finished draining.
	AnnotationRancherDrainDone = "rke.cattle.io/drain-done"
	// AnnotationRancherUncordon asks for the node to be uncordoned.
	AnnotationRancherUncordon = "rke.cattle.io/uncordon"
	// AnnotationRancherDrainError carries Rancher's last drain error.
	AnnotationRancherDrainError = "rke.cattle.io/drain-error"
)

// system-upgrade-controller labels on its Jobs.
const (
	// LabelSUCPlan names the Plan a Job belongs to.
	LabelSUCPlan = "upgrade.cattle.io/plan"
	// LabelSUCNode names the node a Job runs on.
	LabelSUCNode = "upgrade.cattle.io/node"
)

// KubeVirt labels and taints.
const (
	// LabelVMINodeName on a VMI names the node it runs on.
	LabelVMINodeName = "kubevirt.io/nodeName"
	// TaintKubeVirtDrain makes KubeVirt evacuate a node's VMs.
	TaintKubeVirtDrain = "kubevirt.io/drain"
	// KubeVirtDrainTaintValue is the value the pre-drain work gives the taint
	// (kubevirt.io/drain=draining:NoSchedule), so cleanup removes only its own.
	KubeVirtDrainTaintValue = "draining"
)

// KubeVirt's evacuation of a node tainted TaintKubeVirtDrain.
const (
	// EvacuationMigrationPrefix starts the name of every
	// VirtualMachineInstanceMigration KubeVirt creates to evacuate a node.
	EvacuationMigrationPrefix = "kubevirt-evacuation-"
	// EvacuationPDBPrefix starts the name of the PodDisruptionBudget KubeVirt
	// puts on a VM's pods while it evacuates them; a drain fails while one is
	// left.
	EvacuationPDBPrefix = "kubevirt-migration-pdb-" + EvacuationMigrationPrefix
	// LabelMigrationVMIName on a migration names the instance it moves.
	LabelMigrationVMIName = "kubevirt.io/vmi-name"
	// EventFailedMigration is the reason of the Warning event KubeVirt
	// records on a migration that failed.
	EventFailedMigration = "FailedMigration"
	// AnnotationEvacuationMigration on a migration names the node KubeVirt's
	// evacuation controller made it for.
	AnnotationEvacuationMigration = "kubevirt.io/evacuationMigration"
)

// Objects the cluster upgrade reads and changes.
const (
	// RancherDeployment is the embedded Rancher in cattle-system.
	RancherDeployment = "rancher"
	// RancherServerVersionSetting is the Rancher setting (management.cattle.io)
	// that holds the running Rancher version.
	RancherServerVersionSetting = "server-version"
	// HarvesterClusterRepoDeployment in cattle-system serves the Harvester
	// release's Helm charts to Rancher; its image is tagged with the release.
	HarvesterClusterRepoDeployment = "harvester-cluster-repo"
	// HarvesterClusterRepoContainer is the container of that Deployment.
	HarvesterClusterRepoContainer = "httpd"
	// HarvesterClusterRepoImage is the image repository of that container.
	HarvesterClusterRepoImage = "rancher/harvester-cluster-repo"
	// HarvesterChartsRepo is the ClusterRepo (catalog.cattle.io) Rancher
	// indexes the Harvester charts from.
	HarvesterChartsRepo = "harvester-charts"
	// HarvesterCRDManagedChart deploys Harvester's CRDs.
	HarvesterCRDManagedChart = "harvester-crd"
	// MonitoringCRDManagedChart and LoggingCRDManagedChart deploy the CRDs of
	// the monitoring and logging add-ons.
	MonitoringCRDManagedChart = "rancher-monitoring-crd"
	LoggingCRDManagedChart    = "rancher-logging-crd"
	// MonitoringManagedChart and LoggingManagedChart deployed the monitoring
	// and logging stacks before they became Addons; old clusters may still
	// have them.
	MonitoringManagedChart = "rancher-monitoring"
	LoggingManagedChart    = "rancher-logging"
	// MonitoringAddon and LoggingAddon are the Addons of the monitoring and
	// logging stacks, in MonitoringNamespace and LoggingNamespace.
	MonitoringAddon     = "rancher-monitoring"
	MonitoringNamespace = "cattle-monitoring-system"
	LoggingAddon        = "rancher-logging"
	LoggingNamespace    = "cattle-logging-system"
	// LonghornManagerDaemonSet runs Longhorn's manager on every node.
	LonghornManagerDaemonSet = "longhorn-manager"
	// LonghornNodeDrainPolicy and LonghornDetachWhenCordoned are Longhorn
	// settings the Harvester chart sets when the cluster still has Longhorn's
	// defaults.
	LonghornNodeDrainPolicy    = "node-drain-policy"
	LonghornDetachWhenCordoned = "detach-manually-attached-volumes-when-cordoned"
)

// Rancher's objects the cluster upgrade changes or waits for.
const (
	// RancherWebhookDeployment runs Rancher's admission webhook.
	RancherWebhookDeployment = "rancher-webhook"
	// Helm releases that come with Rancher (the release's
	// rancherDependencies) and their namespaces.
	RancherRelease        = "rancher"
	FleetRelease          = "fleet"
	FleetCRDRelease       = "fleet-crd"
	RancherWebhookRelease = "rancher-webhook"
	// RancherChartsRepo is Rancher's own chart repository; Rancher
	// recreates it and RancherRKE2ChartsRepo, RancherPartnerChartsRepo and
	// the Setting ChartDefaultBranchSetting when they are missing, which
	// the upgrade relies on (rancher/rancher#36914).
	RancherChartsRepo         = "rancher-charts"
	RancherRKE2ChartsRepo     = "rancher-rke2-charts"
	RancherPartnerChartsRepo  = "rancher-partner-charts"
	ChartDefaultBranchSetting = "chart-default-branch"
	// STVAggregationSecret in cattle-system makes Rancher's
	// system-agent-upgrader Plan ready.
	STVAggregationSecret = "stv-aggregation"
	// TLSInternalCNAllowedServicesSetting is the Rancher v2.15 setting that
	// keeps Rancher's internal certificate from flapping
	// (harvester/harvester#11338), and the value Harvester gives it.
	TLSInternalCNAllowedServicesSetting = "tls-internal-cn-allowed-services"
	TLSInternalCNAllowedServices        = "kube-system/ingress-expose,kube-system/rke2-traefik"
	// Annotations of the management Cluster "local".
	AnnotationImportedVersionManagement = "rancher.io/imported-cluster-version-management"
	AnnotationProvisioningAdministrated = "provisioning.cattle.io/administrated"
	// LabelManagementClusterName on the provisioning Cluster names its
	// management Cluster.
	LabelManagementClusterName = "provisioning.cattle.io/management-cluster-name"
	// LocalRKEStateSecret in fleet-local holds the RKE state of the local
	// cluster; since Rancher v2.7 it must be of type
	// LocalRKEStateSecretType.
	LocalRKEStateSecret     = "local-rke-state"
	LocalRKEStateSecretType = "rke.cattle.io/cluster-state"
	// RancherExposeIngress in cattle-system exposes Rancher's UI.
	RancherExposeIngress = "rancher-expose"
	// AnnotationDefaultIngressClass marks the default IngressClass;
	// DefaultIngressClassName is RKE2's ingress-nginx class.
	AnnotationDefaultIngressClass = "ingressclass.kubernetes.io/is-default-class"
	DefaultIngressClassName       = "nginx"
	// CAPIClusterPhaseProvisioned is a CAPI Cluster that runs.
	CAPIClusterPhaseProvisioned = "Provisioned"
)

// The CAPI webhook configurations the CAPI of Harvester v1.7 leaves behind;
// Rancher after v2.13 logs errors while they exist.
const (
	LegacyCAPIMutatingWebhook   = "mutating-webhook-configuration"
	LegacyCAPIValidatingWebhook = "validating-webhook-configuration"
)

// Harvester's objects the cluster upgrade changes or waits for.
const (
	// HarvesterRelease is the Helm release of the harvester chart, in
	// harvester-system.
	HarvesterRelease = "harvester"
	// Harvester Settings.
	OvercommitConfigSetting      = "overcommit-config"
	ContainerdRegistrySetting    = "containerd-registry"
	LonghornV2DataEngineSetting  = "longhorn-v2-data-engine-enabled"
	AnnotationUpgradePatched     = "harvesterhci.io/upgrade-patched"
	HarvesterLonghornStorageName = "harvester-longhorn"
	// AnnotationDefaultStorageClass marks the default StorageClass.
	AnnotationDefaultStorageClass = "storageclass.kubernetes.io/is-default-class"
	// Annotations the upgrade writes on each ManagedChart it upgrades.
	AnnotationLastUpgradeName          = "upgrade.harvesterhci.io/last-upgrade-name"
	AnnotationLastUpgradeTargetVersion = "upgrade.harvesterhci.io/last-upgrade-target-version"
	AnnotationLastUpgradeTime          = "upgrade.harvesterhci.io/last-upgrade-time"
	// AddonCRD is the CRD of Harvester's Addons.
	AddonCRD = "addons.harvesterhci.io"
	// KubeOVN's CRD chart and Addon, in kube-system.
	KubeOVNCRDManagedChart = "kubeovn-operator-crd"
	KubeOVNAddon           = "kubeovn-operator"
	// NvidiaDriverToolkitAddon keeps the driver location the operator set.
	NvidiaDriverToolkitAddon = "nvidia-driver-toolkit"
	// Addon conditions (Harvester's addon controller).
	AddonConditionInProgress = "InProgress"
	AddonConditionCompleted  = "Completed"
	AddonConditionFailed     = "OperationFailed"
	AddonStateUpdating       = "AddonUpdating"
	AddonStateEnabling       = "AddonEnabling"
)

// RKE2's chart configurations the upgrade sets, in kube-system.
const (
	RKE2MultusChartConfig  = "rke2-multus"
	RKE2TraefikChartConfig = "rke2-traefik"
	// HelmFailurePolicyAbort keeps RKE2 from uninstalling a chart whose
	// upgrade failed.
	HelmFailurePolicyAbort = "abort"
)

// Longhorn's InstanceManager labels and values.
const (
	LabelLonghornNode                = "longhorn.io/node"
	LabelInstanceManagerType         = "longhorn.io/instance-manager-type"
	LabelInstanceManagerDataEngine   = "longhorn.io/data-engine"
	LabelInstanceManagerImage        = "longhorn.io/instance-manager-image"
	InstanceManagerTypeAIO           = "aio"
	InstanceManagerStateRunning      = "running"
	LonghornDataEngineV1             = "v1"
	LonghornDataEngineV2             = "v2"
	LonghornInstanceManagerImagePref = "imi-"
)

package preflight

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// AdmissionFacts is the state of the cluster the create-time checks judge a
// new plan against, gathered by GatherAdmissionFacts.
type AdmissionFacts struct {
	// VersionExists reports whether the Version named by spec.version exists
	// in harvester-system (looked up only when spec.image is empty).
	VersionExists bool
	// ImageExists reports whether the VirtualMachineImage named by
	// spec.image exists in harvester-system.
	ImageExists bool
	// OtherPlans are all UpgradePlans but the one judged.
	OtherPlans []v1beta1.UpgradePlan
	// Nodes are all Nodes, managed or not.
	Nodes []corev1.Node
	// Cluster is the provisioning Cluster fleet-local/local, nil when missing.
	Cluster *provisioningv1.Cluster
	// Machines are the CAPI Machines in fleet-local.
	Machines []capiv1beta1.Machine
	// Volumes are the Longhorn volumes.
	Volumes []longhornv1beta2.Volume
	// Backups are the VM backups and snapshots of all namespaces.
	Backups []harvesterv1beta1.VirtualMachineBackup
	// BackupSchedules are the VM backup and snapshot schedules.
	BackupSchedules []harvesterv1beta1.ScheduleVMBackup
	// VMIs are the VirtualMachineInstances of all namespaces.
	VMIs []kubevirtv1.VirtualMachineInstance
	// ManagedCharts are the ManagedCharts in fleet-local.
	ManagedCharts []managementv3.ManagedChart
	// Addons are the Harvester addons of all namespaces.
	Addons []harvesterv1beta1.Addon
	// CAPICluster is the CAPI Cluster fleet-local/local, nil when missing.
	CAPICluster *capiv1beta1.Cluster
	// Bundles are the Fleet Bundles in fleet-local.
	Bundles []fleetv1alpha1.Bundle
	// SystemPods are the pods of SystemNamespaces.
	SystemPods []corev1.Pod
	// Budgets are the PodDisruptionBudgets of all namespaces.
	Budgets []policyv1.PodDisruptionBudget
	// Leases are the kubelets' Leases in kube-node-lease.
	Leases []coordinationv1.Lease
	// Alerts are the alerts firing, when an Alertmanager is configured.
	Alerts []Alert
	// AlertsError is why the configured Alertmanager gave no answer.
	AlertsError error
	// Now is when the facts were read, by the clock of the one judging.
	Now time.Time
}

// AdmissionResult is the verdict on a plan: the verdicts of its checks. The
// API server's answer is made of the failed ones, every reason to refuse the
// plan with the field it concerns, and the warnings about risky but allowed
// choices.
type AdmissionResult struct {
	Verdicts []Verdict
}

func (r *AdmissionResult) add(o AdmissionResult) { r.Verdicts = append(r.Verdicts, o.Verdicts...) }

// refuse adds a refusal of a field; judged names its check.
func (r *AdmissionResult) refuse(errs ...*field.Error) {
	for _, e := range errs {
		r.Verdicts = append(r.Verdicts, Refused("", e))
	}
}

// warn adds a warning; judged names its check.
func (r *AdmissionResult) warn(format string, args ...any) {
	r.Verdicts = append(r.Verdicts, Warning("", format, args...))
}

// Errors are the reasons to refuse the plan, each with its field.
func (r AdmissionResult) Errors() field.ErrorList {
	var errs field.ErrorList
	for _, v := range r.Verdicts {
		if v.Result == v1beta1.CheckFailed {
			errs = append(errs, v.Field)
		}
	}
	return errs
}

// Warnings are the messages of the checks that warned.
func (r AdmissionResult) Warnings() []string {
	var out []string
	for _, v := range r.Verdicts {
		if v.Result == v1beta1.CheckWarning {
			out = append(out, v.Message)
		}
	}
	return out
}

// Allowed reports whether the plan may pass.
func (r AdmissionResult) Allowed() bool { return len(r.Errors()) == 0 }

// judged names the check of r's verdicts that no risk names, reason, and
// says that it passed, what it found, when it gave none.
func judged(reason Reason, passes string, r AdmissionResult) AdmissionResult {
	if len(r.Verdicts) == 0 {
		return AdmissionResult{Verdicts: []Verdict{Passed(reason, "%s", passes)}}
	}
	for i := range r.Verdicts {
		if r.Verdicts[i].Reason == "" {
			r.Verdicts[i].Reason = reason
		}
	}
	return r
}

// AdmissionChecksSkipped reports whether the plan bypasses the checks of the
// cluster's state (annotation skip-webhook "true"). Its own fields and
// annotations are still validated, and no facts need gathering.
func AdmissionChecksSkipped(p *v1beta1.UpgradePlan) bool {
	skip, _ := p.SkipWebhook() // a bad value is refused by admitAnnotations and skips nothing
	return skip
}

// AdmissionChecksDeferred reports whether the webhook leaves the checks of
// the cluster's state to the controller: a dry run (spec.dryRun) reports
// what they find in its status instead of being refused for it.
func AdmissionChecksDeferred(p *v1beta1.UpgradePlan) bool { return p.IsDryRun() }

// The admission checks, by reason.
const (
	ReasonPlanName                 Reason = "PlanName"
	ReasonAnnotations              Reason = "Annotations"
	ReasonForce                    Reason = "Force"
	ReasonAcceptRisks              Reason = "AcceptRisks"
	ReasonVersionOrImage           Reason = "VersionOrImage"
	ReasonNoOtherPlan              Reason = "NoOtherPlan"
	ReasonNodesReady               Reason = "NodesReady"
	ReasonClusterReady             Reason = "ClusterReady"
	ReasonMachines                 Reason = "Machines"
	ReasonLonghornHealthy          Reason = "LonghornHealthy"
	ReasonSingleReplicaVolumes     Reason = "SingleReplicaVolumes"
	ReasonNoBackupRunning          Reason = "NoBackupRunning"
	ReasonBackupSchedulesSuspended Reason = "BackupSchedulesSuspended"
	ReasonVMsMigratable            Reason = "VMsMigratable"
	ReasonManagedChartsReady       Reason = "ManagedChartsReady"
	ReasonAddonsSettled            Reason = "AddonsSettled"
	ReasonPauseNodesManaged        Reason = "PauseNodesManaged"
	ReasonNodeClocks               Reason = "NodeClocks"
	ReasonCAPIClusterActive        Reason = "CAPIClusterActive"
	ReasonNoStaleVolumes           Reason = "NoStaleVolumes"
	ReasonBundlesReady             Reason = "BundlesReady"
	ReasonSystemPodsRunning        Reason = "SystemPodsRunning"
	ReasonDrainBudgets             Reason = "DrainBudgets"
	ReasonNoCriticalAlerts         Reason = "NoCriticalAlerts"
	ReasonManagedNodes             Reason = "ManagedNodes"
	ReasonNodesUntainted           Reason = "NodesUntainted"
	ReasonRetry                    Reason = "Retry"
	ReasonAbort                    Reason = "Abort"
	ReasonChangeWhileRunning       Reason = "ChangeWhileRunning"
	ReasonDeletion                 Reason = "Deletion"
)

// admissionCheck judges one aspect of the cluster for a new plan.
type admissionCheck struct {
	reason Reason
	// passes says what a plan that passes the check was found to have.
	passes string
	judge  func(p *v1beta1.UpgradePlan, f *AdmissionFacts) AdmissionResult
}

// admissionChecks run, all of them, on every plan created without
// skip-webhook. What they refuse is no risk to accept: a release that does
// not exist, the one upgrade slot taken, a node list with a typo.
var admissionChecks = []admissionCheck{
	{ReasonVersionOrImage, "the release to upgrade to exists", admitVersionOrImage},
	{ReasonNoOtherPlan, "no other upgrade runs or waits", admitNoOtherPlan},
	{ReasonManagedNodes, "the cluster has managed nodes", admitManagedNodes},
	{ReasonPauseNodesManaged, "every node in pauseNodes and excludeNodes is a managed node", admitPauseNodesManaged},
}

// riskCheck looks for some risks of the catalogue.
type riskCheck struct {
	reason Reason
	// passes says what a cluster without these risks was found to have.
	passes string
	find   func(p *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict
}

// riskChecks find every risk judged at admission (JudgedAtAdmission).
var riskChecks = []riskCheck{
	{ReasonNodesReady, "every managed node is Ready and schedulable", riskNodes},
	{ReasonNodesUntainted, "no managed node has a taint that keeps workloads off", riskTaints},
	{ReasonNodeClocks, "every node's clock agrees with the manager's", riskClockSkew},
	{ReasonClusterReady, "Rancher's provisioning Cluster is ready", riskClusterReady},
	{ReasonCAPIClusterActive, "the CAPI Cluster is not paused", riskCAPIClusterPaused},
	{ReasonMachines, "every Machine runs, one for each node", riskMachines},
	{ReasonLonghornHealthy, "no Longhorn volume is degraded or faulted", riskVolumesHealthy},
	{ReasonSingleReplicaVolumes, "no volume depends on a single replica", riskSingleReplicaVolumes},
	{ReasonNoStaleVolumes, "every attached volume is used by a pod", riskStaleVolumes},
	{ReasonNoBackupRunning, "no VM backup or snapshot is in progress", riskBackups},
	{ReasonBackupSchedulesSuspended, "no VM backup schedule is active", riskBackupSchedules},
	{ReasonVMsMigratable, "every running VM can leave its node", riskVMs},
	{ReasonManagedChartsReady, "every ManagedChart is ready", riskManagedCharts},
	{ReasonBundlesReady, "every Fleet bundle is ready", riskBundles},
	{ReasonAddonsSettled, "every addon is settled", riskAddons},
	{ReasonSystemPodsRunning, "every system pod runs or has completed", riskSystemPods},
	{ReasonDrainBudgets, "no PodDisruptionBudget blocks a drain now", riskDisruptionBudgets},
	{ReasonNoCriticalAlerts, "no critical alert fires, or no Alertmanager is configured", riskAlerts},
}

// Risks are the risks the facts show, each check's in turn, as verdicts
// named by the risk (Failed for an Error, Warning for a Warning).
func Risks(p *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var out []Verdict
	for _, c := range riskChecks {
		out = append(out, c.find(p, f)...)
	}
	return out
}

// AdmitCreate judges a new plan: its name and annotations, and, unless
// AdmissionChecksSkipped, the state of the cluster in facts (nil when the
// checks are skipped or deferred: only the plan itself is judged then). Every check runs; the result lists every failure.
func AdmitCreate(p *v1beta1.UpgradePlan, facts *AdmissionFacts) AdmissionResult {
	r := judged(ReasonPlanName, "the name can prefix the names of the upgrade's objects", admitName(p))
	r.add(judged(ReasonAnnotations, "the annotations are valid", admitAnnotations(nil, p.Annotations)))
	r.add(judged(ReasonForce, "the eligibility check is not skipped", admissionForceWarning(nil, p)))
	r.add(judged(ReasonAbort, "no abort asked for, or one the plan can honour", admitAbort(nil, p)))
	r.add(judged(ReasonMaintenanceWindows, "the maintenance windows can be read", admitMaintenanceWindows(nil, p)))
	r.add(judged(ReasonAcceptRisks, "every accepted risk is one of the catalogue", admitAcceptRisks(nil, p)))
	if AdmissionChecksSkipped(p) || facts == nil {
		return r
	}
	for _, check := range admissionChecks {
		r.add(judged(check.reason, check.passes, check.judge(p, facts)))
	}
	for _, check := range riskChecks {
		r.add(judged(check.reason, check.passes, judgeRisks(p, check.find(p, facts))))
	}
	return r
}

// admissionSpecPath is where the checks of the cluster's state report: they refuse
// the plan as a whole rather than one of its fields.
var admissionSpecPath = field.NewPath("spec")

var (
	admissionPauseNodesPath   = field.NewPath("spec", "nodeUpgradeOption", "pauseNodes")
	admissionExcludeNodesPath = field.NewPath("spec", "nodeUpgradeOption", "excludeNodes")
)

func admissionRefuse(msg string, args ...any) AdmissionResult {
	var r AdmissionResult
	r.refuse(field.Forbidden(admissionSpecPath, fmt.Sprintf(msg, args...)))
	return r
}

func admissionWarn(msg string, args ...any) AdmissionResult {
	var r AdmissionResult
	r.warn(msg, args...)
	return r
}

// notFound is field.NotFound with a detail that says what to do.
func admissionNotFound(path *field.Path, value, detail string) *field.Error {
	return &field.Error{Type: field.ErrorTypeNotFound, Field: path.String(), BadValue: value, Detail: detail}
}

// admissionNames joins names for a message, naming at most
// names.MaxListed of them.
func admissionNames(objects []string) string { return names.List(objects) }

// admissionManagedNodes are the nodes labelled harvesterhci.io/managed=true.
func admissionManagedNodes(nodes []corev1.Node) []corev1.Node {
	var out []corev1.Node
	for _, n := range nodes {
		if n.Labels[cluster.LabelManagedNode] == "true" {
			out = append(out, n)
		}
	}
	return out
}

// admissionWorkloadNodes counts the managed nodes that run workloads (not witness
// nodes): what "single-node" and "three or more nodes" mean for VMs and
// volume replicas.
func admissionWorkloadNodes(nodes []corev1.Node) int {
	count := 0
	for _, n := range admissionManagedNodes(nodes) {
		if !cluster.IsWitness(&n) {
			count++
		}
	}
	return count
}

func admissionNodeNames(nodes []corev1.Node) []string {
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	return names
}

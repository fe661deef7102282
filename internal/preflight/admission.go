package preflight

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
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
}

// AdmissionResult is the verdict on a plan: every reason to refuse it, each
// with the field it concerns, and warnings about risky but allowed choices.
type AdmissionResult struct {
	Errors   field.ErrorList
	Warnings []string
}

func (r *AdmissionResult) add(o AdmissionResult) {
	r.Errors = append(r.Errors, o.Errors...)
	r.Warnings = append(r.Warnings, o.Warnings...)
}

// Allowed reports whether the plan may pass.
func (r AdmissionResult) Allowed() bool { return len(r.Errors) == 0 }

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

// admissionCheck judges one aspect of the cluster for a new plan.
type admissionCheck func(p *v1beta1.UpgradePlan, f *AdmissionFacts) AdmissionResult

// admissionChecks run, all of them, on every plan created without
// skip-webhook.
var admissionChecks = []admissionCheck{
	admitVersionOrImage,
	admitNoOtherPlan,
	admitNodesReady,
	admitClusterReady,
	admitMachines,
	admitLonghornHealthy,
	admitSingleReplicaVolumes,
	admitNoBackupRunning,
	admitBackupSchedulesSuspended,
	admitVMsMigratable,
	admitManagedChartsReady,
	admitAddonsSettled,
	admitPauseNodesManaged,
}

// AdmitCreate judges a new plan: its name and annotations, and, unless
// AdmissionChecksSkipped, the state of the cluster in facts (nil when the
// checks are skipped or deferred: only the plan itself is judged then). Every check runs; the result lists every failure.
func AdmitCreate(p *v1beta1.UpgradePlan, facts *AdmissionFacts) AdmissionResult {
	r := admitName(p)
	r.add(admitAnnotations(nil, p.Annotations))
	r.add(admissionForceWarning(nil, p))
	if AdmissionChecksSkipped(p) || facts == nil {
		return r
	}
	for _, check := range admissionChecks {
		r.add(check(p, facts))
	}
	return r
}

// admissionSpecPath is where the checks of the cluster's state report: they refuse
// the plan as a whole rather than one of its fields.
var admissionSpecPath = field.NewPath("spec")

var admissionPauseNodesPath = field.NewPath("spec", "nodeUpgradeOption", "pauseNodes")

func admissionRefuse(msg string, args ...any) AdmissionResult {
	return AdmissionResult{Errors: field.ErrorList{field.Forbidden(admissionSpecPath, fmt.Sprintf(msg, args...))}}
}

func admissionWarn(msg string, args ...any) AdmissionResult {
	return AdmissionResult{Warnings: []string{fmt.Sprintf(msg, args...)}}
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

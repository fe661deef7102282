package preflight

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// A risk is something about the cluster that makes an upgrade more likely
// to fail or to hurt a workload. Each has a stable name, the word an
// operator writes in spec.acceptRisks to go on knowingly, and is found as a
// Verdict whose Reason is that name: Failed for an Error (the upgrade does
// not start unless it is accepted), Warning for a Warning (said, never in
// the way). The names are an API: never rename one.
const (
	RiskNodeNotReady                = Reason("NodeNotReady")
	RiskNodeCordoned                = Reason("NodeCordoned")
	RiskNodeTainted                 = Reason("NodeTainted")
	RiskNodeClockSkew               = Reason("NodeClockSkew")
	RiskClusterNotReady             = Reason("ClusterNotReady")
	RiskCAPIClusterPaused           = Reason("CAPIClusterPaused")
	RiskMachineNotRunning           = Reason("MachineNotRunning")
	RiskMachineNodeMismatch         = Reason("MachineNodeMismatch")
	RiskVolumeDegraded              = Reason("VolumeDegraded")
	RiskVolumeFaulted               = Reason("VolumeFaulted")
	RiskSingleReplicaVolume         = Reason("SingleReplicaVolume")
	RiskSingleReplicaDetachedVolume = Reason("SingleReplicaDetachedVolume")
	RiskStaleAttachedVolume         = Reason("StaleAttachedVolume")
	RiskBackupInProgress            = Reason("BackupInProgress")
	RiskBackupScheduleActive        = Reason("BackupScheduleActive")
	RiskVMNotMigratable             = Reason("VMNotMigratable")
	RiskVMPaused                    = Reason("VMPaused")
	RiskVMsStayOff                  = Reason("VMsStayOff")
	RiskManagedChartNotReady        = Reason("ManagedChartNotReady")
	RiskFleetBundleNotReady         = Reason("FleetBundleNotReady")
	RiskAddonNotSettled             = Reason("AddonNotSettled")
	RiskSystemPodNotRunning         = Reason("SystemPodNotRunning")
	RiskPodDisruptionBudgetAtLimit  = Reason("PodDisruptionBudgetAtLimit")
	RiskCriticalAlertFiring         = Reason("CriticalAlertFiring")
	RiskAlertsUnknown               = Reason("AlertsUnknown")
	RiskInsufficientDiskSpace       = Reason("InsufficientDiskSpace")
	RiskCertificateExpiring         = Reason("CertificateExpiring")
)

// Where a risk is judged.
const (
	// JudgedAtAdmission: by the webhook when a plan is created, by
	// Initialize again (it may have appeared since), and by preflight.
	JudgedAtAdmission = "admission, Initialize, preflight"
	// JudgedAtInitialize: only where the nodes' kubelets or the API
	// server's certificates are read: Initialize.
	JudgedAtInitialize = "Initialize"
)

// RiskInfo describes one risk of the catalogue.
type RiskInfo struct {
	Name Reason
	// Level is Error or Warning: the level it is found at (some are
	// Errors only in some clusters; Summary says when).
	Level string
	// JudgedAt says where it is looked for.
	JudgedAt string
	// Summary says what it means for the upgrade.
	Summary string
}

// The levels of a risk, as users read them.
const (
	LevelError   = "Error"
	LevelWarning = "Warning"
)

// Catalogue is every risk the toolkit knows, in the order docs/risks.md
// lists them. spec.acceptRisks takes these names only.
var Catalogue = []RiskInfo{
	{RiskNodeNotReady, LevelError, JudgedAtAdmission, "a managed node is not Ready: it cannot be drained and upgraded in turn"},
	{RiskNodeCordoned, LevelError, JudgedAtAdmission, "a managed node is cordoned: VMs cannot move onto it, and the upgrade would uncordon it"},
	{RiskNodeTainted, LevelError, JudgedAtAdmission, "a managed node has a NoSchedule or NoExecute taint: VMs and system pods cannot move onto it"},
	{RiskNodeClockSkew, LevelError, JudgedAtAdmission, "a node's clock is off by more than a minute (its kubelet's Lease renewals): certificates, etcd and Longhorn misjudge time"},
	{RiskClusterNotReady, LevelError, JudgedAtAdmission, "Rancher's provisioning Cluster fleet-local/local is missing or not ready: it rolls RKE2 over the nodes"},
	{RiskCAPIClusterPaused, LevelError, JudgedAtAdmission, "the CAPI Cluster fleet-local/local is paused: no Machine is reconciled, so no node is upgraded"},
	{RiskMachineNotRunning, LevelError, JudgedAtAdmission, "a CAPI Machine is not Running"},
	{RiskMachineNodeMismatch, LevelError, JudgedAtAdmission, "Machines and Nodes do not match one to one, so Rancher cannot drain and upgrade each node"},
	{RiskVolumeDegraded, LevelError, JudgedAtAdmission, "a Longhorn volume is degraded (three or more nodes): a replica is missing now"},
	{RiskVolumeFaulted, LevelError, JudgedAtAdmission, "a Longhorn volume is faulted: no healthy replica"},
	{RiskSingleReplicaVolume, LevelError, JudgedAtAdmission, "a volume in use has one replica: its workload stops when its node reboots and its data has no other copy"},
	{RiskSingleReplicaDetachedVolume, LevelError, JudgedAtAdmission, "a detached volume has one replica (a Warning with the annotation skip-single-replica-detached-vol)"},
	{RiskStaleAttachedVolume, LevelError, JudgedAtAdmission, "a Longhorn volume is attached but no pod uses it: it holds its node's drain"},
	{RiskBackupInProgress, LevelError, JudgedAtAdmission, "a VM backup or snapshot is in progress: a reboot cuts it off"},
	{RiskBackupScheduleActive, LevelError, JudgedAtAdmission, "a VM backup schedule is active: it may start a backup mid-upgrade"},
	{RiskVMNotMigratable, LevelError, JudgedAtAdmission, "a running VM cannot be live-migrated (a Warning with spec.restoreVM: it is shut down and restarted)"},
	{RiskVMPaused, LevelWarning, JudgedAtAdmission, "a VM is paused: it can neither move nor be stopped, so the upgrade fails at its node"},
	{RiskVMsStayOff, LevelWarning, JudgedAtAdmission, "single node without spec.restoreVM: every running VM is shut down and stays off"},
	{RiskManagedChartNotReady, LevelError, JudgedAtAdmission, "a ManagedChart is not ready: upgrading it will not make it ready"},
	{RiskFleetBundleNotReady, LevelError, JudgedAtAdmission, "a Fleet Bundle in fleet-local is not ready: the new charts are deployed through Fleet"},
	{RiskAddonNotSettled, LevelError, JudgedAtAdmission, "a Harvester addon is being enabled, disabled or updated: it races the upgrade of its chart"},
	{RiskSystemPodNotRunning, LevelError, JudgedAtAdmission, "a pod of a system namespace is failed, stuck Pending or crash-looping"},
	{RiskPodDisruptionBudgetAtLimit, LevelError, JudgedAtAdmission, "a PodDisruptionBudget allows no disruption: the drain of a node running its pods waits"},
	{RiskCriticalAlertFiring, LevelError, JudgedAtAdmission, "a critical alert fires (when an Alertmanager address is configured)"},
	{RiskAlertsUnknown, LevelWarning, JudgedAtAdmission, "the configured Alertmanager could not be asked: firing alerts are unknown"},
	{RiskInsufficientDiskSpace, LevelError, JudgedAtInitialize, "the new images would push a node past its kubelet's image garbage collection threshold"},
	{RiskCertificateExpiring, LevelError, JudgedAtInitialize, "an API server certificate expires within the required days"},
}

// KnownRisk reports whether name is in the catalogue.
func KnownRisk(name string) bool {
	return slices.ContainsFunc(Catalogue, func(r RiskInfo) bool { return string(r.Name) == name })
}

// RiskNames are the catalogue's names, in its order.
func RiskNames() []string {
	out := make([]string, 0, len(Catalogue))
	for _, r := range Catalogue {
		out = append(out, string(r.Name))
	}
	return out
}

// Level is the level of a risk found: Error for a failed verdict, Warning
// otherwise.
func (v Verdict) Level() string {
	if v.Result == v1beta1.CheckFailed {
		return LevelError
	}
	return LevelWarning
}

// riskFound is an Error-level risk naming the objects involved.
func riskFound(name Reason, objects []string, format string, args ...any) Verdict {
	v := Failed(name, format, args...)
	v.Objects = objects
	return v
}

// riskWarning is a Warning-level risk naming the objects involved.
func riskWarning(name Reason, objects []string, format string, args ...any) Verdict {
	v := Warning(name, format, args...)
	v.Objects = objects
	return v
}

// Accepted reports whether the plan accepts the risk name.
func Accepted(p *v1beta1.UpgradePlan, name Reason) bool {
	return slices.Contains(p.Spec.AcceptRisks, string(name))
}

// acceptRisksPath is where a refused risk is reported: naming it there is
// what lets the plan in.
var acceptRisksPath = field.NewPath("spec", "acceptRisks")

// HowToAccept is the end of the message of an Error-level risk not
// accepted: how to go on knowingly.
func HowToAccept(name Reason) string {
	return fmt.Sprintf("or, to upgrade anyway, accept the risk by name: spec.acceptRisks: [%s]", name)
}

// RiskRefusal is the message of an Error-level risk the plan does not accept.
func RiskRefusal(v Verdict) string {
	return fmt.Sprintf("risk %s: %s; %s", v.Reason, v.Message, HowToAccept(v.Reason))
}

// RiskAcceptedMessage is the message of an Error-level risk the plan accepts.
func RiskAcceptedMessage(v Verdict) string {
	return fmt.Sprintf("risk %s accepted (spec.acceptRisks): %s", v.Reason, v.Message)
}

// judgeRisks turns the risks found into admission verdicts: an Error-level
// risk not accepted refuses spec.acceptRisks, an accepted one and a
// Warning-level one are warnings. The verdicts keep the risk's name.
func judgeRisks(p *v1beta1.UpgradePlan, risks []Verdict) AdmissionResult {
	var r AdmissionResult
	for _, v := range risks {
		out := v
		switch {
		case v.Result != v1beta1.CheckFailed:
			out.Message = fmt.Sprintf("risk %s: %s", v.Reason, v.Message)
		case Accepted(p, v.Reason):
			out.Result, out.Message = v1beta1.CheckWarning, RiskAcceptedMessage(v)
		default:
			out.Message = RiskRefusal(v)
			out.Field = field.Forbidden(acceptRisksPath, out.Message)
		}
		r.Verdicts = append(r.Verdicts, out)
	}
	return r
}

// admitAcceptRisks: every name added to spec.acceptRisks is a risk of the
// catalogue, so that a typo does not silently accept nothing; before is nil
// on create.
func admitAcceptRisks(before, after *v1beta1.UpgradePlan) AdmissionResult {
	var r AdmissionResult
	for i, name := range after.Spec.AcceptRisks {
		if before != nil && slices.Contains(before.Spec.AcceptRisks, name) {
			continue
		}
		if !KnownRisk(name) {
			r.refuse(field.NotSupported(acceptRisksPath.Index(i), name, RiskNames()))
		}
	}
	return r
}

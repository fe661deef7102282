// Package preview answers "what would this upgrade do?" without doing it: it
// gathers the cluster's state through a reader (get and list only), runs the
// admission checks and the version eligibility rules against the target, and
// reports the nodes in the order Rancher will upgrade them, the VMs each
// node's drain live-migrates or shuts down, the Longhorn volumes at risk,
// the paused nodes and an estimate of the duration. The upgrade-toolkit
// preflight command prints the Report.
package preview

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/window"
)

// The preview's checks, by reason: the admission checks the webhook runs
// when the plan is created, and the version rules.
const (
	ReasonAdmission   preflight.Reason = "admission"
	ReasonEligibility preflight.Reason = "eligibility"
	// ReasonMaintenanceWindow says when the first node would begin, when
	// the plan sets maintenance windows.
	ReasonMaintenanceWindow preflight.Reason = "maintenance-window"
)

// Report is the preview of an upgrade; its JSON form is reportJSON.
type Report struct {
	// Target is the Version or the image the plan would install.
	Target string
	// RunningVersion is the cluster's Harvester version (setting
	// server-version), "" when unknown.
	RunningVersion string
	// WouldRun: no check failed; a plan with this spec would start.
	WouldRun bool
	// Checks are the verdicts; only a failed one stops the upgrade.
	Checks []preflight.Verdict
	// Risks are the risks of the catalogue found in the cluster, each
	// with whether the plan accepts it.
	Risks []Risk
	// NotChecked lists what only the upgrade itself checks, and when.
	NotChecked []string
	// Nodes are the managed nodes in the order they are upgraded.
	Nodes []Node
	// VolumesAtRisk are the Longhorn volumes that can lose data or access
	// while the nodes reboot in turn.
	VolumesAtRisk []Volume
	Estimate      Estimate
}

// Node is one node's part of the upgrade.
type Node struct {
	Name string `json:"name"`
	// Role is control-plane, etcd, worker or witness.
	Role  string `json:"role"`
	Ready bool   `json:"ready"`
	// Paused: listed in spec.nodeUpgradeOption.pauseNodes; the upgrade
	// waits at this node until it is removed from the list.
	Paused bool `json:"paused"`
	// Migrate are the VMs live-migrated away before the node's drain.
	Migrate []MigratingVM `json:"migrate"`
	// ShutDown are the VMs that cannot move and are stopped.
	ShutDown []StoppedVM `json:"shutDown"`
	// LeftRunning are non-migratable VMs the drain leaves alone (paused
	// VMs, VMs of an old upgrade repo), with why.
	LeftRunning []string `json:"leftRunning,omitempty"`
	// VolumesAtRisk names the at-risk volumes attached on this node.
	VolumesAtRisk []string `json:"volumesAtRisk,omitempty"`
}

// MigratingVM is a VM that can be live-migrated, and where to.
type MigratingVM struct {
	Name string `json:"name"`
	// Targets are the nodes it can go to now (Ready, schedulable, not a
	// witness, allowed by its nodeSelector and required node affinity).
	Targets []string `json:"targets"`
}

// StoppedVM is a VM shut down for its node's upgrade.
type StoppedVM struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	// Restarted: spec.restoreVM is true, so the upgrade starts it again
	// after its node is upgraded; otherwise it stays off.
	Restarted bool `json:"restarted"`
}

// Volume is a Longhorn volume at risk.
type Volume struct {
	Name string `json:"name"`
	// PVC is namespace/name of its claim, when it has one.
	PVC        string `json:"pvc,omitempty"`
	Replicas   int    `json:"replicas"`
	State      string `json:"state,omitempty"`
	Robustness string `json:"robustness,omitempty"`
	// Node is the node it is attached to, "" when detached.
	Node  string   `json:"node,omitempty"`
	Risks []string `json:"risks"`
}

// Risk is a risk of the catalogue (docs/risks.md) found in the cluster.
type Risk struct {
	// Name is the risk's stable name, the word spec.acceptRisks takes.
	Name string `json:"name"`
	// Level is Error (the plan does not start unless it accepts it) or
	// Warning.
	Level string `json:"level"`
	// Accepted: the plan names it in spec.acceptRisks.
	Accepted bool `json:"accepted"`
	// Objects are the objects involved.
	Objects []string `json:"objects,omitempty"`
	// Message says what was found and what to do.
	Message string `json:"message"`
}

// Facts is what the preview judges, gathered by Gather.
type Facts struct {
	Admission *preflight.AdmissionFacts
	// RunningVersion is the value (or default) of the setting
	// server-version, "" when missing.
	RunningVersion string
	// Version is the Version spec.version names, nil when missing or when
	// the plan names an image.
	Version *harvesterv1beta1.Version
}

// Gather reads what Build judges plan against. It only gets and lists; pass
// a reader that goes to the API server; alerts, when not nil, gives the
// alerts firing.
func Gather(ctx context.Context, r client.Reader, plan *v1beta1.UpgradePlan, alerts preflight.AlertSource) (*Facts, error) {
	af, err := preflight.GatherAdmissionFacts(ctx, r, plan, alerts, time.Now())
	if err != nil {
		return nil, err
	}
	f := &Facts{Admission: af}
	setting := &harvesterv1beta1.Setting{}
	switch err := r.Get(ctx, client.ObjectKey{Name: cluster.ServerVersionSetting}, setting); {
	case err == nil:
		f.RunningVersion = setting.Value
		if f.RunningVersion == "" {
			f.RunningVersion = setting.Default
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading the Harvester setting %s: %w", cluster.ServerVersionSetting, err)
	}
	if plan.Spec.Image == nil && plan.Spec.Version != nil && af.VersionExists {
		v := &harvesterv1beta1.Version{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: *plan.Spec.Version}, v); err != nil {
			return nil, fmt.Errorf("reading Version %s/%s: %w", cluster.HarvesterNamespace, *plan.Spec.Version, err)
		}
		f.Version = v
	}
	return f, nil
}

// placeholderName stands in for the name of a plan not created yet, which
// the name check would otherwise refuse.
const placeholderName = "upgrade-preview"

// Build judges plan against the facts. It is pure: same facts, same report.
func Build(plan *v1beta1.UpgradePlan, f *Facts) Report {
	rep := Report{Target: target(plan), RunningVersion: f.RunningVersion, NotChecked: notChecked(plan)}
	rep.Checks = append(admissionChecks(plan, f.Admission), eligibilityCheck(plan, f))
	if c, ok := windowCheck(plan, f.Admission.Now); ok {
		rep.Checks = append(rep.Checks, c)
	}
	for _, v := range preflight.Risks(plan, f.Admission) {
		rep.Risks = append(rep.Risks, Risk{Name: string(v.Reason), Level: v.Level(), Accepted: preflight.Accepted(plan, v.Reason),
			Objects: v.Objects, Message: v.Message})
	}
	rep.VolumesAtRisk = volumesAtRisk(f.Admission)
	rep.Nodes = nodes(plan, f.Admission, rep.VolumesAtRisk)
	rep.Estimate = estimate(rep.Nodes, plan.MaintenanceWindows())
	rep.WouldRun = !slices.ContainsFunc(rep.Checks, func(c preflight.Verdict) bool { return c.Result == v1beta1.CheckFailed })
	return rep
}

func target(plan *v1beta1.UpgradePlan) string {
	if plan.Spec.Image != nil {
		return "image " + cluster.HarvesterNamespace + "/" + *plan.Spec.Image
	}
	if plan.Spec.Version != nil {
		return "Version " + cluster.HarvesterNamespace + "/" + *plan.Spec.Version
	}
	return ""
}

// admissionChecks runs the checks the webhook runs when the plan is created.
func admissionChecks(plan *v1beta1.UpgradePlan, f *preflight.AdmissionFacts) []preflight.Verdict {
	p := plan.DeepCopy()
	if p.Name == "" {
		p.Name = placeholderName
	}
	res := preflight.AdmitCreate(p, f)
	var out []preflight.Verdict
	for _, e := range res.Errors() {
		out = append(out, preflight.Failed(ReasonAdmission, "%s", e.Error()))
	}
	for _, w := range res.Warnings() {
		out = append(out, preflight.Warning(ReasonAdmission, "%s", w))
	}
	if len(out) == 0 {
		out = append(out, preflight.Passed(ReasonAdmission, "nodes, Rancher, Longhorn, backups, VMs, charts and addons are ready for an upgrade"))
	}
	return out
}

// eligibilityCheck applies the version rules to the running version and the
// target Version's name and spec.minUpgradableVersion. The upgrade checks
// them again against the release metadata in the ISO.
func eligibilityCheck(plan *v1beta1.UpgradePlan, f *Facts) preflight.Verdict {
	if f.RunningVersion == "" {
		c := preflight.Failed(ReasonEligibility, "the Harvester setting server-version is missing or empty, so the running version is unknown")
		c.Fix = "check that Harvester is healthy (kubectl get settings.harvesterhci.io server-version)"
		return c
	}
	if err := release.CheckSupportedPath(f.RunningVersion); err != nil {
		return preflight.Failed(ReasonEligibility, "%s", err.Error())
	}
	if plan.Forced() {
		return preflight.Warning(ReasonEligibility, "spec.force is true: the version rules are skipped")
	}
	if f.Version == nil {
		return preflight.Warning(ReasonEligibility, "not checked: the target version is known only from the release metadata in the ISO, "+
			"which the MetadataPopulate phase reads after the download")
	}
	minimum := f.Version.Spec.MinUpgradableVersion
	if err := release.CheckEligibility(f.RunningVersion, f.Version.Name, minimum, true); err != nil {
		return preflight.Failed(ReasonEligibility, "%s", err.Error())
	}
	c := preflight.Passed(ReasonEligibility, "%s can be upgraded to %s", f.RunningVersion, f.Version.Name)
	if minimum != "" {
		c.Message += " (minUpgradableVersion " + minimum + ")"
	}
	return c
}

// windowCheck says whether a node may begin its drain at now, and when the
// next window opens when it may not; no verdict without windows, or with
// windows the admission check refuses.
func windowCheck(plan *v1beta1.UpgradePlan, now time.Time) (preflight.Verdict, bool) {
	ws := plan.MaintenanceWindows()
	sched, err := window.Parse(ws)
	if err != nil || sched.Always() {
		return preflight.Verdict{}, false
	}
	if sched.Open(now) {
		closes := sched.Closes(now)
		if closes.IsZero() {
			return preflight.Passed(ReasonMaintenanceWindow, "the maintenance windows (%s) are open now and join up: no node waits", window.Describe(ws)), true
		}
		return preflight.Passed(ReasonMaintenanceWindow, "a maintenance window (%s) is open now, until %s: a node that begins its drain by then finishes, "+
			"the next nodes wait for the next window", window.Describe(ws), closes.UTC().Format(time.RFC3339)), true
	}
	c := preflight.Warning(ReasonMaintenanceWindow, "no maintenance window (%s) is open now: the phases before the node upgrade run at once, "+
		"and the first node begins its drain when the next window opens, %s", window.Describe(ws), sched.NextOpen(now))
	c.Fix = "start the plan later, or add a window to spec.nodeUpgradeOption.maintenanceWindows"
	return c, true
}

// notChecked: what the upgrade checks later, because it needs the ISO or the
// nodes' kubelets.
func notChecked(plan *v1beta1.UpgradePlan) []string {
	out := []string{
		"disk space for the new images on every node (Initialize, from each kubelet's /stats/summary)",
		"the API server's certificate expiry (Initialize)",
		"the release metadata in the ISO's harvester-release.yaml: the eligibility rules again, " +
			"against its harvester and minUpgradableVersion, and the supported upgrade path (MetadataPopulate)",
	}
	if plan.Spec.Image == nil {
		out = append(out, "that the Version's spec.isoURL can be downloaded and matches spec.isoChecksum (ISODownload)")
	}
	return out
}

// volumesAtRisk: volumes that are degraded or faulted, and, on a cluster
// where VMs can move, volumes with a single replica (their data has no other
// copy while their node reboots).
func volumesAtRisk(f *preflight.AdmissionFacts) []Volume {
	multiNode := workloadNodes(f.Nodes) >= 2
	var out []Volume
	for _, v := range f.Volumes {
		var risks []string
		switch v.Status.Robustness {
		case cluster.LonghornRobustnessDegraded:
			risks = append(risks, "degraded: fewer healthy replicas than configured")
		case cluster.LonghornRobustnessFaulted:
			risks = append(risks, "faulted: no healthy replica")
		}
		if multiNode && v.Spec.NumberOfReplicas == 1 {
			risks = append(risks, "single replica: no other copy while its node reboots")
		}
		if len(risks) == 0 {
			continue
		}
		vol := Volume{Name: v.Name, Replicas: v.Spec.NumberOfReplicas, State: v.Status.State,
			Robustness: v.Status.Robustness, Node: v.Status.CurrentNodeID, Risks: risks}
		if k := v.Status.KubernetesStatus; k.PVCName != "" {
			vol.PVC = k.Namespace + "/" + k.PVCName
		}
		out = append(out, vol)
	}
	slices.SortFunc(out, func(a, b Volume) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func workloadNodes(nodes []corev1.Node) int {
	n := 0
	for i := range nodes {
		if !cluster.IsWitness(&nodes[i]) && nodes[i].Labels[cluster.LabelManagedNode] == "true" {
			n++
		}
	}
	return n
}

// nodes lists the managed nodes in Rancher's rollout order (nodes without a
// Machine last, by name) with their VMs and volumes.
func nodes(plan *v1beta1.UpgradePlan, f *preflight.AdmissionFacts, risky []Volume) []Node {
	machines := slices.Clone(f.Machines)
	slices.SortStableFunc(machines, func(a, b capiv1beta1.Machine) int { return cluster.CompareRolloutOrder(&a, &b) })
	rank := map[string]int{}
	role := map[string]string{}
	for i, m := range machines {
		if m.Status.NodeRef == nil {
			continue
		}
		if _, seen := rank[m.Status.NodeRef.Name]; !seen {
			rank[m.Status.NodeRef.Name] = i
			role[m.Status.NodeRef.Name] = machineRole(&m)
		}
	}
	var managed []corev1.Node
	for _, n := range f.Nodes {
		if n.Labels[cluster.LabelManagedNode] == "true" {
			managed = append(managed, n)
		}
	}
	slices.SortStableFunc(managed, func(a, b corev1.Node) int {
		ra, oka := rank[a.Name]
		rb, okb := rank[b.Name]
		switch {
		case oka && okb:
			return ra - rb
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})

	stuck := map[string]helper.NonMigratableVMI{}
	for _, v := range helper.NonMigratableVMIs(f.VMIs, f.Nodes) {
		stuck[v.Namespace+"/"+v.Name] = v
	}
	out := make([]Node, 0, len(managed))
	for i := range managed {
		n := &managed[i]
		node := Node{Name: n.Name, Role: role[n.Name], Ready: cluster.NodeReady(n), Paused: plan.IsNodePaused(n.Name),
			Migrate: []MigratingVM{}, ShutDown: []StoppedVM{}}
		if cluster.IsWitness(n) {
			node.Role = "witness"
		} else if node.Role == "" {
			node.Role = "worker"
		}
		for j := range f.VMIs {
			vmi := &f.VMIs[j]
			if vmi.Status.NodeName != n.Name || !running(vmi) {
				continue
			}
			name := vmi.Namespace + "/" + vmi.Name
			s, isStuck := stuck[name]
			switch {
			case !isStuck:
				node.Migrate = append(node.Migrate, MigratingVM{Name: name, Targets: helper.MigrationTargets(vmi, f.Nodes)})
			case helper.ShutdownSkipReason(vmi) != "":
				node.LeftRunning = append(node.LeftRunning, fmt.Sprintf("%s (%s)", name, helper.ShutdownSkipReason(vmi)))
			default:
				node.ShutDown = append(node.ShutDown, StoppedVM{Name: name, Reason: s.Reason, Restarted: plan.RestoreVMEnabled()})
			}
		}
		slices.SortFunc(node.Migrate, func(a, b MigratingVM) int { return strings.Compare(a.Name, b.Name) })
		slices.SortFunc(node.ShutDown, func(a, b StoppedVM) int { return strings.Compare(a.Name, b.Name) })
		slices.Sort(node.LeftRunning)
		for _, v := range risky {
			if v.Node == n.Name {
				node.VolumesAtRisk = append(node.VolumesAtRisk, v.Name)
			}
		}
		out = append(out, node)
	}
	return out
}

func running(vmi *kubevirtv1.VirtualMachineInstance) bool {
	return vmi.Status.Phase != cluster.VMIPhaseSucceeded && vmi.Status.Phase != cluster.VMIPhaseFailed
}

func machineRole(m *capiv1beta1.Machine) string {
	switch {
	case m.Labels[cluster.LabelMachineControlPlane] == "true":
		return "control-plane"
	case m.Labels[cluster.LabelMachineEtcd] == "true":
		return "etcd"
	}
	return "worker"
}

// Estimate is a rough duration of the upgrade, from fixed costs, not
// measured on this cluster.
type Estimate struct {
	Minutes int `json:"minutes"`
	// Model says how Minutes is made up.
	Model string `json:"model"`
}

// The cost model of the estimate: typical figures of a Harvester upgrade on
// a healthy cluster with a fast network. A slow ISO download, large image
// preloads or slow migrations make the real upgrade longer.
const (
	// costCluster: ISO download, repo, image preload on all nodes in
	// parallel, and the cluster's components.
	costCluster = 40 * time.Minute
	// costNode: drain, OS upgrade, reboot and RKE2 of one node.
	costNode = 15 * time.Minute
	// costMigration: one VM's live migration (they run one after another).
	costMigration = time.Minute
	// costShutdown: stopping and restarting one VM.
	costShutdown = 2 * time.Minute
)

func estimate(nodes []Node, windows []v1beta1.MaintenanceWindow) Estimate {
	total := costCluster
	migrations, shutdowns, paused := 0, 0, 0
	for _, n := range nodes {
		total += costNode
		migrations += len(n.Migrate)
		shutdowns += len(n.ShutDown)
		if n.Paused {
			paused++
		}
	}
	total += time.Duration(migrations)*costMigration + time.Duration(shutdowns)*costShutdown
	model := fmt.Sprintf("estimate: %v for the cluster (download, preload, components) + %v per node x %d + "+
		"%v per live migration x %d + %v per VM shut down x %d",
		costCluster, costNode, len(nodes), costMigration, migrations, costShutdown, shutdowns)
	if paused > 0 {
		model += fmt.Sprintf("; not counted: the time %d paused node(s) wait for you", paused)
	}
	if len(windows) > 0 {
		model += "; not counted: the time the nodes wait for a maintenance window (" + window.Describe(windows) + ")"
	}
	return Estimate{Minutes: int(total / time.Minute), Model: model}
}

// summaryMaxItems caps each list of the summary, so that a large cluster's
// dry run keeps its plan small; the preflight command lists everything.
const summaryMaxItems = 50

// Summary is the report in short, for the status of a dry-run plan.
func (r Report) Summary() *v1beta1.PreviewStatus {
	s := &v1beta1.PreviewStatus{WouldRun: r.WouldRun, EstimatedMinutes: r.Estimate.Minutes, NotChecked: r.NotChecked}
	for _, c := range r.Checks {
		msg := string(c.Reason) + ": " + c.Message
		if c.Fix != "" {
			msg += "; " + c.Fix
		}
		switch c.Result {
		case v1beta1.CheckFailed:
			s.Failures = append(s.Failures, msg)
		case v1beta1.CheckWarning:
			s.Warnings = append(s.Warnings, msg)
		}
	}
	for _, n := range r.Nodes {
		item := n.Name + " (" + n.Role + ")"
		if n.Paused {
			item += " paused"
		}
		s.Nodes = append(s.Nodes, item)
		for _, vm := range n.ShutDown {
			after := "stays off"
			if vm.Restarted {
				after = "restarted"
			}
			s.ShutDownVMs = append(s.ShutDownVMs, fmt.Sprintf("%s on %s (%s)", vm.Name, n.Name, after))
		}
	}
	for _, v := range r.VolumesAtRisk {
		s.VolumesAtRisk = append(s.VolumesAtRisk, v.Name+": "+strings.Join(v.Risks, "; "))
	}
	for _, l := range []*[]string{&s.Failures, &s.Warnings, &s.Nodes, &s.ShutDownVMs, &s.VolumesAtRisk} {
		if len(*l) > summaryMaxItems {
			more := len(*l) - summaryMaxItems
			*l = append((*l)[:summaryMaxItems], fmt.Sprintf("and %d more (upgrade-toolkit preflight lists them all)", more))
		}
	}
	return s
}

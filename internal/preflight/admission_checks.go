package preflight

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/helper"
)

// admitVersionOrImage: the release to upgrade to must exist. spec.image, when
// set, is used instead of the Version.
func admitVersionOrImage(p *v1beta1.UpgradePlan, f *AdmissionFacts) AdmissionResult {
	var r AdmissionResult
	switch {
	case p.Spec.Image != nil:
		path := admissionSpecPath.Child("image")
		image := *p.Spec.Image
		switch {
		case strings.Contains(image, "/"):
			r.refuse(field.Invalid(path, image,
				"must be the plain name of a VirtualMachineImage in harvester-system, without a namespace"))
		case !f.ImageExists:
			r.refuse(admissionNotFound(path, image, fmt.Sprintf(
				"no VirtualMachineImage %q in %s; upload or download the release ISO as an image there first "+
					"(kubectl get virtualmachineimages -n %[2]s lists them)", image, cluster.HarvesterNamespace)))
		}
	case p.Spec.Version != nil:
		if !f.VersionExists {
			version := *p.Spec.Version
			r.refuse(admissionNotFound(admissionSpecPath.Child("version"), version, fmt.Sprintf(
				"no Version %q in %s; create it first (kubectl get versions.harvesterhci.io -n %[2]s lists them), "+
					"or set spec.image to an image holding the release ISO", version, cluster.HarvesterNamespace)))
		}
	default:
		r.refuse(field.Required(admissionSpecPath.Child("version"), "set spec.version or spec.image"))
	}
	return r
}

// admitNoOtherPlan: one upgrade at a time. Any plan that has not finished,
// including one still waiting to start, holds the cluster.
func admitNoOtherPlan(_ *v1beta1.UpgradePlan, f *AdmissionFacts) AdmissionResult {
	var r AdmissionResult
	for _, o := range f.OtherPlans {
		switch {
		case o.DeletionTimestamp != nil && !o.IsFinished():
			r.add(admissionRefuse("upgrade %q is being deleted and still cleaning up; wait until it is gone", o.Name))
		case o.IsFinished(), o.IsDryRun():
		case !o.IsStarted():
			r.add(admissionRefuse("another upgrade %q is waiting to start; only one upgrade can run at a time: "+
				"delete it (kubectl delete upgradeplan %[1]s) or wait until it has finished", o.Name))
		default:
			r.add(admissionRefuse("another upgrade %q is in progress (phase %s); only one upgrade can run at a time: "+
				"wait until it reaches Succeeded or Failed", o.Name, o.Status.CurrentPhase))
		}
	}
	return r
}

// admitManagedNodes: the cluster has managed nodes at all. Not a risk: with
// none, this is no Harvester cluster to upgrade.
func admitManagedNodes(_ *v1beta1.UpgradePlan, f *AdmissionFacts) AdmissionResult {
	if len(admissionManagedNodes(f.Nodes)) == 0 {
		return admissionRefuse("no managed nodes found (label %s=true); is this a Harvester cluster?", cluster.LabelManagedNode)
	}
	return AdmissionResult{}
}

// riskNodes: every managed node is Ready and schedulable, so that each can
// be drained and upgraded in turn.
func riskNodes(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var out []Verdict
	for _, n := range admissionManagedNodes(f.Nodes) {
		if ready := cluster.ReadyCondition(&n); !cluster.NodeReady(&n) {
			out = append(out, riskFound(RiskNodeNotReady, []string{"node/" + n.Name},
				"node %q is not Ready%s; wait for it to be Ready or fix it before upgrading", n.Name, admissionNodeReadyDetail(ready)))
		}
		if n.Spec.Unschedulable {
			out = append(out, riskFound(RiskNodeCordoned, []string{"node/" + n.Name},
				"node %q is cordoned (unschedulable); uncordon it (kubectl uncordon %[1]s) "+
					"or take it out of maintenance mode before upgrading", n.Name))
		}
	}
	return out
}

func admissionNodeReadyDetail(c *corev1.NodeCondition) string {
	switch {
	case c == nil:
		return " (it reports no Ready condition)"
	case c.Message != "":
		return fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
	case c.Reason != "":
		return fmt.Sprintf(" (%s)", c.Reason)
	}
	return ""
}

// riskClusterReady: Rancher's provisioning Cluster, which rolls RKE2 over
// the nodes, exists and is ready.
func riskClusterReady(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	name := cluster.FleetLocalNamespace + "/" + cluster.LocalClusterName
	objects := []string{"clusters.provisioning.cattle.io/" + name}
	switch {
	case f.Cluster == nil:
		return []Verdict{riskFound(RiskClusterNotReady, objects, "provisioning cluster %s not found; the upgrade rolls the nodes through it, "+
			"so Rancher must manage this cluster", name)}
	case !f.Cluster.Status.Ready:
		detail := ""
		if c := common.FindCondition(f.Cluster.Status.Conditions, cluster.ConditionReady); c != nil && c.Message != "" {
			detail = " (" + c.Message + ")"
		}
		return []Verdict{riskFound(RiskClusterNotReady, objects, "provisioning cluster %s is not ready%s; wait for Rancher to finish provisioning", name, detail)}
	}
	return nil
}

// riskMachines: every CAPI Machine runs and Machines and Nodes match one to
// one, or Rancher cannot drain and upgrade the nodes in turn.
func riskMachines(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var out []Verdict
	machineObject := func(name string) []string {
		return []string{"machines.cluster.x-k8s.io/" + cluster.FleetLocalNamespace + "/" + name}
	}
	mismatch := func(objects []string, format string, args ...any) {
		out = append(out, riskFound(RiskMachineNodeMismatch, objects, format, args...))
	}
	for _, m := range f.Machines {
		if m.Status.Phase != cluster.MachinePhaseRunning {
			out = append(out, riskFound(RiskMachineNotRunning, machineObject(m.Name),
				"machine %s/%s is not running (phase %q); wait for it or repair its node", m.Namespace, m.Name, m.Status.Phase))
		}
	}
	if len(f.Nodes) != len(f.Machines) {
		mismatch(nil, "node count (%d) does not match machine count (%d); every node needs exactly one CAPI machine in %s: "+
			"check the cluster's provisioning (kubectl get machines.cluster.x-k8s.io -n %[3]s)",
			len(f.Nodes), len(f.Machines), cluster.FleetLocalNamespace)
	}
	machineNode := map[string]string{} // machine name -> its nodeRef, "" when it has none
	for _, m := range f.Machines {
		if m.Status.NodeRef == nil || m.Status.NodeRef.Name == "" {
			mismatch(machineObject(m.Name), "machine %s/%s has no node reference", m.Namespace, m.Name)
			machineNode[m.Name] = ""
			continue
		}
		machineNode[m.Name] = m.Status.NodeRef.Name
	}
	for _, n := range f.Nodes {
		node := []string{"node/" + n.Name}
		if n.Labels[cluster.LabelManagedNode] != "true" {
			mismatch(node, "node %q is missing the %s=true label", n.Name, cluster.LabelManagedNode)
		}
		machine, ok := n.Annotations[cluster.AnnotationCAPIMachine]
		if !ok {
			mismatch(node, "node %q is missing the %s annotation", n.Name, cluster.AnnotationCAPIMachine)
			continue
		}
		switch ref, exists := machineNode[machine]; {
		case !exists:
			mismatch(node, "node %q references machine %q which does not exist", n.Name, machine)
		case ref != "" && ref != n.Name:
			mismatch(append(node, machineObject(machine)...), "machine %q NodeRef.Name %q does not match node %q", machine, ref, n.Name)
		}
	}
	return out
}

// riskVolumesHealthy: no volume is faulted, and with three or more nodes,
// where every volume can be fully replicated, none is degraded: a replica
// is missing right now.
func riskVolumesHealthy(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var degraded, faulted []string
	for _, v := range f.Volumes {
		switch v.Status.Robustness {
		case cluster.LonghornRobustnessDegraded:
			degraded = append(degraded, admissionVolumeName(v))
		case cluster.LonghornRobustnessFaulted:
			faulted = append(faulted, admissionVolumeName(v))
		}
	}
	var out []Verdict
	if len(faulted) > 0 {
		out = append(out, riskFound(RiskVolumeFaulted, faulted, "Longhorn volumes are faulted (no healthy replica): %s; "+
			"salvage or restore them from a backup before upgrading (kubectl get volumes.longhorn.io -n %s)", admissionNames(faulted), cluster.LonghornNamespace))
	}
	if len(degraded) > 0 && admissionWorkloadNodes(f.Nodes) >= 3 {
		out = append(out, riskFound(RiskVolumeDegraded, degraded, "Longhorn volumes are degraded: %s; wait until all volumes are healthy before upgrading "+
			"(kubectl get volumes.longhorn.io -n %s)", admissionNames(degraded), cluster.LonghornNamespace))
	}
	return out
}

// riskSingleReplicaVolumes: on a multi-node cluster a volume with one
// replica loses its data if its node fails while the nodes reboot in turn.
// Detached ones are only a Warning with skip-single-replica-detached-vol.
func riskSingleReplicaVolumes(p *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	if admissionWorkloadNodes(f.Nodes) < 2 {
		return nil
	}
	var active, detached []string
	for _, v := range f.Volumes {
		if v.Spec.NumberOfReplicas != 1 {
			continue
		}
		switch v.Status.State {
		case cluster.LonghornVolumeCreating, cluster.LonghornVolumeAttaching, cluster.LonghornVolumeAttached:
			active = append(active, admissionVolumeName(v))
		default:
			detached = append(detached, admissionVolumeName(v))
		}
	}
	var out []Verdict
	if len(active) > 0 {
		out = append(out, riskFound(RiskSingleReplicaVolume, active, "active single-replica volumes found: %s; their workloads stop when the node reboots and the data "+
			"has no other copy: shut the workloads down or give the volumes more replicas", admissionNames(active)))
	}
	if len(detached) == 0 {
		return out
	}
	if skip, _ := p.SkipSingleReplicaDetachedVol(); skip { // a bad value is refused by admitAnnotations
		return append(out, riskWarning(RiskSingleReplicaDetachedVolume, detached,
			"detached single-replica volumes are not checked (%s=true): %s have no other copy if a node fails during the upgrade",
			v1beta1.AnnotationSkipSingleReplicaDetachedVol, admissionNames(detached)))
	}
	return append(out, riskFound(RiskSingleReplicaDetachedVolume, detached,
		"single-replica volumes found: %s; even detached, they have no other copy if a node fails during the upgrade: "+
			"give them more replicas, or annotate the plan with %s=\"true\"",
		admissionNames(detached), v1beta1.AnnotationSkipSingleReplicaDetachedVol))
}

func admissionVolumeName(v longhornv1beta2.Volume) string {
	if k := v.Status.KubernetesStatus; k.PVCName != "" {
		return k.Namespace + "/" + k.PVCName
	}
	return "volume " + v.Name
}

// riskBackups: a backup or snapshot in flight would be cut off when
// its node reboots.
func riskBackups(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var running []string
	for _, b := range f.Backups {
		s := b.Status
		if s == nil || ((s.ReadyToUse == nil || !*s.ReadyToUse) && s.Error == nil) {
			running = append(running, b.Namespace+"/"+b.Name)
		}
	}
	if len(running) == 0 {
		return nil
	}
	return []Verdict{riskFound(RiskBackupInProgress, running, "VM backups or snapshots are in progress: %s; wait until they have finished", admissionNames(running))}
}

// riskBackupSchedules: a schedule could start a backup mid-upgrade.
func riskBackupSchedules(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var active []string
	for _, s := range f.BackupSchedules {
		if !s.Spec.Suspend && !s.Status.Suspended {
			active = append(active, s.Namespace+"/"+s.Name)
		}
	}
	if len(active) == 0 {
		return nil
	}
	return []Verdict{riskFound(RiskBackupScheduleActive, active,
		"VM backup or snapshot schedules are active: %s; suspend them (spec.suspend: true) until the upgrade has finished", admissionNames(active))}
}

// riskVMs: on a multi-node cluster the VMs live-migrate away from
// each node before it is drained. Those that cannot must be shut off first,
// unless the plan lets the upgrade shut them down and restart them
// (spec.restoreVM). On a single node every VM is shut down anyway.
func riskVMs(p *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	stuck := helper.NonMigratableVMIs(f.VMIs, f.Nodes)
	vmObjects := func(vms []helper.NonMigratableVMI) []string {
		out := make([]string, 0, len(vms))
		for _, v := range vms {
			out = append(out, "virtualmachineinstances.kubevirt.io/"+v.Namespace+"/"+v.Name)
		}
		return out
	}
	if admissionWorkloadNodes(f.Nodes) < 2 {
		// Here every running VM is stuck: it has no other node to go to.
		if len(stuck) > 0 && !p.RestoreVMEnabled() {
			return []Verdict{riskWarning(RiskVMsStayOff, vmObjects(stuck),
				"single-node cluster: all %d running VMs are shut down during the upgrade and stay off afterwards "+
					"because spec.restoreVM is false", len(stuck))}
		}
		return nil
	}
	if len(stuck) == 0 {
		return nil
	}
	var out []Verdict
	paused := pausedVMIs(f.VMIs, stuck)
	if len(paused) > 0 {
		// The pre-drain Job fails at such a VM's node: its guest cannot shut
		// down while paused. Said now, it can be fixed before the upgrade.
		out = append(out, riskWarning(RiskVMPaused, paused, "these VMs are paused and cannot be live-migrated, so the upgrade can neither move nor stop them "+
			"and fails when it reaches their node: %s; unpause them (virtctl unpause vm) or stop them (virtctl stop) first",
			admissionNames(paused)))
	}
	if p.RestoreVMEnabled() {
		var shutDown []helper.NonMigratableVMI
		for _, v := range stuck {
			if !slices.Contains(paused, v.Namespace+"/"+v.Name) {
				shutDown = append(shutDown, v)
			}
		}
		if len(shutDown) > 0 {
			out = append(out, riskWarning(RiskVMNotMigratable, vmObjects(shutDown),
				"these VMs cannot be live-migrated; each is shut down while its node is upgraded and restarted afterwards: %s",
				admissionNames(vmStrings(shutDown))))
		}
		return out
	}
	return append(out, riskFound(RiskVMNotMigratable, vmObjects(stuck),
		"VMs that cannot be live-migrated must be shut off before the upgrade: %s; shut them down, "+
			"or set spec.restoreVM: true to let the upgrade shut them down and restart them after their node is upgraded",
		admissionNames(vmStrings(stuck))))
}

// vmStrings describes each VM with why it cannot move.
func vmStrings(vms []helper.NonMigratableVMI) []string {
	out := make([]string, 0, len(vms))
	for _, v := range vms {
		out = append(out, v.String())
	}
	return out
}

// pausedVMIs names the instances among stuck that are paused.
func pausedVMIs(vmis []kubevirtv1.VirtualMachineInstance, stuck []helper.NonMigratableVMI) []string {
	paused := map[string]bool{}
	for i := range vmis {
		if helper.IsPaused(&vmis[i]) {
			paused[vmis[i].Namespace+"/"+vmis[i].Name] = true
		}
	}
	var out []string
	for _, v := range stuck {
		if key := v.Namespace + "/" + v.Name; paused[key] {
			out = append(out, key)
		}
	}
	return out
}

// riskManagedCharts: the upgrade replaces the charts; one that is not
// ready now will not become ready by being upgraded.
func riskManagedCharts(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var out []Verdict
	for _, c := range f.ManagedCharts {
		ready := common.FindCondition(c.Status.Conditions, cluster.ConditionReady)
		if ready != nil && ready.Status == string(corev1.ConditionTrue) {
			continue
		}
		detail := ""
		if ready != nil && ready.Message != "" {
			detail = " (" + ready.Message + ")"
		}
		out = append(out, riskFound(RiskManagedChartNotReady, []string{"managedcharts.management.cattle.io/" + c.Namespace + "/" + c.Name},
			"managed chart %s/%s is not ready%s; wait for it to be ready or fix it", c.Namespace, c.Name, detail))
	}
	return out
}

// riskAddons: an addon being enabled, disabled or updated (or stuck
// after failing to) would race with the upgrade of its chart.
func riskAddons(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var out []Verdict
	for _, a := range f.Addons {
		state := a.Status.Status
		objects := []string{"addons.harvesterhci.io/" + a.Namespace + "/" + a.Name}
		switch {
		case a.Spec.Enabled && state != cluster.AddonStateDeployed:
			out = append(out, riskFound(RiskAddonNotSettled, objects,
				"addon %s/%s is enabled but still on status %q; wait for it to be deployed or fix it", a.Namespace, a.Name, state))
		case !a.Spec.Enabled && state != cluster.AddonStateInit && state != cluster.AddonStateDisabled:
			out = append(out, riskFound(RiskAddonNotSettled, objects,
				"addon %s/%s is disabled but still on status %q; wait for it to be disabled or fix it", a.Namespace, a.Name, state))
		}
	}
	return out
}

// admitPauseNodesManaged: a paused or excluded name that is no managed node
// would never be reached, and is most likely a typo.
func admitPauseNodesManaged(p *v1beta1.UpgradePlan, f *AdmissionFacts) AdmissionResult {
	var r AdmissionResult
	managed := admissionNodeNames(admissionManagedNodes(f.Nodes))
	r.refuse(admissionNodeListErrors(admissionPauseNodesPath, p.PauseNodes(), nil, managed)...)
	r.refuse(admissionNodeListErrors(admissionExcludeNodesPath, p.ExcludeNodes(), nil, managed)...)
	return r
}

// admissionNodeListErrors checks the entries of a list of nodes at path
// that are not in before against the managed node names.
func admissionNodeListErrors(path *field.Path, nodes, before, managed []string) field.ErrorList {
	var errs field.ErrorList
	for i, name := range nodes {
		if slices.Contains(before, name) || slices.Contains(managed, name) {
			continue
		}
		errs = append(errs, admissionNotFound(path.Index(i), name,
			fmt.Sprintf("is not a managed node of this cluster (managed nodes: %s)", admissionNames(managed))))
	}
	return errs
}

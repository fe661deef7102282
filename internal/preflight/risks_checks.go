package preflight

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
)

// The risks Harvester's own pre-check script (upgrade-helpers
// pre-check/v1.x/check.sh) and peer orchestrators look for beyond the
// original webhook: taints, clocks, a paused CAPI Cluster, stale volume
// attachments, Fleet bundles, system pods, disruption budgets and alerts.

// ignoredTaints are the taints other risks already name (not ready,
// unreachable, cordoned) or that the upgrade itself sets.
var ignoredTaints = []string{
	corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeUnschedulable,
	cluster.TaintKubeVirtDrain,
}

// riskTaints: a NoSchedule or NoExecute taint on a managed node keeps VMs
// and system pods from moving onto it while the others drain. A witness
// node's etcd taint is how Harvester keeps workloads off it.
func riskTaints(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var out []Verdict
	for _, n := range admissionManagedNodes(f.Nodes) {
		var taints []string
		for _, t := range n.Spec.Taints {
			if t.Effect == corev1.TaintEffectPreferNoSchedule || slices.Contains(ignoredTaints, t.Key) ||
				(cluster.IsWitness(&n) && t.Key == cluster.TaintEtcd) {
				continue
			}
			taints = append(taints, t.ToString())
		}
		if len(taints) > 0 {
			out = append(out, riskFound(RiskNodeTainted, []string{"node/" + n.Name},
				"node %q is tainted %s: VMs and system pods evacuated from the other nodes cannot go there; "+
					"remove the taints (kubectl taint node %[1]s KEY-) before upgrading", n.Name, strings.Join(taints, ", ")))
		}
	}
	return out
}

// MaxClockSkew is how far a node's clock may be from the manager's before
// it is a risk: NTP keeps healthy nodes within milliseconds, and etcd,
// certificates and Longhorn's leases misjudge time well before a minute.
const MaxClockSkew = time.Minute

// riskClockSkew: a kubelet stamps its Lease renewals with its own clock,
// every quarter of the Lease's duration. A renewal stamped in the future
// is a clock ahead; one older than the Lease's duration on a node still
// Ready (the node lifecycle controller judges by when it sees renewals,
// not by their stamp) is a clock behind.
func riskClockSkew(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	if f.Now.IsZero() {
		return nil
	}
	leases := map[string]int{}
	for i, l := range f.Leases {
		leases[l.Name] = i
	}
	var out []Verdict
	for _, n := range admissionManagedNodes(f.Nodes) {
		i, ok := leases[n.Name]
		if !ok || f.Leases[i].Spec.RenewTime == nil {
			continue
		}
		l := f.Leases[i]
		skew := l.Spec.RenewTime.Sub(f.Now)
		duration := 40 * time.Second
		if l.Spec.LeaseDurationSeconds != nil {
			duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		var how string
		switch {
		case skew > MaxClockSkew:
			how = fmt.Sprintf("about %s ahead of", skew.Round(time.Second))
		case -skew > duration+MaxClockSkew && cluster.NodeReady(&n):
			how = fmt.Sprintf("about %s behind", (-skew - duration/4).Round(time.Second))
		default:
			continue
		}
		out = append(out, riskFound(RiskNodeClockSkew, []string{"node/" + n.Name},
			"node %q's clock is %s the manager's (its kubelet stamped its last Lease renewal %s, read at %s); "+
				"fix the node's time synchronisation (NTP servers in the Harvester settings ntp-servers) before upgrading",
			n.Name, how, l.Spec.RenewTime.UTC().Format(time.RFC3339), f.Now.UTC().Format(time.RFC3339)))
	}
	return out
}

// riskCAPIClusterPaused: a paused CAPI Cluster reconciles no Machine, so
// Rancher's roll of RKE2 over the nodes never moves.
func riskCAPIClusterPaused(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	c := f.CAPICluster
	if c == nil {
		return nil
	}
	_, annotated := c.Annotations[cluster.AnnotationCAPIPaused]
	if !c.Spec.Paused && !annotated {
		return nil
	}
	return []Verdict{riskFound(RiskCAPIClusterPaused, []string{"clusters.cluster.x-k8s.io/" + c.Namespace + "/" + c.Name},
		"the CAPI Cluster %s/%s is paused (spec.paused or the annotation %s): no Machine is reconciled, so no node would be upgraded; "+
			"unpause it (kubectl patch clusters.cluster.x-k8s.io -n %[1]s %[2]s --type merge -p '{\"spec\":{\"paused\":false}}')",
		c.Namespace, c.Name, cluster.AnnotationCAPIPaused)}
}

// riskStaleVolumes: a volume attached with no pod using it (its last pod is
// gone) is never detached by Kubernetes, and Longhorn holds its node's
// drain for it (harvester/harvester#3648).
func riskStaleVolumes(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var stale []string
	for _, v := range f.Volumes {
		if v.Status.State != cluster.LonghornVolumeAttached || v.Status.KubernetesStatus.PVCName == "" {
			continue
		}
		k := v.Status.KubernetesStatus
		if k.LastPodRefAt == "" || slices.ContainsFunc(k.WorkloadsStatus, func(w longhornv1beta2.WorkloadStatus) bool {
			return w.PodStatus == string(corev1.PodRunning) || w.PodStatus == string(corev1.PodPending)
		}) {
			continue
		}
		stale = append(stale, admissionVolumeName(v)+" on "+v.Status.CurrentNodeID)
	}
	if len(stale) == 0 {
		return nil
	}
	return []Verdict{riskFound(RiskStaleAttachedVolume, stale,
		"Longhorn volumes are attached but no pod uses them: %s; their nodes' drains wait for them: detach them in Longhorn's UI "+
			"or start their workloads again", admissionNames(stale))}
}

// riskBundles: the new release's charts reach the cluster through Fleet.
// The ManagedCharts' own Bundles (mcc-*) are named by their chart's risk.
func riskBundles(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	charts := map[string]bool{}
	for _, c := range f.ManagedCharts {
		charts["mcc-"+c.Name] = true
	}
	var out []Verdict
	for _, b := range f.Bundles {
		if charts[b.Name] {
			continue
		}
		ready := common.FindCondition(b.Status.Conditions, cluster.ConditionReady)
		s := b.Status.Summary
		if (ready == nil || ready.Status == string(corev1.ConditionTrue)) && s.NotReady+s.ErrApplied+s.WaitApplied+s.OutOfSync+s.Modified == 0 {
			continue
		}
		detail := fmt.Sprintf("%d not ready, %d failed to apply, %d waiting to apply, %d out of sync, %d modified",
			s.NotReady, s.ErrApplied, s.WaitApplied, s.OutOfSync, s.Modified)
		if ready != nil && ready.Message != "" {
			detail = ready.Message
		}
		out = append(out, riskFound(RiskFleetBundleNotReady, []string{"bundles.fleet.cattle.io/" + b.Namespace + "/" + b.Name},
			"Fleet bundle %s/%s is not ready (%s); wait for it or fix it (kubectl get bundles.fleet.cattle.io -n %[1]s %[2]s -o yaml)",
			b.Namespace, b.Name, detail))
	}
	return out
}

// SystemNamespaces are the namespaces of the components the upgrade
// replaces or relies on: a pod failing there is a component not working.
var SystemNamespaces = []string{
	cluster.KubeSystemNamespace, cluster.CattleNamespace, cluster.FleetSystemNamespace, cluster.FleetLocalSystemNamespace,
	cluster.FleetLocalNamespace, cluster.HarvesterNamespace, cluster.LonghornNamespace, cluster.CAPISystemNamespace,
}

// pendingGrace is how long a pod may be Pending before it counts as stuck:
// a rolling update's new pod is Pending for seconds.
const pendingGrace = 2 * time.Minute

// crashing are the reasons a waiting container gives when it will not run.
var crashing = []string{"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "InvalidImageName"}

// riskSystemPods: every pod of the system namespaces runs or has completed.
// A Job's pods are its own business (a failed Job of an earlier upgrade
// stays as evidence), and a terminating pod is on its way out.
func riskSystemPods(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var bad, objects []string
	for i := range f.SystemPods {
		pod := &f.SystemPods[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		if owner := metav1.GetControllerOf(pod); owner != nil && owner.Kind == "Job" {
			continue
		}
		why := podTrouble(pod, f.Now)
		if why == "" {
			continue
		}
		bad = append(bad, pod.Namespace+"/"+pod.Name+" ("+why+")")
		objects = append(objects, "pod/"+pod.Namespace+"/"+pod.Name)
	}
	if len(bad) == 0 {
		return nil
	}
	return []Verdict{riskFound(RiskSystemPodNotRunning, objects,
		"pods of system namespaces are not running: %s; find out why (kubectl describe pod -n NAMESPACE NAME) and fix them, "+
			"or delete the failed ones", admissionNames(bad))}
}

// podTrouble says why pod is not working, "" when it is.
func podTrouble(pod *corev1.Pod, now time.Time) string {
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		return ""
	case corev1.PodFailed, corev1.PodUnknown:
		if pod.Status.Reason != "" {
			return string(pod.Status.Phase) + ": " + pod.Status.Reason
		}
		return string(pod.Status.Phase)
	case corev1.PodPending:
		if !now.IsZero() && now.Sub(pod.CreationTimestamp.Time) > pendingGrace {
			return fmt.Sprintf("Pending for %s", now.Sub(pod.CreationTimestamp.Time).Round(time.Second))
		}
		return ""
	}
	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && slices.Contains(crashing, w.Reason) {
			return "container " + c.Name + ": " + w.Reason
		}
	}
	return ""
}

// riskDisruptionBudgets: a PodDisruptionBudget that allows no disruption now
// holds the drain of every node that runs a pod it protects. KubeVirt's own
// budgets of migratable VMs are left out (evicting their pod starts a live
// migration), and so are Longhorn's instance-manager budgets, which
// Longhorn lifts itself while a node drains.
func riskDisruptionBudgets(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	var blocking, objects []string
	for i := range f.Budgets {
		pdb := &f.Budgets[i]
		if owner := metav1.GetControllerOf(pdb); owner != nil && owner.Kind == "VirtualMachineInstance" {
			continue
		}
		if pdb.Namespace == cluster.LonghornNamespace {
			continue
		}
		if pdb.Status.DisruptionsAllowed == 0 && pdb.Status.ExpectedPods > 0 && pdb.Status.ObservedGeneration >= pdb.Generation {
			blocking = append(blocking, cluster.DescribePDB(pdb))
			objects = append(objects, "poddisruptionbudget/"+pdb.Namespace+"/"+pdb.Name)
		}
	}
	if len(blocking) == 0 {
		return nil
	}
	slices.Sort(blocking)
	slices.Sort(objects)
	return []Verdict{riskFound(RiskPodDisruptionBudgetAtLimit, objects,
		"PodDisruptionBudgets allow no disruption now: %s; the drain of each node that runs a pod they protect waits until they do: "+
			"relax them or scale the workloads up first", strings.Join(blocking, ", "))}
}

// riskAlerts: a critical alert firing is a problem the upgrade would make
// worse or hide. Only when an Alertmanager is configured.
func riskAlerts(_ *v1beta1.UpgradePlan, f *AdmissionFacts) []Verdict {
	if f.AlertsError != nil {
		return []Verdict{riskWarning(RiskAlertsUnknown, nil,
			"the firing alerts are unknown: %v; check the Alertmanager address (the manager's --alertmanager-url, the chart's risks.alertmanagerURL)", f.AlertsError)}
	}
	var firing, objects []string
	for _, a := range f.Alerts {
		if a.Severity != AlertSeverityCritical {
			continue
		}
		text := a.Name
		if a.Summary != "" {
			text += " (" + a.Summary + ")"
		}
		firing = append(firing, text)
		objects = append(objects, "alert/"+a.Name)
	}
	if len(firing) == 0 {
		return nil
	}
	return []Verdict{riskFound(RiskCriticalAlertFiring, objects,
		"critical alerts are firing: %s; resolve them before upgrading, or silence those that do not concern the upgrade", admissionNames(firing))}
}

package cluster

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// drainErrorPod matches a pod as kubectl's drain (Rancher's drain helper)
// names it in its errors: pods/"name" -n "namespace".
var drainErrorPod = regexp.MustCompile(`pods/"([^"]+)" -n "([^"]+)"`)

// DrainErrorPods returns the pods a drain error names, in order, each once.
func DrainErrorPods(msg string) []types.NamespacedName {
	var out []types.NamespacedName
	seen := map[types.NamespacedName]bool{}
	for _, m := range drainErrorPod.FindAllStringSubmatch(msg, -1) {
		p := types.NamespacedName{Namespace: m[2], Name: m[1]}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// Labels KubeVirt puts on a VM's virt-launcher pod.
const (
	labelKubeVirtPodKind = "kubevirt.io"
	labelVMName          = "vm.kubevirt.io/name"
)

// DescribeDrainBlock says what keeps the drain of node from evicting pod
// (nil when the pod is gone), given the PodDisruptionBudgets of the pod's
// namespace, and what the operator can do about it.
func DescribeDrainBlock(node string, name types.NamespacedName, pod *corev1.Pod, pdbs []policyv1.PodDisruptionBudget) string {
	if pod == nil {
		return fmt.Sprintf("drain of node %s blocked: Rancher could not evict pod %s, which is gone now; Rancher retries the drain", node, name)
	}
	var budgets []string
	for i := range pdbs {
		if Protects(&pdbs[i], pod) {
			budgets = append(budgets, DescribePDB(&pdbs[i]))
		}
	}
	sort.Strings(budgets)
	what := "pod " + name.String()
	fix := "move the pod's workload"
	if pod.Labels[labelKubeVirtPodKind] == "virt-launcher" && pod.Labels[labelVMName] != "" {
		vm := name.Namespace + "/" + pod.Labels[labelVMName]
		what = fmt.Sprintf("pod %s of VM %s", name, vm)
		// KubeVirt's own budget holds the pod of a VM that is to
		// live-migrate: the VM has to move or stop.
		fix = fmt.Sprintf("stop VM %s (virtctl stop %s -n %s) or find why it does not live-migrate (kubectl get vmim -n %s)",
			vm, pod.Labels[labelVMName], name.Namespace, name.Namespace)
	}
	if len(budgets) == 0 {
		return fmt.Sprintf("drain of node %s blocked: Rancher cannot evict %s and no PodDisruptionBudget selects it now; "+
			"check the pod (kubectl describe pod -n %s %s): %s", node, what, name.Namespace, name.Name, fix)
	}
	noun := "PodDisruptionBudget"
	if len(budgets) > 1 {
		noun += "s"
	}
	return fmt.Sprintf("drain of node %s blocked: %s %s protects %s; delete or relax the %s, or %s",
		node, noun, strings.Join(budgets, ", "), what, noun, fix)
}

// Protects reports whether the PodDisruptionBudget selects the pod (policy/v1:
// an empty selector selects every pod of the namespace, a missing one none).
func Protects(pdb *policyv1.PodDisruptionBudget, pod *corev1.Pod) bool {
	if pdb.Namespace != pod.Namespace || pdb.Spec.Selector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	return err == nil && sel.Matches(labels.Set(pod.Labels))
}

// DescribePDB is "ns/name (minAvailable 1, 0 disruptions allowed)".
func DescribePDB(pdb *policyv1.PodDisruptionBudget) string {
	var limit string
	switch {
	case pdb.Spec.MinAvailable != nil:
		limit = "minAvailable " + pdb.Spec.MinAvailable.String()
	case pdb.Spec.MaxUnavailable != nil:
		limit = "maxUnavailable " + pdb.Spec.MaxUnavailable.String()
	}
	allowed := fmt.Sprintf("%d disruptions allowed", pdb.Status.DisruptionsAllowed)
	if pdb.Status.ObservedGeneration < pdb.Generation {
		allowed = "status not computed yet"
	}
	if limit != "" {
		allowed = limit + ", " + allowed
	}
	return fmt.Sprintf("%s/%s (%s)", pdb.Namespace, pdb.Name, allowed)
}

// DrainEvicts reports whether a drain (kubectl's, which Rancher's is)
// evicts the pod: not a mirror pod, not a DaemonSet's, not finished and not
// already being deleted.
func DrainEvicts(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror || p.DeletionTimestamp != nil {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return false
	}
	return true
}

// DrainRefuses says why a drain with these options refuses to delete the
// pod, as kubectl's drain does: a pod no controller manages needs force,
// a pod with emptyDir data needs deleteEmptyDirData. "" when it may.
func DrainRefuses(opts provisioningv1.DrainOptions, p *corev1.Pod) string {
	if !opts.Force && metav1.GetControllerOf(p) == nil {
		return "no controller manages it (drain option force is off)"
	}
	if !opts.DeleteEmptyDirData {
		for _, v := range p.Spec.Volumes {
			if v.EmptyDir != nil {
				return "it has local storage, emptyDir volume " + v.Name + " (drain option deleteEmptyDirData is off)"
			}
		}
	}
	return ""
}

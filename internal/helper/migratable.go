// Package helper holds the logic of the helper commands that run inside the
// upgrade's Jobs (vm-live-migrate-detector, restore-vm) and the rules they
// share with the manager.
package helper

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
)

// VMI eviction strategies KubeVirt does not evacuate by live migration.
const (
	evictionNone     = "None"
	evictionExternal = "External"
)

// NonMigratableVMI is a running VirtualMachineInstance that cannot be
// live-migrated off its node, and why.
type NonMigratableVMI struct {
	Namespace string
	Name      string
	// Node is the node the instance runs on.
	Node string
	// Reason says, for a human, why the instance cannot move.
	Reason string
}

// String is "namespace/name (reason)".
func (v NonMigratableVMI) String() string {
	return fmt.Sprintf("%s/%s (%s)", v.Namespace, v.Name, v.Reason)
}

// NonMigratableVMIs returns the instances among vmis that cannot be
// live-migrated to another node, sorted by namespace and name. An instance
// cannot move when it is pinned by a nodeSelector, passes host devices or
// GPUs through, has an eviction strategy KubeVirt does not evacuate (None,
// External), or has a required node affinity that no other usable node
// satisfies; and none can move when no other usable node exists at all.
// A usable node is Ready, schedulable (not cordoned) and not a witness node
// (witness nodes run no workloads). Instances that run nowhere (no node yet,
// or in a final phase) are left out: there is nothing to migrate.
func NonMigratableVMIs(vmis []kubevirtv1.VirtualMachineInstance, nodes []corev1.Node) []NonMigratableVMI {
	var usable []*corev1.Node
	for i := range nodes {
		if isMigrationTarget(&nodes[i]) {
			usable = append(usable, &nodes[i])
		}
	}
	var out []NonMigratableVMI
	for i := range vmis {
		vmi := &vmis[i]
		if !isRunningSomewhere(vmi) {
			continue
		}
		if reasons := nonMigratableReasons(vmi, usable); len(reasons) > 0 {
			out = append(out, NonMigratableVMI{
				Namespace: vmi.Namespace, Name: vmi.Name, Node: vmi.Status.NodeName,
				Reason: strings.Join(reasons, "; "),
			})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func isRunningSomewhere(vmi *kubevirtv1.VirtualMachineInstance) bool {
	phase := vmi.Status.Phase
	return vmi.Status.NodeName != "" && phase != cluster.VMIPhaseSucceeded && phase != cluster.VMIPhaseFailed
}

// isMigrationTarget reports whether KubeVirt could start a migration target
// on the node.
func isMigrationTarget(n *corev1.Node) bool {
	if cluster.IsWitness(n) || n.Spec.Unschedulable {
		return false
	}
	return cluster.NodeReady(n)
}

func nonMigratableReasons(vmi *kubevirtv1.VirtualMachineInstance, usable []*corev1.Node) []string {
	var reasons []string
	if len(vmi.Spec.NodeSelector) > 0 {
		reasons = append(reasons, "pinned by nodeSelector "+formatSelector(vmi.Spec.NodeSelector))
	}
	if devs := deviceNames(vmi.Spec.Domain.Devices.HostDevices); len(devs) > 0 {
		reasons = append(reasons, "passes through host devices "+strings.Join(devs, ", "))
	}
	if devs := deviceNames(vmi.Spec.Domain.Devices.GPUs); len(devs) > 0 {
		reasons = append(reasons, "passes through GPUs "+strings.Join(devs, ", "))
	}
	// KubeVirt's evacuation migrates only LiveMigrate and
	// LiveMigrateIfPossible instances (unset: the cluster's default); None
	// leaves the instance to be killed by the drain, External to a
	// controller Harvester does not run.
	switch es := vmi.Spec.EvictionStrategy; {
	case es == nil:
	case *es == evictionNone || *es == evictionExternal:
		reasons = append(reasons, "evictionStrategy "+*es+": KubeVirt does not live-migrate it off a draining node")
	}
	var others []*corev1.Node
	for _, n := range usable {
		if n.Name != vmi.Status.NodeName {
			others = append(others, n)
		}
	}
	switch {
	case len(others) == 0:
		reasons = append(reasons, "no other Ready, schedulable, non-witness node to migrate to")
	case !slices.ContainsFunc(others, func(n *corev1.Node) bool { return affinityAllows(vmi, n) }):
		reasons = append(reasons, "its required node affinity matches no other Ready, schedulable, non-witness node")
	}
	return reasons
}

// affinityAllows reports whether the instance's required node affinity, if
// any, lets it run on the node.
func affinityAllows(vmi *kubevirtv1.VirtualMachineInstance, n *corev1.Node) bool {
	required := requiredNodeAffinity(vmi)
	if required == nil {
		return true
	}
	ok, err := corev1helpers.MatchNodeSelectorTerms(n, required)
	return err == nil && ok
}

// MigrationTargets names the nodes, sorted, a running instance could be
// live-migrated to now: every other Ready, schedulable, non-witness node its
// nodeSelector and required node affinity allow. It knows what
// NonMigratableVMIs knows, nothing of CPU models, resources or taints.
func MigrationTargets(vmi *kubevirtv1.VirtualMachineInstance, nodes []corev1.Node) []string {
	var out []string
	for i := range nodes {
		n := &nodes[i]
		if n.Name == vmi.Status.NodeName || !isMigrationTarget(n) || !affinityAllows(vmi, n) {
			continue
		}
		if !labels.SelectorFromSet(vmi.Spec.NodeSelector).Matches(labels.Set(n.Labels)) {
			continue
		}
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out
}

func requiredNodeAffinity(vmi *kubevirtv1.VirtualMachineInstance) *corev1.NodeSelector {
	a := vmi.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return nil
	}
	return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
}

func deviceNames(devs []kubevirtv1.HostDevice) []string {
	names := make([]string, 0, len(devs))
	for _, d := range devs {
		names = append(names, d.DeviceName)
	}
	return names
}

func formatSelector(sel map[string]string) string {
	pairs := make([]string, 0, len(sel))
	for k, v := range sel {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

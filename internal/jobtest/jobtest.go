// Package jobtest builds, on a test API server, the objects the job
// commands work on (plans, nodes, VMs and their instances) as the manager,
// the kubelet and KubeVirt leave them, for the tests of the job commands.
package jobtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
)

var seq atomic.Int64

// Name returns a name unique in the test process, starting with prefix.
func Name(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

// Namespace creates a namespace with a unique name.
func Namespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Name("ns")}}
	must(t, c.Create(context.Background(), ns))
	return ns.Name
}

// Plan creates an UpgradePlan that upgrades from v1.7.1 to v1.8.0 and has
// recorded both in its status; change adjusts it before it is written.
func Plan(t testing.TB, c client.Client, change func(*v1beta1.UpgradePlan)) *v1beta1.UpgradePlan {
	t.Helper()
	ctx := context.Background()
	p := &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: Name("hvst-upgrade")},
		Spec:       v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
		Status: v1beta1.UpgradePlanStatus{
			PreviousVersion: ptr.To("v1.7.1"),
			ReleaseMetadata: &v1beta1.ReleaseMetadata{
				Harvester: "v1.8.0", OS: "Harvester v1.8.0", Kubernetes: "v1.35.2+rke2r1", MinUpgradableVersion: "v1.7.0",
			},
		},
	}
	if change != nil {
		change(p)
	}
	status := p.Status
	must(t, c.Create(ctx, p))
	p.Status = status
	must(t, c.Status().Update(ctx, p))
	return p
}

// NodeOpt adjusts a node.
type NodeOpt func(*corev1.Node)

// Witness makes a witness node.
func Witness(n *corev1.Node) { n.Labels[cluster.LabelWitnessNode] = "true" }

// Kubelet sets the version the node's kubelet reports.
func Kubelet(version string) NodeOpt {
	return func(n *corev1.Node) { n.Status.NodeInfo.KubeletVersion = version }
}

// Node creates a Ready, managed node.
func Node(t testing.TB, c client.Client, name string, opts ...NodeOpt) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		cluster.LabelManagedNode: "true", "kubernetes.io/hostname": name,
	}}}
	n.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.34.4+rke2r1", OSImage: "Harvester v1.7.1"},
	}
	for _, o := range opts {
		o(n)
	}
	status := n.Status
	must(t, c.Create(ctx, n))
	// The API server taints a new node not-ready; a Ready node has lost it.
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == corev1.TaintNodeNotReady })
	must(t, c.Update(ctx, n))
	n.Status = status
	must(t, c.Status().Update(ctx, n))
	return n
}

// VMOpt adjusts a VM and its instance.
type VMOpt func(*kubevirtv1.VirtualMachine, *kubevirtv1.VirtualMachineInstance)

// Pinned pins the VM to its node with a nodeSelector.
func Pinned(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) {
	vmi.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": vmi.Status.NodeName}
}

// HostDevice passes a PCI device through.
func HostDevice(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) {
	vmi.Spec.Domain.Devices.HostDevices = []kubevirtv1.HostDevice{{Name: "nic1", DeviceName: "intel.com/82599"}}
}

// Paused pauses the instance.
func Paused(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) {
	vmi.Status.Conditions = append(vmi.Status.Conditions, kubevirtv1.Condition{Type: cluster.ConditionPaused, Status: "True"})
}

// UpgradeRepo marks the VM as an upgrade repo VM of the V1 upgrade.
func UpgradeRepo(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) {
	vmi.Labels[cluster.LabelHarvesterUpgrade] = "old-upgrade"
}

// RunStrategy sets the VM's run strategy.
func RunStrategy(s string) VMOpt {
	return func(vm *kubevirtv1.VirtualMachine, _ *kubevirtv1.VirtualMachineInstance) {
		vm.Spec.RunStrategy = ptr.To(s)
	}
}

// Running uses the deprecated spec.running instead of a run strategy.
func Running(vm *kubevirtv1.VirtualMachine, _ *kubevirtv1.VirtualMachineInstance) {
	vm.Spec.RunStrategy, vm.Spec.Running = nil, ptr.To(true)
}

// VM creates a VirtualMachine (run strategy RerunOnFailure, as Harvester
// creates them) and its running instance on node.
func VM(t testing.TB, c client.Client, namespace, name, node string, opts ...VMOpt) types.NamespacedName {
	t.Helper()
	ctx := context.Background()
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(cluster.RunStrategyRerunOnFailure),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{cluster.LabelVMINodeName: node}},
		Spec:       kubevirtv1.VirtualMachineInstanceSpec{EvictionStrategy: ptr.To("LiveMigrateIfPossible")},
		Status: kubevirtv1.VirtualMachineInstanceStatus{NodeName: node, Phase: "Running",
			Conditions: []kubevirtv1.Condition{{Type: "Ready", Status: "True"}}},
	}
	for _, o := range opts {
		o(vm, vmi)
	}
	must(t, c.Create(ctx, vm))
	status := vmi.Status
	must(t, c.Create(ctx, vmi))
	vmi.Status = status
	must(t, cluster.UpdateStatus(ctx, c, vmi))
	return client.ObjectKeyFromObject(vm)
}

// GetVM reads a VirtualMachine.
func GetVM(t testing.TB, c client.Client, key types.NamespacedName) *kubevirtv1.VirtualMachine {
	t.Helper()
	vm := &kubevirtv1.VirtualMachine{}
	must(t, c.Get(context.Background(), key, vm))
	return vm
}

// RunStrategyOf returns a VM's spec.runStrategy ("" when unset).
func RunStrategyOf(t testing.TB, c client.Client, key types.NamespacedName) string {
	t.Helper()
	return ptr.Deref(GetVM(t, c, key).Spec.RunStrategy, "")
}

// Events returns the events recorded on the plan, oldest first, as
// "Type Reason source: message".
func Events(t testing.TB, c client.Client, plan string) []string {
	t.Helper()
	var list corev1.EventList
	must(t, c.List(context.Background(), &list, client.InNamespace(metav1.NamespaceDefault)))
	sorted := slices.Clone(list.Items)
	slices.SortStableFunc(sorted, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
	var out []string
	for _, e := range sorted {
		if e.InvolvedObject.Kind == "UpgradePlan" && e.InvolvedObject.Name == plan {
			out = append(out, fmt.Sprintf("%s %s %s: %s", e.Type, e.Reason, e.Source.Component, e.Message))
		}
	}
	return out
}

// Eventually polls cond until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

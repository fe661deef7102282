package helper

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
)

type nodeOpt func(*corev1.Node)

func node(name string, opts ...nodeOpt) corev1.Node {
	n := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
		}},
	}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func witness(n *corev1.Node)  { n.Labels[cluster.LabelWitnessNode] = "true" }
func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }
func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }
func zone(z string) nodeOpt   { return func(n *corev1.Node) { n.Labels["zone"] = z } }

type vmiOpt func(*kubevirtv1.VirtualMachineInstance)

func vmi(name, on string, opts ...vmiOpt) kubevirtv1.VirtualMachineInstance {
	v := kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Status:     kubevirtv1.VirtualMachineInstanceStatus{NodeName: on, Phase: "Running"},
	}
	for _, o := range opts {
		o(&v)
	}
	return v
}

func selector(k, v string) vmiOpt {
	return func(m *kubevirtv1.VirtualMachineInstance) { m.Spec.NodeSelector = map[string]string{k: v} }
}

func hostDevice(dev string) vmiOpt {
	return func(m *kubevirtv1.VirtualMachineInstance) {
		m.Spec.Domain.Devices.HostDevices = append(m.Spec.Domain.Devices.HostDevices, kubevirtv1.HostDevice{Name: "d", DeviceName: dev})
	}
}

func gpu(dev string) vmiOpt {
	return func(m *kubevirtv1.VirtualMachineInstance) {
		m.Spec.Domain.Devices.GPUs = append(m.Spec.Domain.Devices.GPUs, kubevirtv1.HostDevice{Name: "g", DeviceName: dev})
	}
}

func eviction(es string) vmiOpt {
	return func(m *kubevirtv1.VirtualMachineInstance) { m.Spec.EvictionStrategy = &es }
}

func phase(p string) vmiOpt { return func(m *kubevirtv1.VirtualMachineInstance) { m.Status.Phase = p } }

// requireNode adds a required node affinity term: key In values.
func requireNode(key string, values ...string) vmiOpt {
	return func(m *kubevirtv1.VirtualMachineInstance) {
		m.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}},
			}}},
		}}
	}
}

// preferNode adds only a preferred node affinity, which never blocks.
func preferNode(host string) vmiOpt {
	return func(m *kubevirtv1.VirtualMachineInstance) {
		m.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{host}}},
			}}},
		}}
	}
}

func TestNonMigratableVMIs(t *testing.T) {
	const noOther = "no other Ready, schedulable, non-witness node to migrate to"
	const affinity = "its required node affinity matches no other Ready, schedulable, non-witness node"
	three := []corev1.Node{node("n1"), node("n2"), node("n3")}
	tests := []struct {
		name  string
		vmis  []kubevirtv1.VirtualMachineInstance
		nodes []corev1.Node
		want  map[string]string // vmi name -> reason
	}{
		{"plain VM on three nodes moves", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1")}, three, nil},
		{"no VMs", nil, three, nil},
		{"nodeSelector pins", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", selector("kubernetes.io/hostname", "n1"))}, three,
			map[string]string{"a": "pinned by nodeSelector kubernetes.io/hostname=n1"}},
		{"any nodeSelector pins, even one other nodes match", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", selector("zone", "a"))}, three,
			map[string]string{"a": "pinned by nodeSelector zone=a"}},
		{"host device", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", hostDevice("nvidia.com/TU104GL"))}, three,
			map[string]string{"a": "passes through host devices nvidia.com/TU104GL"}},
		{"two host devices listed", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", hostDevice("usb/1"), hostDevice("usb/2"))}, three,
			map[string]string{"a": "passes through host devices usb/1, usb/2"}},
		{"GPU", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", gpu("nvidia.com/GRID_T4-1Q"))}, three,
			map[string]string{"a": "passes through GPUs nvidia.com/GRID_T4-1Q"}},
		{"several reasons are all given", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", selector("x", "y"), gpu("g1"))}, three,
			map[string]string{"a": "pinned by nodeSelector x=y; passes through GPUs g1"}},
		{"affinity to own node only", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", requireNode("kubernetes.io/hostname", "n1"))},
			[]corev1.Node{node("n1", hostname("n1")), node("n2", hostname("n2")), node("n3", hostname("n3"))},
			map[string]string{"a": affinity}},
		{"affinity allowing another node moves", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", requireNode("kubernetes.io/hostname", "n1", "n2"))},
			[]corev1.Node{node("n1", hostname("n1")), node("n2", hostname("n2")), node("n3", hostname("n3"))}, nil},
		{"affinity to a zone with a cordoned other node", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", requireNode("zone", "b"))},
			[]corev1.Node{node("n1", zone("b")), node("n2", zone("b"), cordoned), node("n3")},
			map[string]string{"a": affinity}},
		{"affinity to a zone whose other node is a witness", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", requireNode("zone", "b"))},
			[]corev1.Node{node("n1", zone("b")), node("n2", zone("b"), witness), node("n3")},
			map[string]string{"a": affinity}},
		{"affinity to a zone whose other node is not Ready", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", requireNode("zone", "b"))},
			[]corev1.Node{node("n1", zone("b")), node("n2", zone("b"), notReady), node("n3")},
			map[string]string{"a": affinity}},
		{"preferred affinity never blocks", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1", preferNode("n1"))}, three, nil},
		{"single node: everything stays", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1"), vmi("b", "n1")}, []corev1.Node{node("n1")},
			map[string]string{"a": noOther, "b": noOther}},
		{"one node plus witness counts as single", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1")}, []corev1.Node{node("n1"), node("w", witness)},
			map[string]string{"a": noOther}},
		{"other nodes cordoned", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1")}, []corev1.Node{node("n1"), node("n2", cordoned), node("n3", cordoned)},
			map[string]string{"a": noOther}},
		{"the own node being cordoned does not matter", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1")}, []corev1.Node{node("n1", cordoned), node("n2")}, nil},
		{"two nodes: each VM moves to the other", []kubevirtv1.VirtualMachineInstance{vmi("a", "n1"), vmi("b", "n2")}, []corev1.Node{node("n1"), node("n2")}, nil},
		{"finished and unscheduled instances are left out",
			[]kubevirtv1.VirtualMachineInstance{vmi("done", "n1", phase("Succeeded"), gpu("g")), vmi("failed", "n1", phase("Failed"), gpu("g")), vmi("pending", "", phase("Pending"), gpu("g"))},
			three, nil},
		{"evictionStrategy None or External stays; LiveMigrate, LiveMigrateIfPossible or unset moves",
			[]kubevirtv1.VirtualMachineInstance{vmi("none", "n1", eviction("None")), vmi("external", "n1", eviction("External")),
				vmi("live", "n1", eviction("LiveMigrate")), vmi("ifpossible", "n1", eviction("LiveMigrateIfPossible")), vmi("unset", "n1")}, three,
			map[string]string{"none": "evictionStrategy None: KubeVirt does not live-migrate it off a draining node",
				"external": "evictionStrategy External: KubeVirt does not live-migrate it off a draining node"}},
		{"only the pinned of several", []kubevirtv1.VirtualMachineInstance{vmi("free", "n1"), vmi("pinned", "n2", selector("k", "v")), vmi("free2", "n3")}, three,
			map[string]string{"pinned": "pinned by nodeSelector k=v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]string{}
			for _, v := range NonMigratableVMIs(tt.vmis, tt.nodes) {
				got[v.Name] = v.Reason
			}
			want := tt.want
			if want == nil {
				want = map[string]string{}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %v\nwant %v", got, want)
			}
		})
	}
}

func hostname(h string) nodeOpt {
	return func(n *corev1.Node) { n.Labels["kubernetes.io/hostname"] = h }
}

func TestNonMigratableVMIsSortedAndDescribed(t *testing.T) {
	vmis := []kubevirtv1.VirtualMachineInstance{vmi("b", "n1"), vmi("a", "n1")}
	vmis[0].Namespace = "z"
	got := NonMigratableVMIs(vmis, []corev1.Node{node("n1")})
	if len(got) != 2 || got[0].Name != "a" || got[1].Namespace != "z" {
		t.Fatalf("not sorted by namespace and name: %v", got)
	}
	if got[0].Node != "n1" {
		t.Errorf("node %q, want n1", got[0].Node)
	}
	if s := got[0].String(); s != "default/a (no other Ready, schedulable, non-witness node to migrate to)" {
		t.Errorf("String() = %q", s)
	}
}

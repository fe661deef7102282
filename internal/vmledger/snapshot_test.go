package vmledger

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
)

func TestSnapshot(t *testing.T) {
	node := func(name string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	}
	vm := func(name string) kubevirtv1.VirtualMachine {
		return kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	}
	vmi := func(name, node string, spec kubevirtv1.VirtualMachineInstanceSpec, conds ...kubevirtv1.Condition) kubevirtv1.VirtualMachineInstance {
		return kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("0a1b2c3d-4e5f-" + name)}, Spec: spec,
			Status: kubevirtv1.VirtualMachineInstanceStatus{NodeName: node, Phase: "Running", Conditions: conds}}
	}
	pinned := kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": "node-1"}}
	ended := vmi("ended", "node-2", kubevirtv1.VirtualMachineInstanceSpec{})
	ended.Status.Phase = cluster.VMIPhaseSucceeded
	l := Snapshot(t0.Add(500_000_000), []kubevirtv1.VirtualMachine{vm("web"), vm("pinned"), vm("paused"), vm("off"), vm("ended")},
		[]kubevirtv1.VirtualMachineInstance{
			vmi("web", "node-2", kubevirtv1.VirtualMachineInstanceSpec{}),
			vmi("pinned", "node-1", pinned),
			vmi("paused", "node-1", pinned, kubevirtv1.Condition{Type: cluster.ConditionPaused, Status: "True"}),
			ended,
		}, []corev1.Node{node("node-1"), node("node-2")}, true)
	if !l.Started.Equal(t0) {
		t.Errorf("started %v, want the second %v", l.Started, t0)
	}
	want := `default/ended node=- state=Stopped leave=none
default/off node=- state=Stopped leave=none
default/paused node=node-1 state=Paused leave=stop restore=true vmi=0a1b2c3d why="pinned by nodeSelector kubernetes.io/hostname=node-1; left running by the upgrade: paused"
default/pinned node=node-1 state=Running leave=stop restore=true vmi=0a1b2c3d why="pinned by nodeSelector kubernetes.io/hostname=node-1"
default/web node=node-2 state=Running leave=migrate vmi=0a1b2c3d
`
	if got := string(Format(l)); got != want {
		t.Errorf("Snapshot:\n%s\nwant\n%s", got, want)
	}
}

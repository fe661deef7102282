package sim

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// TestRealNodeJobs runs the toolkit's node jobs and restore-vm in-process
// on the simulated cluster: the real detector records and halts the pinned
// VM (remembering its run strategy), KubeVirt evacuates the rest, the real
// post-drain reboots the node into the new OS, and the real restore-vm
// brings the VM back with its own strategy.
func TestRealNodeJobs(t *testing.T) {
	cfg := Config{Nodes: 3, RealJobs: true}
	start(t, cfg)
	ctx := context.Background()
	plan := createPlan(t, "up1", cfg)
	repoObjects(t, plan.Name)

	waitJob(t, nodeJob(t, plan.Name, JobImagePreload, "node-1", false), batchv1.JobComplete)
	waitJob(t, nodeJob(t, plan.Name, JobPreDrain, "node-1", false), batchv1.JobComplete)
	cm := &corev1.ConfigMap{}
	get(t, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(plan.Name)}, cm)
	if cm.Data["node-1"] != "default/pinned-node-1-1" {
		t.Errorf("restore list %v", cm.Data)
	}
	vm := &kubevirtv1.VirtualMachine{}
	pinned := client.ObjectKey{Namespace: "default", Name: "pinned-node-1-1"}
	get(t, pinned, vm)
	if ptr.Deref(vm.Spec.RunStrategy, "") != runStrategyHalted || vm.Annotations[v1beta1.AnnotationRestoreRunStrategy] != runStrategyAlways {
		t.Errorf("pinned VM: runStrategy %v, annotations %v", vm.Spec.RunStrategy, vm.Annotations)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := env.Client.List(ctx, &vmis, client.MatchingLabels{cluster.LabelVMINodeName: "node-1"}); err != nil || len(vmis.Items) != 0 {
		t.Errorf("%d instances left on node-1 after pre-drain (%v)", len(vmis.Items), err)
	}

	// Between the hooks Rancher upgrades RKE2 on the node; post-drain waits
	// for the new kubelet.
	n := &corev1.Node{}
	get(t, client.ObjectKey{Name: "node-1"}, n)
	n.Status.NodeInfo.KubeletVersion = "v1.35.2+rke2r1"
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	post := nodeJob(t, plan.Name, JobPostDrain, "node-1", false)
	eventually(t, 20*time.Second, "node-1 to reboot into the new OS", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-1"}, n)
		return cluster.NodeReady(n) && n.Status.NodeInfo.OSImage == "Harvester v1.8.0", n.Status.NodeInfo.OSImage
	})
	waitJob(t, post, batchv1.JobComplete)
	if hasDrainTaint(n) {
		t.Errorf("node-1 is still tainted: %v", n.Spec.Taints)
	}

	waitJob(t, nodeJob(t, plan.Name, JobRestoreVM, "node-1", false), batchv1.JobComplete)
	get(t, pinned, vm)
	if ptr.Deref(vm.Spec.RunStrategy, "") != runStrategyAlways || vm.Annotations[v1beta1.AnnotationRestoreRunStrategy] != "" {
		t.Errorf("restored VM: runStrategy %v, annotations %v", vm.Spec.RunStrategy, vm.Annotations)
	}
	eventually(t, 10*time.Second, "the pinned VM to run again on node-1", func() (bool, string) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := env.Client.Get(ctx, pinned, vmi); err != nil {
			return false, err.Error()
		}
		return vmi.Status.NodeName == "node-1" && vmi.Status.Phase == vmiPhaseRunning, vmi.Status.NodeName
	})
	waitJob(t, nodeJob(t, plan.Name, JobImageCleanup, "node-1", false), batchv1.JobComplete)
}

func TestRealSingleNodeUpgradeJob(t *testing.T) {
	cfg := Config{Nodes: 1, RealJobs: true}
	start(t, cfg)
	plan := createPlan(t, "up1", cfg)
	repoObjects(t, plan.Name)
	waitJob(t, nodeJob(t, plan.Name, JobSingleNodeUpgrade, "node-1", false), batchv1.JobComplete)
	cm := &corev1.ConfigMap{}
	get(t, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(plan.Name)}, cm)
	if cm.Data["node-1"] != "default/vm-node-1-1,default/vm-node-1-2" {
		t.Errorf("single node: every VM is recorded for restore, got %q", cm.Data["node-1"])
	}
	n := &corev1.Node{}
	eventually(t, 20*time.Second, "the node to come back upgraded", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-1"}, n)
		return cluster.NodeReady(n) && n.Status.NodeInfo.OSImage == "Harvester v1.8.0", n.Status.NodeInfo.OSImage
	})
}

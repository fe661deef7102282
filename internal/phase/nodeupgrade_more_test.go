package phase_test

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

func TestPauseNodes(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(3)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"),
		NodeUpgradeOption: &v1beta1.NodeUpgradeOption{PauseNodes: []string{"node-2", "node-3"}}})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	p = h.WaitNodeState(p.Name, "node-2", v1beta1.NodeStateUpgradePaused)
	if st := p.Status.NodeUpgradeStatuses["node-2"]; st.Reason != v1beta1.ReasonAdministrativelyPaused {
		t.Errorf("paused node status %+v", st)
	}
	h.UpgradeNode(p.Name, "node-1")
	h.WaitProgressing(p.Name, "node upgrade paused: node-2, node-3")

	// Rancher reaches a paused node: nothing runs for it.
	pre := h.RancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	h.WaitProgressing(p.Name, "1 of 3 nodes upgraded")
	h.WholePass(p.Name)
	if !h.Absent(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2")}, &batchv1.Job{}) {
		t.Fatal("a paused node's pre-drain Job was started")
	}
	// Removing it from the list resumes it.
	h.SetPauseNodes(p.Name, "node-3")
	h.WaitNodeState(p.Name, "node-2", v1beta1.NodeStatePreDraining)
	h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2"), true)
	h.WaitAck("node-2", v1beta1.AnnotationPreHook, pre)
	h.WaitProgressing(p.Name, "node upgrade paused: node-3")
}

func TestPauseSingleNode(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(1)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), NodeUpgradeOption: &v1beta1.NodeUpgradeOption{PauseNodes: nodes}})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStateUpgradePaused)
	h.WaitProgressing(p.Name, "node upgrade paused: node-1")
	if !h.Absent(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(p.Name, v1beta1.JobTypeSingleNodeUpgrade, "node-1")}, &batchv1.Job{}) {
		t.Fatal("a paused single node was upgraded")
	}
	h.SetPauseNodes(p.Name)
	h.NodeJob(p.Name, v1beta1.JobTypeSingleNodeUpgrade, "node-1")
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStateSingleNodeUpgrading)
}

func TestRestoreVM(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(2)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), RestoreVM: ptr.To(true)})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	// The pre-drain work records the VMs it shuts down.
	h.Must(h.C.Create(h.Ctx(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(p.Name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1beta1.GroupVersion.String(), Kind: "UpgradePlan", Name: p.Name, UID: p.UID}}},
		Data: map[string]string{"node-1": "default/vm-a,default/vm-b", "node-2": "default/vm-c"},
	}))
	h.UpgradeNode(p.Name, "node-1")
	j := h.NodeJob(p.Name, v1beta1.JobTypeRestoreVM, "node-1")
	if got := strings.Join(j.Spec.Template.Spec.Containers[0].Command, " "); got != "upgrade-toolkit restore-vm --node node-1 --upgrade "+p.Name {
		t.Errorf("restore-vm command %q", got)
	}
	h.WaitEventually(p.Name, "node-1", "restoring the VMs shut down for the upgrade")
	// A failed restore is reported and does not hold up the next node.
	h.FinishJob(cluster.HarvesterNamespace, j.Name, false)
	h.WaitEvent(p.Name, "RestoreVMFailed: Restoring VMs on node node-1 failed")
	h.WaitEventually(p.Name, "node-1", "restoring the VMs failed")
	h.UpgradeNode(p.Name, "node-2")
	h.WaitProgressing(p.Name, "restoring VMs on node-2")
	h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(p.Name, v1beta1.JobTypeRestoreVM, "node-2"), true)
	h.WaitEventually(p.Name, "node-2", "restored the VMs")
	h.WaitPhase(p.Name, v1beta1.PhaseCleaningUp)
}

func TestNodeUpgradeFailures(t *testing.T) {
	tests := []struct {
		name   string
		nodes  int
		act    func(h *plantest.Harness, plan string)
		state  v1beta1.NodeUpgradeState
		want   string
		noAcks bool
	}{
		{name: "pre-drain Job fails", nodes: 3, state: v1beta1.NodeStatePreDrainFailed, noAcks: true,
			act: func(h *plantest.Harness, plan string) {
				h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
				h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypePreDrain, "node-1"), false)
			},
			want: "upgrading node node-1 failed in PreDrainFailed: Job harvester-system/" + "%s-node-upgrade-pre-drain-node-1 failed (BackoffLimitExceeded"},
		{name: "pre-drain Job whose pod was never placed fails at its deadline", nodes: 3, state: v1beta1.NodeStatePreDrainFailed, noAcks: true,
			act: func(h *plantest.Harness, plan string) {
				h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
				job := h.NodeJob(plan, v1beta1.JobTypePreDrain, "node-1")
				// The Job controller deleted the pod at the deadline: only
				// the scheduler's event says why it never ran.
				h.Must(h.C.Create(h.Ctx(), &corev1.Event{
					ObjectMeta:     metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x7k2p.1"},
					InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: job.Namespace, Name: job.Name + "-x7k2p"},
					Reason:         "FailedScheduling", Type: corev1.EventTypeWarning, LastTimestamp: metav1.Now(),
					Message: "0/3 nodes are available: 1 node(s) had untolerated taint {example.com/maintenance: disk}",
				}))
				h.FinishJob(cluster.HarvesterNamespace, job.Name, false)
			},
			want: "; its pod %s-node-upgrade-pre-drain-node-1-x7k2p cannot be scheduled on node node-1: 0/3 nodes are available: 1 node(s) had untolerated taint"},
		{name: "post-drain Job fails", nodes: 2, state: v1beta1.NodeStatePostDrainFailed,
			act: func(h *plantest.Harness, plan string) {
				pre := h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
				h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypePreDrain, "node-1"), true)
				h.WaitAck("node-1", v1beta1.AnnotationPreHook, pre)
				h.RancherAsks("node-1", cluster.AnnotationRancherPostDrain)
				h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypePostDrain, "node-1"), false)
			},
			want: "upgrading node node-1 failed in PostDrainFailed: Job harvester-system/%s-node-upgrade-post-drain-node-1 failed"},
		{name: "node never comes back", nodes: 2, state: v1beta1.NodeStatePostDrainFailed,
			act: func(h *plantest.Harness, plan string) {
				pre := h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
				h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypePreDrain, "node-1"), true)
				h.WaitAck("node-1", v1beta1.AnnotationPreHook, pre)
				h.RancherAsks("node-1", cluster.AnnotationRancherPostDrain)
				h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypePostDrain, "node-1"), true)
				h.WaitNodeState(plan, "node-1", v1beta1.NodeStateWaitingReboot)
				h.Clock.Step(h.Cfg.Deadlines.Reboot + time.Minute)
				h.Touch(plan)
			},
			want: `the node did not come back on the new OS in time: waiting for the node to reboot into "Harvester v1.8.0": it is Ready on "Harvester v1.7.1" with boot ID`},
		{name: "single-node Job fails", nodes: 1, state: v1beta1.NodeStateSingleNodeUpgradeFailed,
			act: func(h *plantest.Harness, plan string) {
				h.FinishJob(cluster.HarvesterNamespace, names.NodeJob(plan, v1beta1.JobTypeSingleNodeUpgrade, "node-1"), false)
			},
			want: "upgrading node node-1 failed in SingleNodeUpgradeFailed: Job harvester-system/%s-node-upgrade-single-node-upgrade-node-1 failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := plantest.New(t)
			nodes := h.Harvester(tt.nodes)
			p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
			p = h.DriveToNodeUpgrading(p.Name, nodes)
			tt.act(h, p.Name)
			p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
			if s := p.Status.NodeUpgradeStatuses["node-1"].State; s != tt.state {
				t.Errorf("node-1 in %s, want %s", s, tt.state)
			}
			want := tt.want
			if strings.Contains(want, "%s") {
				want = strings.ReplaceAll(want, "%s", p.Name)
			}
			if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, want) {
				t.Errorf("failure\n %q\ndoes not contain\n %q", c.Message, want)
			}
			if tt.noAcks {
				if a := h.MachinePlan("node-1").Annotations[v1beta1.AnnotationPreHook]; a != "" {
					t.Errorf("a failed pre-drain was acknowledged: %q", a)
				}
			}
			h.WaitCleanedUp(p.Name)
		})
	}
}

func TestDeleteRunningPlanCleansUp(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(2)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-1")
	h.Must(h.C.Delete(h.Ctx(), p))
	h.Eventually("the plan gone", func() (bool, string) {
		return h.Absent(client.ObjectKey{Name: p.Name}, &v1beta1.UpgradePlan{}), "still there"
	})
	h.AssertNothingLeft(p.Name)
	h.AssertRestored()
}

// TestCleanupWaitsForThePlansPods: a deleted plan is released only once its
// pods are gone. With the log capture off, nothing else would let a pod go
// that an earlier manager's capture held: the cleanup releases it.
func TestCleanupWaitsForThePlansPods(t *testing.T) {
	h := plantest.New(t)
	h.Harvester(1)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Paused: ptr.To(true)})
	h.WaitHeld(p.Name, "paused (spec.paused) before phase Initialize; set spec.paused to false to resume")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "held-" + p.Name,
			Labels:     map[string]string{v1beta1.LabelUpgradePlan: p.Name, batchv1.JobNameLabel: "gone"},
			Finalizers: []string{v1beta1.FinalizerLogCapture}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	h.Must(h.C.Create(h.Ctx(), pod))
	h.Must(h.C.Delete(h.Ctx(), h.Get(p.Name)))
	h.Eventually("the pod released", func() (bool, string) {
		h.Must(h.C.Get(h.Ctx(), client.ObjectKeyFromObject(pod), pod))
		return len(pod.Finalizers) == 0, "finalizers " + strings.Join(pod.Finalizers, ", ")
	})
	// The garbage collector would delete it with its Job; envtest has none.
	h.WholePass(p.Name)
	if h.Absent(client.ObjectKey{Name: p.Name}, &v1beta1.UpgradePlan{}) {
		t.Fatal("the plan was released while its pod was still there")
	}
	h.Must(h.C.Delete(h.Ctx(), pod))
	h.Eventually("the plan gone", func() (bool, string) {
		return h.Absent(client.ObjectKey{Name: p.Name}, &v1beta1.UpgradePlan{}), "still there"
	})
	h.AssertNothingLeft(p.Name)
}

package sim

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

func clusterUpgradeJob(t *testing.T, plan string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeJob(plan),
			Labels: map[string]string{v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: v1beta1.ComponentClusterUpgrade},
		},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "apply", Image: "rancher/harvester-upgrade-toolkit:v1.8.0", Command: []string{"upgrade-toolkit", "cluster-upgrade"},
				Env: []corev1.EnvVar{{Name: "HARVESTER_UPGRADEPLAN_NAME", Value: plan}},
			}},
		}}},
	}
	if err := env.Client.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	return job
}

func TestJobRunnerCompletesLikeTheJobController(t *testing.T) {
	cfg := Config{Nodes: 1, Timing: Timing{Jobs: map[string]time.Duration{JobClusterUpgrade: 200 * time.Millisecond}}}
	start(t, cfg)
	createPlan(t, "up1", cfg)
	job := clusterUpgradeJob(t, "up1")

	running := &batchv1.Job{}
	eventually(t, 10*time.Second, "the job to run", func() (bool, string) {
		get(t, client.ObjectKeyFromObject(job), running)
		return running.Status.Active == 1, ""
	})
	if running.Status.StartTime == nil || ptr.Deref(running.Status.Ready, 0) != 1 || len(running.Status.Conditions) != 0 {
		t.Errorf("running job status %+v", running.Status)
	}
	done := waitJob(t, job, batchv1.JobComplete)
	st := done.Status
	if st.Active != 0 || st.Succeeded != 1 || st.CompletionTime == nil || st.CompletionTime.Before(st.StartTime) ||
		!jobCondition(done, batchv1.JobSuccessCriteriaMet) || len(st.Conditions) != 2 {
		t.Errorf("complete job status %+v", st)
	}
	for _, c := range st.Conditions {
		if c.Reason != "CompletionsReached" || c.Message != "Reached expected number of succeeded pods" {
			t.Errorf("condition %+v", c)
		}
	}
	sv := &harvesterv1beta1.Setting{}
	get(t, client.ObjectKey{Name: cluster.ServerVersionSetting}, sv)
	if sv.Value != "v1.8.0" {
		t.Errorf("server-version is %q after the cluster upgrade, want v1.8.0", sv.Value)
	}
}

func TestJobRunnerFailsAndSuspends(t *testing.T) {
	cfg := Config{Nodes: 2, Faults: FaultSet{FailJobs: []JobFault{{Type: JobPreDrain, Node: "node-1", Message: "boom"}}}}
	s := start(t, cfg)
	createPlan(t, "up1", cfg)

	failed := waitJob(t, nodeJob(t, "up1", JobPreDrain, "node-1", false), batchv1.JobFailed)
	if !jobCondition(failed, batchv1.JobFailureTarget) || failed.Status.Failed == 0 || failed.Status.Active != 0 || failed.Status.CompletionTime != nil {
		t.Errorf("failed job status %+v", failed.Status)
	}
	for _, c := range failed.Status.Conditions {
		if c.Reason != reasonBackoffLimit {
			t.Errorf("condition %+v", c)
		}
	}
	// The injected fault replaced the work: node-1 was not tainted.
	n := &corev1.Node{}
	get(t, client.ObjectKey{Name: "node-1"}, n)
	if hasDrainTaint(n) {
		t.Error("a failed pre-drain job tainted its node")
	}

	// A suspended Job does not run; resumed, it does.
	s.SetFaults(FaultSet{})
	paused := nodeJob(t, "up1", JobPreDrain, "node-2", true)
	got := &batchv1.Job{}
	eventually(t, 10*time.Second, "the job to be suspended", func() (bool, string) {
		get(t, client.ObjectKeyFromObject(paused), got)
		return jobCondition(got, batchv1.JobSuspended), fmtConds(got)
	})
	if got.Status.StartTime != nil || got.Status.Active != 0 {
		t.Errorf("suspended job status %+v", got.Status)
	}
	got.Spec.Suspend = ptr.To(false)
	if err := env.Client.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	done := waitJob(t, paused, batchv1.JobComplete)
	for _, c := range done.Status.Conditions {
		if c.Type == batchv1.JobSuspended && (c.Status != corev1.ConditionFalse || c.Reason != "JobResumed") {
			t.Errorf("resumed job's Suspended condition %+v", c)
		}
	}
}

func TestJobWorkCanBeReplaced(t *testing.T) {
	seen := make(chan string, 1)
	cfg := Config{Nodes: 1, JobWork: map[string]JobWork{
		JobClusterUpgrade: func(_ context.Context, job *batchv1.Job) error {
			seen <- JobEnv(job)["HARVESTER_UPGRADEPLAN_NAME"]
			return errors.New("the real command failed")
		},
	}}
	start(t, cfg)
	createPlan(t, "up1", cfg)
	waitJob(t, clusterUpgradeJob(t, "up1"), batchv1.JobFailed)
	if got := <-seen; got != "up1" {
		t.Errorf("the work saw HARVESTER_UPGRADEPLAN_NAME=%q, want up1", got)
	}
	sv := &harvesterv1beta1.Setting{}
	get(t, client.ObjectKey{Name: cluster.ServerVersionSetting}, sv)
	if sv.Value != "v1.7.1" {
		t.Errorf("the replaced work still bumped server-version to %q", sv.Value)
	}
}

// TestNodeUpgradeJobs drives one node through pre-drain, post-drain and
// restore-vm as the toolkit would, and checks KubeVirt's evacuation, the
// reboot and Longhorn's reaction to it.
func TestNodeUpgradeJobs(t *testing.T) {
	cfg := Config{Nodes: 3, Timing: Timing{Reboot: 300 * time.Millisecond, ReplicaRebuild: 200 * time.Millisecond}}
	s := start(t, cfg)
	ctx := context.Background()
	plan := createPlan(t, "up1", cfg)
	// node-1 runs vm-node-1-1, vm-node-1-2 (migratable) and pinned-node-1-1 (nodeSelector).
	pre := waitJob(t, nodeJob(t, plan.Name, JobPreDrain, "node-1", false), batchv1.JobComplete)

	cm := &corev1.ConfigMap{}
	get(t, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(plan.Name)}, cm)
	if cm.Data["node-1"] != "default/pinned-node-1-1" || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != plan.UID {
		t.Errorf("restore-vm ConfigMap %v owners %v", cm.Data, cm.OwnerReferences)
	}
	vm := &kubevirtv1.VirtualMachine{}
	get(t, client.ObjectKey{Namespace: "default", Name: "pinned-node-1-1"}, vm)
	if ptr.Deref(vm.Spec.RunStrategy, "") != runStrategyHalted || vm.Status.PrintableStatus != "Stopped" {
		t.Errorf("pinned VM: runStrategy %v status %+v", vm.Spec.RunStrategy, vm.Status)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := env.Client.List(ctx, &vmis, client.MatchingLabels{cluster.LabelVMINodeName: "node-1"}); err != nil || len(vmis.Items) != 0 {
		t.Errorf("%d instances left on node-1 after pre-drain (%v)", len(vmis.Items), err)
	}
	for _, name := range []string{"vm-node-1-1", "vm-node-1-2"} {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		get(t, client.ObjectKey{Namespace: "default", Name: name}, vmi)
		if vmi.Status.NodeName == "node-1" || vmi.Status.NodeName == "" || vmi.Labels[cluster.LabelVMINodeName] != vmi.Status.NodeName {
			t.Errorf("instance %s did not migrate: node %q label %q", name, vmi.Status.NodeName, vmi.Labels[cluster.LabelVMINodeName])
		}
	}
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := env.Client.List(ctx, &migs); err != nil || len(migs.Items) != 2 {
		t.Fatalf("%d migrations (%v), want 2", len(migs.Items), err)
	}
	for _, m := range migs.Items {
		if !strings.HasPrefix(m.Name, evacuationPrefix) || m.Status.Phase != migrationSucceeded || m.Annotations[annotationEvacuationMigration] != "node-1" {
			t.Errorf("migration %s: %+v %v", m.Name, m.Status, m.Annotations)
		}
	}
	n := &corev1.Node{}
	get(t, client.ObjectKey{Name: "node-1"}, n)
	if !hasDrainTaint(n) {
		t.Error("node-1 is not tainted kubevirt.io/drain after pre-drain")
	}
	if !pre.Status.CompletionTime.After(pre.Status.StartTime.Add(-time.Second)) {
		t.Errorf("pre-drain times %v %v", pre.Status.StartTime, pre.Status.CompletionTime)
	}

	// post-drain: the taint goes, the Job completes, then the node reboots
	// into the new OS and its volumes degrade and heal.
	var sawDown bool
	var sawDegraded atomic.Bool
	inf, err := s.Informers().GetInformer(ctx, &longhornv1beta2.Volume{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(handlerFuncs(func(o any) {
		if v, ok := o.(*longhornv1beta2.Volume); ok && v.Status.Robustness == robustnessDegraded {
			sawDegraded.Store(true)
		}
	})); err != nil {
		t.Fatal(err)
	}
	post := nodeJob(t, plan.Name, JobPostDrain, "node-1", false)
	eventually(t, 20*time.Second, "node-1 to reboot into the new OS", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-1"}, n)
		if !nodeReady(n) {
			sawDown = true
		}
		return nodeReady(n) && n.Status.NodeInfo.OSImage == "Harvester v1.8.0" && n.Annotations[annotationReboot] == "", n.Status.NodeInfo.OSImage
	})
	if !sawDown {
		t.Error("node-1 never went NotReady while rebooting")
	}
	waitJob(t, post, batchv1.JobComplete)
	if hasDrainTaint(n) || n.Status.NodeInfo.KubeletVersion != "v1.35.2+rke2r1" {
		t.Errorf("rebooted node: taints %v kubelet %q annotations %v", n.Spec.Taints, n.Status.NodeInfo.KubeletVersion, n.Annotations)
	}
	eventually(t, 10*time.Second, "the volumes to heal", func() (bool, string) {
		var vols longhornv1beta2.VolumeList
		if err := env.Client.List(ctx, &vols); err != nil {
			return false, err.Error()
		}
		for _, v := range vols.Items {
			if v.Status.Robustness != robustnessHealthy {
				return false, v.Name + " " + v.Status.Robustness
			}
		}
		return true, ""
	})
	if !sawDegraded.Load() {
		t.Error("no volume degraded while node-1 rebooted")
	}

	// restore-vm starts the recorded VM again.
	waitJob(t, nodeJob(t, plan.Name, JobRestoreVM, "node-1", false), batchv1.JobComplete)
	eventually(t, 10*time.Second, "the pinned VM to run again on node-1", func() (bool, string) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "pinned-node-1-1"}, vmi); err != nil {
			return false, err.Error()
		}
		return vmi.Status.NodeName == "node-1" && vmi.Status.Phase == vmiPhaseRunning, vmi.Status.NodeName
	})
}

func TestSingleNodeUpgradeJob(t *testing.T) {
	cfg := Config{Nodes: 1}
	start(t, cfg)
	plan := createPlan(t, "up1", cfg)
	job := waitJob(t, nodeJob(t, plan.Name, JobSingleNodeUpgrade, "node-1", false), batchv1.JobComplete)

	cm := &corev1.ConfigMap{}
	get(t, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(plan.Name)}, cm)
	if cm.Data["node-1"] != "default/vm-node-1-1,default/vm-node-1-2" {
		t.Errorf("single node: every VM is recorded for restore, got %q", cm.Data["node-1"])
	}
	cl := &provisioningv1.Cluster{}
	get(t, localClusterKey, cl)
	if cl.Spec.KubernetesVersion != "v1.35.2+rke2r1" {
		t.Errorf("cluster version %q", cl.Spec.KubernetesVersion)
	}
	n := &corev1.Node{}
	eventually(t, 10*time.Second, "the node to come back upgraded", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-1"}, n)
		return nodeReady(n) && n.Status.NodeInfo.OSImage == "Harvester v1.8.0", n.Status.NodeInfo.OSImage
	})
	if n.Status.NodeInfo.KubeletVersion != "v1.35.2+rke2r1" || job.Status.Succeeded != 1 {
		t.Errorf("kubelet %q", n.Status.NodeInfo.KubeletVersion)
	}
}

func TestNodeThatNeverComesBack(t *testing.T) {
	cfg := Config{Nodes: 2, Faults: FaultSet{NeverReturn: []string{"node-2"}}}
	s := start(t, cfg)
	plan := createPlan(t, "up1", cfg)
	waitJob(t, nodeJob(t, plan.Name, JobPostDrain, "node-2", false), batchv1.JobComplete)
	n := &corev1.Node{}
	eventually(t, 10*time.Second, "node-2 to go down", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-2"}, n)
		return !nodeReady(n), ""
	})
	time.Sleep(300 * time.Millisecond)
	get(t, client.ObjectKey{Name: "node-2"}, n)
	if nodeReady(n) || n.Status.NodeInfo.OSImage != "Harvester v1.7.1" {
		t.Fatalf("node-2 came back: ready=%v osImage %q", nodeReady(n), n.Status.NodeInfo.OSImage)
	}
	// Lifting the fault lets it boot.
	s.SetFaults(FaultSet{})
	eventually(t, 10*time.Second, "node-2 to come back", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-2"}, n)
		return nodeReady(n) && n.Status.NodeInfo.OSImage == "Harvester v1.8.0", ""
	})
}

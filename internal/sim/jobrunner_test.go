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
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

func clusterUpgradeJob(t *testing.T, plan string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeJob(plan),
			Labels: map[string]string{v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: v1beta1.ComponentClusterUpgrade},
		},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1beta1.LabelUpgradePlan: plan, v1beta1.LabelUpgradeComponent: v1beta1.ComponentClusterUpgrade}},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, ServiceAccountName: harvesterServiceAccount,
				Containers: []corev1.Container{{
					Name: "apply", Image: "rancher/harvester-upgrade-toolkit:v1.7.1", Command: []string{"upgrade-toolkit", "cluster-upgrade"},
					Env: []corev1.EnvVar{{Name: "HARVESTER_UPGRADEPLAN_NAME", Value: plan}},
				}},
			},
		}},
	}
	if err := env.Client.Create(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	return job
}

// jobPod returns the pod of the Job, once there is one.
func jobPod(t *testing.T, job *batchv1.Job) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 20*time.Second, "a pod of Job "+job.Name, func() (bool, string) {
		var pods corev1.PodList
		if err := env.Client.List(context.Background(), &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil || len(pods.Items) == 0 {
			return false, ""
		}
		pod = &pods.Items[0]
		return true, ""
	})
	return pod
}

// TestJobsRunThroughTheRealParts: the real Job controller creates the pod,
// the real scheduler places it, kwok runs it, the simulator runs the job's
// work (the toolkit's own cluster upgrade) and ends the container, and the real Job controller completes the
// Job from the pod's exit code.
func TestJobsRunThroughTheRealParts(t *testing.T) {
	// The node has the new release's images, as after the image preload:
	// the upgraded components' pods start.
	cfg := Config{Nodes: 1, Timing: Timing{Jobs: map[string]time.Duration{JobClusterUpgrade: 200 * time.Millisecond}}, NodeImages: releasetest.New().CurrentImages()}
	start(t, cfg)
	createPlan(t, "up1", cfg)
	repoObjects(t, "up1")
	job := clusterUpgradeJob(t, "up1")

	done := waitJob(t, job, batchv1.JobComplete)
	if st := done.Status; st.Succeeded != 1 || st.Failed != 0 || st.CompletionTime == nil {
		t.Errorf("complete job status %+v", st)
	}
	pod := jobPod(t, job)
	if pod.Spec.NodeName != "node-1" || pod.Status.Phase != corev1.PodSucceeded || pod.Annotations[testenv.AnnotationExitCode] != "0" {
		t.Errorf("pod %s on %q in %s, exit code %q", pod.Name, pod.Spec.NodeName, pod.Status.Phase, pod.Annotations[testenv.AnnotationExitCode])
	}
	sv := &harvesterv1beta1.Setting{}
	get(t, client.ObjectKey{Name: cluster.ServerVersionSetting}, sv)
	if sv.Value != "v1.8.0" {
		t.Errorf("server-version is %q after the cluster upgrade, want v1.8.0", sv.Value)
	}
}

// TestFailedWorkFailsTheJob: a failing job's container exits 1 with its
// error as termination message, and the real Job controller fails the Job
// at its backoff limit.
func TestFailedWorkFailsTheJob(t *testing.T) {
	cfg := Config{Nodes: 2, Faults: FaultSet{FailJobs: []JobFault{{Type: JobPreDrain, Node: "node-1", Message: "boom"}}}}
	start(t, cfg)
	createPlan(t, "up1", cfg)

	job := nodeJob(t, "up1", JobPreDrain, "node-1", false)
	failed := waitJob(t, job, batchv1.JobFailed)
	for _, c := range failed.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Reason != batchv1.JobReasonBackoffLimitExceeded {
			t.Errorf("condition %+v", c)
		}
	}
	pod := jobPod(t, job)
	if cs := pod.Status.ContainerStatuses; pod.Status.Phase != corev1.PodFailed || len(cs) != 1 || cs[0].State.Terminated == nil ||
		cs[0].State.Terminated.ExitCode != 1 || !strings.Contains(cs[0].State.Terminated.Message, "boom") {
		t.Errorf("pod %s in %s, containers %+v", pod.Name, pod.Status.Phase, cs)
	}
	// The injected fault replaced the work: node-1 was not tainted.
	n := &corev1.Node{}
	get(t, client.ObjectKey{Name: "node-1"}, n)
	if hasDrainTaint(n) {
		t.Error("a failed pre-drain job tainted its node")
	}
}

func TestJobWorkCanBeReplaced(t *testing.T) {
	seen := make(chan string, 1)
	cfg := Config{Nodes: 1, JobWork: map[string]JobWork{
		JobClusterUpgrade: func(_ context.Context, pod *corev1.Pod) error {
			seen <- JobEnv(pod)["HARVESTER_UPGRADEPLAN_NAME"]
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

// rke2Upgraded plays Rancher upgrading RKE2 on the node between the drain
// hooks: the node's kubelet runs the plan's Kubernetes version, which
// post-drain waits for.
func rke2Upgraded(t *testing.T, s *Sim, plan *v1beta1.UpgradePlan, node string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := s.mutate(context.Background(), n, true, func() bool {
		n.Status.NodeInfo.KubeletVersion = release.KubeletVersionOf(plan.Status.ReleaseMetadata.Kubernetes)
		return true
	}); err != nil {
		t.Fatal(err)
	}
}

// TestNodeUpgradeJobs drives one node through the toolkit's own image
// preload, pre-drain, post-drain, restore-vm and image cleanup as the
// toolkit would, and checks the real detector's record of the VM that
// cannot migrate, KubeVirt's evacuation, the reboot and Longhorn's reaction
// to it, and the real restore-vm bringing the VM back with its own run
// strategy.
func TestNodeUpgradeJobs(t *testing.T) {
	cfg := Config{Nodes: 3, Timing: Timing{Reboot: 300 * time.Millisecond, ReplicaRebuild: 200 * time.Millisecond}}
	s := start(t, cfg)
	ctx := context.Background()
	plan := createPlan(t, "up1", cfg)
	repoObjects(t, plan.Name)
	waitJob(t, nodeJob(t, plan.Name, JobImagePreload, "node-1", false), batchv1.JobComplete)
	// node-1 runs vm-node-1-1, vm-node-1-2 (migratable) and pinned-node-1-1 (nodeSelector).
	pre := waitJob(t, nodeJob(t, plan.Name, JobPreDrain, "node-1", false), batchv1.JobComplete)

	cm := &corev1.ConfigMap{}
	get(t, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(plan.Name)}, cm)
	if cm.Data["node-1"] != "default/pinned-node-1-1" || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != plan.UID {
		t.Errorf("restore-vm ConfigMap %v owners %v", cm.Data, cm.OwnerReferences)
	}
	vm := &kubevirtv1.VirtualMachine{}
	pinned := client.ObjectKey{Namespace: "default", Name: "pinned-node-1-1"}
	get(t, pinned, vm)
	if ptr.Deref(vm.Spec.RunStrategy, "") != runStrategyHalted || vm.Status.PrintableStatus != "Stopped" ||
		vm.Annotations[v1beta1.AnnotationRestoreRunStrategy] != runStrategyAlways {
		t.Errorf("pinned VM: runStrategy %v status %+v annotations %v", vm.Spec.RunStrategy, vm.Status, vm.Annotations)
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

	// post-drain: once RKE2 runs the new version, the taint goes, the Job
	// completes, then the node reboots into the new OS and its volumes
	// degrade and heal.
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
	rke2Upgraded(t, s, plan, "node-1")
	post := nodeJob(t, plan.Name, JobPostDrain, "node-1", false)
	eventually(t, 20*time.Second, "node-1 to reboot into the new OS", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-1"}, n)
		if !cluster.NodeReady(n) {
			sawDown = true
		}
		return cluster.NodeReady(n) && n.Status.NodeInfo.OSImage == "Harvester v1.8.0" && n.Annotations[AnnotationReboot] == "", n.Status.NodeInfo.OSImage
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

	// restore-vm starts the recorded VM again, with its own run strategy.
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

// TestSingleNodeUpgradeJob runs the toolkit's own single-node-upgrade: every
// VM recorded and stopped, Rancher moved to the new Kubernetes version, the
// node rebooted into the new OS.
func TestSingleNodeUpgradeJob(t *testing.T) {
	cfg := Config{Nodes: 1}
	start(t, cfg)
	plan := createPlan(t, "up1", cfg)
	repoObjects(t, plan.Name)
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
	eventually(t, 20*time.Second, "the node to come back upgraded", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-1"}, n)
		return cluster.NodeReady(n) && n.Status.NodeInfo.OSImage == "Harvester v1.8.0", n.Status.NodeInfo.OSImage
	})
	if n.Status.NodeInfo.KubeletVersion != "v1.35.2+rke2r1" || job.Status.Succeeded != 1 {
		t.Errorf("kubelet %q", n.Status.NodeInfo.KubeletVersion)
	}
}

func TestNodeThatNeverComesBack(t *testing.T) {
	cfg := Config{Nodes: 2, Faults: FaultSet{NeverReturn: []string{"node-2"}}}
	s := start(t, cfg)
	plan := createPlan(t, "up1", cfg)
	repoObjects(t, plan.Name)
	rke2Upgraded(t, s, plan, "node-2")
	waitJob(t, nodeJob(t, plan.Name, JobPostDrain, "node-2", false), batchv1.JobComplete)
	n := &corev1.Node{}
	eventually(t, 10*time.Second, "node-2 to go down", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-2"}, n)
		return !cluster.NodeReady(n), ""
	})
	agentPassed(t, "node-2")
	get(t, client.ObjectKey{Name: "node-2"}, n)
	if cluster.NodeReady(n) || n.Status.NodeInfo.OSImage != "Harvester v1.7.1" {
		t.Fatalf("node-2 came back: ready=%v osImage %q", cluster.NodeReady(n), n.Status.NodeInfo.OSImage)
	}
	// Lifting the fault lets it boot.
	s.SetFaults(FaultSet{})
	eventually(t, 10*time.Second, "node-2 to come back", func() (bool, string) {
		get(t, client.ObjectKey{Name: "node-2"}, n)
		return cluster.NodeReady(n) && n.Status.NodeInfo.OSImage == "Harvester v1.8.0", ""
	})
}

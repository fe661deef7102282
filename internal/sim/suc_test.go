package sim

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
)

func TestSafeConcatName(t *testing.T) {
	if got := safeConcatName("apply", "p", "on", "n", "with", "h"); got != "apply-p-on-n-with-h" {
		t.Errorf("short name: %q", got)
	}
	long := safeConcatName("apply", "hvst-upgrade-abcde-image-preload", "on", "node-1", "with", strings.Repeat("f", 56))
	if len(long) != 63 || !strings.HasPrefix(long, "apply-hvst-upgrade-abcde-image-preload-on-node-1-with-fff") {
		t.Errorf("long name %q (%d characters): want 57 characters, '-' and a 5-character hash", long, len(long))
	}
	if a, b := safeConcatName(strings.Repeat("a", 70)), safeConcatName(strings.Repeat("a", 71)); a == b {
		t.Errorf("distinct long names collide: %q", a)
	}
	if got := withTag("rancher/harvester-upgrade-toolkit", "v1.8.0"); got != "rancher/harvester-upgrade-toolkit:v1.8.0" {
		t.Errorf("withTag untagged: %q", got)
	}
	if got := withTag("registry:5000/toolkit:dev", "v1.8.0"); got != "registry:5000/toolkit:dev" {
		t.Errorf("withTag tagged: %q", got)
	}
}

// sucPlan creates a SUC Plan as the ImagePreload and ImageCleanup phases do.
func sucPlan(t *testing.T, upgradePlan, component string, concurrency int64) *upgradev1.Plan {
	t.Helper()
	p := &upgradev1.Plan{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.CattleNamespace, Name: upgradePlan + "-" + component,
			Labels: map[string]string{v1beta1.LabelUpgradePlan: upgradePlan, v1beta1.LabelUpgradeComponent: component, "upgrade.cattle.io/ignored": "x"},
		},
		Spec: upgradev1.PlanSpec{
			Concurrency:        concurrency,
			NodeSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelManagedNode: "true"}},
			ServiceAccountName: "system-upgrade-controller",
			Version:            "v1.7.1",
			Upgrade: &upgradev1.ContainerSpec{
				Image: "rancher/harvester-upgrade-toolkit", Command: []string{"upgrade-toolkit"}, Args: []string{"node", "prepare"},
				Envs: []corev1.EnvVar{{Name: "HARVESTER_UPGRADEPLAN_NAME", Value: upgradePlan}},
			},
		},
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSUCRunsOneJobPerNodeWithinConcurrency(t *testing.T) {
	cfg := Config{Nodes: 3, Timing: Timing{Jobs: map[string]time.Duration{JobImagePreload: 100 * time.Millisecond}}}
	s := start(t, cfg)
	ctx := context.Background()
	// The Jobs run the toolkit's own image preload, which reads the plan and
	// the repo.
	createPlan(t, "up1", cfg)
	repoObjects(t, "up1")

	// Watch the Jobs from the simulator's informers: at most one may run at a time.
	var mu sync.Mutex
	running := map[string]bool{}
	maxRunning := 0
	inf, err := s.Informers().GetInformer(ctx, &batchv1.Job{})
	if err != nil {
		t.Fatal(err)
	}
	track := func(obj any) {
		job, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		running[job.Name] = job.Status.Active > 0
		n := 0
		for _, r := range running {
			if r {
				n++
			}
		}
		maxRunning = max(maxRunning, n)
	}
	if _, err := inf.AddEventHandler(handlerFuncs(track)); err != nil {
		t.Fatal(err)
	}

	plan := sucPlan(t, "up1", v1beta1.ComponentImagePreload, 1)
	got := &upgradev1.Plan{}
	eventually(t, 20*time.Second, "the plan to complete", func() (bool, string) {
		get(t, client.ObjectKeyFromObject(plan), got)
		return common.IsTrue(got.Status.Conditions, sucCondComplete), ""
	})
	if got.Status.LatestVersion != "v1.7.1" || len(got.Status.LatestHash) != 56 || len(got.Status.Applying) != 0 ||
		!common.IsTrue(got.Status.Conditions, sucCondValidated) || !common.IsTrue(got.Status.Conditions, sucCondLatestResolved) {
		t.Errorf("plan status %+v", got.Status)
	}
	mu.Lock()
	if maxRunning != 1 {
		t.Errorf("%d Jobs ran at once with concurrency 1", maxRunning)
	}
	mu.Unlock()

	var jobs batchv1.JobList
	if err := env.Client.List(ctx, &jobs, client.InNamespace(cluster.CattleNamespace)); err != nil || len(jobs.Items) != 3 {
		t.Fatalf("%d jobs (%v), want one per node", len(jobs.Items), err)
	}
	for _, job := range jobs.Items {
		node := job.Labels[cluster.LabelSUCNode]
		if want := safeConcatName("apply", plan.Name, "on", node, "with", got.Status.LatestHash); job.Name != want {
			t.Errorf("job name %q, want %q", job.Name, want)
		}
		for k, v := range map[string]string{
			cluster.LabelSUCPlan: plan.Name, labelSUCController: sucControllerName, labelSUCVersion: "v1.7.1",
			cluster.LabelSUCPlanNode(plan.Name): got.Status.LatestHash,
			v1beta1.LabelUpgradePlan:            "up1", v1beta1.LabelUpgradeComponent: v1beta1.ComponentImagePreload,
		} {
			if job.Labels[k] != v {
				t.Errorf("job %s label %s=%q, want %q", job.Name, k, job.Labels[k], v)
			}
		}
		if _, ok := job.Labels["upgrade.cattle.io/ignored"]; ok {
			t.Errorf("job %s copied a cattle.io/ label of the Plan", job.Name)
		}
		pod := jobPod(t, &job)
		if c := pod.Spec.Containers[0]; c.Image != "rancher/harvester-upgrade-toolkit:v1.7.1" || JobEnv(pod)["SYSTEM_UPGRADE_NODE_NAME"] != node || JobEnv(pod)["HARVESTER_UPGRADEPLAN_NAME"] != "up1" {
			t.Errorf("job %s container %s env %v", job.Name, c.Image, JobEnv(pod))
		}
		if pod.Spec.NodeName != node {
			t.Errorf("the scheduler placed job %s's pod on %q, want %s", job.Name, pod.Spec.NodeName, node)
		}
		if !jobCondition(&job, batchv1.JobComplete) {
			t.Errorf("job %s did not complete: %s", job.Name, fmtConds(&job))
		}
		n := &corev1.Node{}
		get(t, client.ObjectKey{Name: node}, n)
		if n.Labels[cluster.LabelSUCPlanNode(plan.Name)] != got.Status.LatestHash {
			t.Errorf("node %s not labelled as applied: %v", node, n.Labels)
		}
	}

	// SUC deletes the Jobs of a deleted Plan.
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the plan's jobs to go", func() (bool, string) {
		err := env.Client.List(ctx, &jobs, client.InNamespace(cluster.CattleNamespace))
		return err == nil && len(jobs.Items) == 0, ""
	})
}

func TestSUCReportsAFailedJob(t *testing.T) {
	cfg := Config{Nodes: 2, Faults: FaultSet{FailJobs: []JobFault{{Type: JobImageCleanup, Node: "node-2"}}}}
	start(t, cfg)
	// node-1 runs the toolkit's own image cleanup, which reads the plan and
	// the repo.
	createPlan(t, "up1", cfg)
	repoObjects(t, "up1")
	plan := sucPlan(t, "up1", v1beta1.ComponentImageCleanup, 2)
	got := &upgradev1.Plan{}
	// SUC's backoff limit of 2 and the real Job controller's backoff (10 s,
	// then 20 s) before the Job fails.
	eventually(t, 90*time.Second, "the plan to report the failure", func() (bool, string) {
		get(t, client.ObjectKeyFromObject(plan), got)
		c := common.FindCondition(got.Status.Conditions, sucCondComplete)
		return c != nil && c.Reason == "JobFailed" && len(got.Status.Applying) == 1, strings.Join(got.Status.Applying, ",")
	})
	c := common.FindCondition(got.Status.Conditions, sucCondComplete)
	if c.Status != "False" || !strings.Contains(c.Message, "failed on Node node-2: BackoffLimitExceeded: Job has reached the specified backoff limit") {
		t.Errorf("Complete condition %+v", c)
	}
	if strings.Join(got.Status.Applying, ",") != "node-2" {
		t.Errorf("applying %v: the failed node stays applying, the other is done", got.Status.Applying)
	}
}

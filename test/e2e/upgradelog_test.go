package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/rbactest"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/upgradelog"
)

// reaper deletes every finished pod of the upgrade at once, as a Job's TTL
// of 0 would, after noting what its container wrote (the simulated
// kubelet's log, which goes with the pod object). It also notes every pod
// that ever carried the capture's finalizer.
type reaper struct {
	mu    sync.Mutex
	wrote map[string]string // namespace/pod -> the whole log
	jobs  map[string]bool   // namespace/job
	held  map[string]bool   // pods seen with the capture's finalizer
	// capturing: the capture runs, so a pod it does not make is deleted
	// once it holds it.
	capturing bool
	stop      context.CancelFunc
	done      chan struct{}
}

func startReaper(run *simrun.Run, capturing bool) *reaper {
	ctx, cancel := context.WithCancel(context.Background())
	r := &reaper{wrote: map[string]string{}, jobs: map[string]bool{}, held: map[string]bool{}, capturing: capturing, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			r.pass(ctx, run)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return r
}

func (r *reaper) pass(ctx context.Context, run *simrun.Run) {
	for _, ns := range upgradelog.Namespaces {
		pods := &corev1.PodList{}
		if err := run.Client.List(ctx, pods, client.InNamespace(ns), client.HasLabels{v1beta1.LabelUpgradePlan, batchv1.JobNameLabel}); err != nil {
			continue
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			key := ns + "/" + p.Name
			r.mu.Lock()
			r.jobs[ns+"/"+p.Labels[batchv1.JobNameLabel]] = true
			if slices.Contains(p.Finalizers, v1beta1.FinalizerLogCapture) {
				r.held[key] = true
			}
			_, noted := r.wrote[key]
			r.mu.Unlock()
			if noted || p.DeletionTimestamp != nil || (p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed) {
				continue
			}
			if ns == cluster.CattleNamespace && !slices.Contains(p.Finalizers, v1beta1.FinalizerLogCapture) && r.capturing {
				// A system-upgrade-controller pod is held from when the
				// capture first sees it; one that ran while the manager
				// was down and is deleted before it is back is gone from
				// the API server, and so is its log. (SUC's Jobs keep
				// their pods 900 s, its default TTL.)
				continue
			}
			text, ok := run.Sim.PodLog(ns, p.Name)
			if !ok {
				continue
			}
			r.mu.Lock()
			r.wrote[key] = text
			r.mu.Unlock()
			_ = run.Client.Delete(ctx, p)
		}
	}
}

func (r *reaper) finish() {
	r.stop()
	<-r.done
}

// TestUpgradeLogKeepsEveryJobsLog runs a 2-node upgrade whose finished pods
// are deleted at once (as a TTL of 0 would), and stops the manager in the
// middle of a system-upgrade-controller Job (image preload) and of one of
// its own Jobs (pre-drain) until that Job's pod finished and was deleted.
// It checks that the plan's UpgradeLog holds every pod's whole log, byte
// for byte, that no pod is held once its log is kept, that `logs --archive`
// writes every part of the bundle and no Secret value, and that the logs go
// with the plan.
//
// The manager runs as a ServiceAccount bound to the generated manager and
// upgrade-log roles: no request may be refused, and every permission of the
// upgrade-log role must be used.
func TestUpgradeLogKeepsEveryJobsLog(t *testing.T) {
	var rp *reaper
	var sa *rbactest.Identity
	stopped := make(chan []string, 1)
	followed := make(chan followedLog, 1)
	scenario{
		// Charts take a while to deploy: the cluster upgrade's container
		// runs for seconds, long enough to be followed.
		sim: sim.Config{Nodes: 2, Timing: sim.Timing{ChartDeploy: 300 * time.Millisecond}},
		beforePlan: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			var err error
			sa, err = rbactest.Bind(ctx, run.Env, types.NamespacedName{Namespace: cluster.HarvesterNamespace, Name: "upgrade-toolkit"}, rbactest.ManagerRole, rbactest.UpgradeLogRole)
			if err != nil {
				t.Fatal(err)
			}
			run.RunManagerAs(sa.Config())
			if err := run.RestartManager(); err != nil {
				t.Fatal(err)
			}
		},
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if rp == nil {
				rp = startReaper(run, true)
				go func() { stopped <- stopDuringJobs(ctx, t, run) }()
				go func() { followed <- followClusterUpgrade(ctx, t, run) }()
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			defer func() {
				for _, r := range sa.Refused() {
					t.Errorf("RBAC refused the manager: %s", r)
				}
				for _, g := range sa.Unused() {
					if strings.Contains(g, "/upgrade-toolkit-upgrade-log:") || strings.Contains(g, " upgrade-toolkit-upgrade-log:") {
						t.Errorf("the upgrade-log role grants what the capture never used: %s", g)
					}
				}
			}()
			rp.finish()
			plan := onlyPlan(t, ctx, run)
			if pods := <-stopped; len(pods) != 2 {
				t.Errorf("the manager was stopped during %v, want an image-preload and a pre-drain pod", pods)
			} else {
				t.Logf("the manager was down while these pods finished and were deleted: %v", pods)
			}
			ul := waitLogsComplete(t, ctx, run, plan, rp.wrote, rp.jobs)
			counts := run.Counter.Snapshot()
			reads := counts[apicount.Key{Verb: "get", Resource: "pods/log"}]
			t.Logf("the capture's writes: %d pod patches, %d ConfigMap creates, %d updates, %d UpgradeLog status updates; %d log reads; for %d logs",
				counts[apicount.Key{Verb: "patch", Resource: "pods"}], counts[apicount.Key{Verb: "create", Resource: "configmaps"}],
				counts[apicount.Key{Verb: "update", Resource: "configmaps"}], counts[apicount.Key{Verb: "update", Resource: "upgradelogs/status"}], reads, len(ul.Status.Logs))

			checkJobsCaptured(t, ul, rp.jobs)
			f := <-followed
			checkFollowed(t, ctx, run, ul, f)
			checkCaptureFollowed(t, run, f.pod)
			showLogs(t, ctx, run, ul)
			checkArchive(t, ctx, run, plan, ul)
			checkGoneWithPlan(t, ctx, run, plan)
		},
		want: v1beta1.PhaseSucceeded,
	}.run(t)
}

// stopDuringJobs stops the manager once a pod of an image-preload Job, then
// one of a pre-drain Job, runs and has logged (and, for the
// system-upgrade-controller's, carries the capture's finalizer), and starts
// it again once the pod finished and was deleted. It returns the pods.
func stopDuringJobs(ctx context.Context, t *testing.T, run *simrun.Run) []string {
	var pods []string
	for _, target := range []struct {
		namespace, key, value string
		// seen: wait until the capture saw the pod (its finalizer is
		// on it), as it must for a pod it does not make.
		seen bool
	}{
		{cluster.CattleNamespace, v1beta1.LabelUpgradeComponent, v1beta1.ComponentImagePreload, true},
		{cluster.HarvesterNamespace, v1beta1.LabelJobType, v1beta1.JobTypePreDrain, false},
	} {
		var pod *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			list := &corev1.PodList{}
			if err := run.Client.List(ctx, list, client.InNamespace(target.namespace), client.MatchingLabels{target.key: target.value}); err != nil {
				return false, nil //nolint:nilerr // try again
			}
			for i := range list.Items {
				p := &list.Items[i]
				text, _ := run.Sim.PodLog(p.Namespace, p.Name)
				// Seen: held, and its plan's UpgradeLog made (a request
				// cut short by the stop would escape the RBAC record).
				seen := slices.Contains(p.Finalizers, v1beta1.FinalizerLogCapture) &&
					run.Client.Get(ctx, client.ObjectKey{Name: p.Labels[v1beta1.LabelUpgradePlan]}, &v1beta1.UpgradeLog{}) == nil
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && text != "" && (!target.seen || seen) {
					pod = p
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("no running %s pod to stop the manager during: %v", target.value, err)
			return pods
		}
		if err := run.StopManager(); err != nil {
			t.Errorf("stopping the manager: %v", err)
		}
		// Finished, deleted by the reaper and released by the Job
		// controller (its job-tracking finalizer): gone, unless the
		// capture holds it.
		_ = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p := &corev1.Pod{}
			err := run.Client.Get(ctx, client.ObjectKeyFromObject(pod), p)
			return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil && !slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer)), nil
		})
		time.Sleep(300 * time.Millisecond) // time for kwok to remove a pod nothing holds
		pods = append(pods, pod.Namespace+"/"+pod.Name)
		if err := run.StartManager(); err != nil {
			t.Errorf("starting the manager: %v", err)
		}
	}
	return pods
}

func onlyPlan(t *testing.T, ctx context.Context, run *simrun.Run) string {
	t.Helper()
	plans := &v1beta1.UpgradePlanList{}
	if err := run.Client.List(ctx, plans); err != nil || len(plans.Items) != 1 {
		t.Fatalf("want one plan: %v %v", plans.Items, err)
	}
	return plans.Items[0].Name
}

// waitLogsComplete waits until the UpgradeLog lists every noted pod's log
// complete, then compares each with what the pod wrote.
func waitLogsComplete(t *testing.T, ctx context.Context, run *simrun.Run, plan string, wrote map[string]string, jobs map[string]bool) *v1beta1.UpgradeLog {
	t.Helper()
	if len(wrote) == 0 {
		t.Fatal("no pod was seen finishing")
	}
	var ul *v1beta1.UpgradeLog
	var missing []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if ul, err = upgradelog.Get(ctx, run.Client, plan); err != nil {
			return false, nil //nolint:nilerr // not made yet
		}
		missing = nil
		for key := range wrote {
			found := false
			for _, l := range ul.Status.Logs {
				found = found || (l.Namespace+"/"+l.Pod == key && l.Complete)
			}
			if !found {
				missing = append(missing, key)
			}
		}
		for job := range jobs {
			if !slices.ContainsFunc(ul.Status.Logs, func(l v1beta1.CapturedLog) bool { return l.Namespace+"/"+l.Job == job && l.Complete }) {
				missing = append(missing, "Job "+job)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("the UpgradeLog never listed these pods' and Jobs' logs complete: %v (%+v)", missing, ul)
	}
	for key, want := range wrote {
		for _, l := range ul.Status.Logs {
			if l.Namespace+"/"+l.Pod != key {
				continue
			}
			got, err := upgradelog.Text(ctx, run.Client, l)
			if err != nil {
				t.Error(err)
				continue
			}
			if string(got) != want || want == "" {
				t.Errorf("%s: kept log differs from what the pod wrote\nkept:\n%s\nwrote:\n%s", key, got, want)
			}
		}
	}
	t.Logf("%d pods' logs kept whole, %d bytes in all", len(wrote), ul.Status.Bytes)
	var left []string
	for _, ns := range upgradelog.Namespaces {
		pods := &corev1.PodList{}
		if err := run.Client.List(ctx, pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if slices.Contains(p.Finalizers, v1beta1.FinalizerLogCapture) {
				left = append(left, ns+"/"+p.Name)
			}
		}
	}
	if len(left) > 0 {
		t.Errorf("pods still held by the capture after the upgrade: %v", left)
	}
	return ul
}

// followedLog is what `logs --follow` printed of a pod: the kept log first
// (printed), then what it followed.
type followedLog struct {
	pod, printed, followed string
}

// followClusterUpgrade follows the cluster-upgrade Job's pod, as `logs PLAN
// --job <cluster-upgrade> --follow` does, from when its log was first kept
// until the container ends.
func followClusterUpgrade(ctx context.Context, t *testing.T, run *simrun.Run) followedLog {
	kube, err := kubernetes.NewForConfig(run.Env.Config)
	if err != nil {
		t.Error(err)
		return followedLog{}
	}
	var target v1beta1.CapturedLog
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		uls := &v1beta1.UpgradeLogList{}
		if err := run.Client.List(ctx, uls); err != nil || len(uls.Items) == 0 {
			return false, nil //nolint:nilerr // not yet
		}
		cms := &corev1.ConfigMapList{}
		if err := run.Client.List(ctx, cms, client.InNamespace(cluster.HarvesterNamespace), client.MatchingLabels{v1beta1.LabelUpgradeComponent: v1beta1.ComponentClusterUpgrade}, client.HasLabels{v1beta1.LabelUpgradeLog}); err != nil {
			return false, nil //nolint:nilerr // try again
		}
		for _, l := range upgradelog.Summarize(cms.Items).Logs {
			// Early in its run (the capture follows the log as it is
			// written and saves it every second), so that most of it is
			// left to follow.
			if !l.Complete && l.Lines <= 10 {
				target = l
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no running cluster-upgrade pod's log to follow: %v", err)
		return followedLog{}
	}
	var printed, followed bytes.Buffer
	at, err := upgradelog.Print(ctx, run.Client, &printed, []v1beta1.CapturedLog{target})
	if err != nil {
		t.Errorf("printing %s: %v", target.Pod, err)
		return followedLog{}
	}
	if err := upgradelog.Follow(ctx, run.Client, kube, target, at[0], &followed); err != nil {
		t.Errorf("following %s: %v", target.Pod, err)
	}
	return followedLog{pod: target.Namespace + "/" + target.Pod, printed: printed.String(), followed: followed.String()}
}

// checkCaptureFollowed: the capture followed the running container's log
// as it was written, and read it once more at its end, instead of reading
// it again and again (the test's own `logs --follow` is the other follow).
func checkCaptureFollowed(t *testing.T, run *simrun.Run, pod string) {
	t.Helper()
	ns, name, _ := strings.Cut(pod, "/")
	r := run.Sim.LogRequests(ns, name)
	t.Logf("the kubelet served %s: %d follows, %d reads", pod, r.Follows, r.Reads)
	if r.Follows < 2 || r.Reads > 2 {
		t.Errorf("the capture did not follow the log of the running %s: %d follows (1 is the test's), %d reads", pod, r.Follows, r.Reads)
	}
}

// checkFollowed: what was printed, then followed, is the kept log, each
// line once.
func checkFollowed(t *testing.T, ctx context.Context, run *simrun.Run, ul *v1beta1.UpgradeLog, f followedLog) {
	t.Helper()
	for _, l := range ul.Status.Logs {
		if l.Namespace+"/"+l.Pod != f.pod {
			continue
		}
		kept, err := upgradelog.Text(ctx, run.Client, l)
		if err != nil {
			t.Fatal(err)
		}
		if f.followed == "" || f.printed+f.followed != string(kept) {
			t.Errorf("logs --follow of %s printed what is not its kept log:\nprinted:\n%s\nfollowed:\n%s\nkept:\n%s", f.pod, f.printed, f.followed, kept)
		}
		t.Logf("--follow printed %d kept lines, then followed the last %d of %d lines of %s", strings.Count(f.printed, "\n"), strings.Count(f.followed, "\n"), strings.Count(string(kept), "\n"), f.pod)
		return
	}
	t.Errorf("the followed pod %q has no kept log", f.pod)
}

// showLogs prints what `logs PLAN` and `logs PLAN --job <node-1's
// pre-drain>` print, and checks the listing names every log.
func showLogs(t *testing.T, ctx context.Context, run *simrun.Run, ul *v1beta1.UpgradeLog) {
	t.Helper()
	var list strings.Builder
	if err := upgradelog.List(&list, ul); err != nil {
		t.Fatal(err)
	}
	for _, l := range ul.Status.Logs {
		if !strings.Contains(list.String(), l.Namespace+"/"+l.Job+" ") {
			t.Errorf("the listing lacks %s/%s:\n%s", l.Namespace, l.Job, list.String())
		}
	}
	t.Logf("upgrade-toolkit logs %s:\n%s", ul.Name, list.String())
	job := ul.Name + "-node-upgrade-pre-drain-node-1"
	var text strings.Builder
	if _, err := upgradelog.Print(ctx, run.Client, &text, upgradelog.Select(ul.Status.Logs, job, "")); err != nil || text.Len() == 0 {
		t.Errorf("logs --job %s: %v", job, err)
	}
	t.Logf("upgrade-toolkit logs %s --job %s:\n%s", ul.Name, job, text.String())
}

// checkJobsCaptured: every Job the upgrade ran has a log kept.
func checkJobsCaptured(t *testing.T, ul *v1beta1.UpgradeLog, jobs map[string]bool) {
	t.Helper()
	components := map[string]bool{}
	for job := range jobs {
		found := false
		for _, l := range ul.Status.Logs {
			if l.Namespace+"/"+l.Job == job {
				found = true
				components[l.Component] = true
			}
		}
		if !found {
			t.Errorf("Job %s ran, and no log of it was kept", job)
		}
	}
	for _, c := range []string{v1beta1.ComponentImagePreload, v1beta1.ComponentClusterUpgrade, v1beta1.ComponentNodeUpgrade, v1beta1.ComponentImageCleanup} {
		if !components[c] {
			t.Errorf("no %s Job's log was kept (kept: %v)", c, components)
		}
	}
}

// checkArchive: the bundle holds each listed file, every kept log as kept,
// and no value of any Secret of the cluster.
func checkArchive(t *testing.T, ctx context.Context, run *simrun.Run, plan string, ul *v1beta1.UpgradeLog) {
	t.Helper()
	var buf bytes.Buffer
	if err := upgradelog.Archive(ctx, run.Client, nil, plan, "v0.0.0-e2e", time.Now(), &buf); err != nil {
		t.Fatal(err)
	}
	files := untar(t, buf.Bytes())
	for _, f := range upgradelog.ArchiveFiles {
		if body, ok := files[plan+"/"+f]; !ok || len(body) == 0 {
			t.Errorf("the archive has no %s (it has %d files)", f, len(files))
		}
	}
	for _, l := range ul.Status.Logs {
		want, err := upgradelog.Text(ctx, run.Client, l)
		if err != nil {
			t.Fatal(err)
		}
		if got := files[plan+"/logs/"+l.Namespace+"/"+l.Pod+"/"+l.Container+".log"]; got != string(want) {
			t.Errorf("the archive's log of %s/%s differs from the kept one", l.Namespace, l.Pod)
		}
	}
	for _, want := range []string{"kind: UpgradePlan", "name: " + plan} {
		if !strings.Contains(files[plan+"/upgradeplan.yaml"], want) {
			t.Errorf("upgradeplan.yaml lacks %q", want)
		}
	}
	for _, want := range []string{"node-1\n", "node-2\n", "pre-drain", "now " + string(v1beta1.NodeStateImageCleaned)} {
		if !strings.Contains(files[plan+"/nodes.txt"], want) {
			t.Errorf("nodes.txt lacks %q:\n%s", want, files[plan+"/nodes.txt"])
		}
	}
	if !strings.Contains(files[plan+"/machine-plan-secrets.yaml"], upgradelog.Redacted) {
		t.Errorf("the machine-plan Secrets are not in the archive, redacted:\n%.500s", files[plan+"/machine-plan-secrets.yaml"])
	}
	if !strings.Contains(files[plan+"/toolkit-version.txt"], "v0.0.0-e2e") {
		t.Error("the toolkit's version is not in the archive")
	}
	// The cluster's objects the upgrade moves, read whole, and a note for
	// the manager's log, which runs in this process here.
	for file, wants := range map[string][]string{
		"nodes.yaml":                {"kind: Node\n", "name: node-1\n", "name: node-2\n"},
		"provisioning-cluster.yaml": {"kind: Cluster\n", "name: local\n", "apiVersion: provisioning.cattle.io/v1\n"},
		"machines.yaml":             {"kind: Machine\n", "apiVersion: cluster.x-k8s.io/v1beta1\n"},
		"manager.log":               {"# the manager's log was not read"},
	} {
		for _, want := range wants {
			if !strings.Contains(files[plan+"/"+file], want) {
				t.Errorf("%s lacks %q:\n%.500s", file, want, files[plan+"/"+file])
			}
		}
		if strings.Contains(files[plan+"/"+file], "managedFields") {
			t.Errorf("%s holds managed fields", file)
		}
	}
	secrets := &corev1.SecretList{}
	if err := run.Client.List(ctx, secrets); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, s := range secrets.Items {
		for k, v := range s.Data {
			if len(v) < 8 {
				continue // too short to tell from other text
			}
			checked++
			for name, body := range files {
				if strings.Contains(body, string(v)) {
					t.Errorf("the archive's %s holds the value of Secret %s/%s key %s", name, s.Namespace, s.Name, k)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no Secret value to look for")
	}
	t.Logf("archive: %d files, %d bytes; checked %d Secret values", len(files), buf.Len(), checked)
}

func untar(t *testing.T, data []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(b)
	}
}

// checkGoneWithPlan: deleting the plan removes its UpgradeLog and the log
// ConfigMaps (the garbage collector, through the owner references).
func checkGoneWithPlan(t *testing.T, ctx context.Context, run *simrun.Run, plan string) {
	t.Helper()
	p := &v1beta1.UpgradePlan{}
	p.Name = plan
	if err := run.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ul := &v1beta1.UpgradeLog{}
		if err := run.Client.Get(ctx, client.ObjectKey{Name: plan}, ul); !apierrors.IsNotFound(err) {
			return false, nil
		}
		cms := &corev1.ConfigMapList{}
		if err := run.Client.List(ctx, cms, client.InNamespace(cluster.HarvesterNamespace), client.MatchingLabels{v1beta1.LabelUpgradeLog: plan}); err != nil {
			return false, err
		}
		return len(cms.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the UpgradeLog or its ConfigMaps outlived the plan: %v", err)
	}
}

// TestUpgradeLogOptOut: a plan with spec.logEnabled false, and a manager
// with the capture off, hold no pod, make no UpgradeLog and keep no log; the
// manager with the capture off asks nothing of it of the API.
func TestUpgradeLogOptOut(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spec      v1beta1.UpgradePlanSpec
		managerOn bool
	}{
		{"plan", v1beta1.UpgradePlanSpec{LogEnabled: ptr.To(false)}, true},
		{"manager", v1beta1.UpgradePlanSpec{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rp *reaper
			scenario{
				sim:  sim.Config{Nodes: 1},
				spec: tc.spec,
				beforePlan: func(t *testing.T, ctx context.Context, run *simrun.Run) {
					if !tc.managerOn {
						run.UpgradeLogOptions().Enabled = false
						if err := run.RestartManager(); err != nil {
							t.Fatal(err)
						}
						run.Counter.Reset()
					}
				},
				during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
					if rp == nil {
						rp = startReaper(run, false)
					}
				},
				after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
					rp.finish()
					plan := onlyPlan(t, ctx, run)
					if len(rp.held) > 0 {
						t.Errorf("pods held by the capture: %v", rp.held)
					}
					if len(rp.wrote) == 0 {
						t.Error("no pod finished: nothing was checked")
					}
					ul := &v1beta1.UpgradeLog{}
					if err := run.Client.Get(ctx, client.ObjectKey{Name: plan}, ul); !apierrors.IsNotFound(err) {
						t.Errorf("an UpgradeLog exists: %v %+v", err, ul.Status)
					}
					cms := &corev1.ConfigMapList{}
					if err := run.Client.List(ctx, cms, client.HasLabels{v1beta1.LabelUpgradeLog}); err != nil || len(cms.Items) > 0 {
						t.Errorf("log ConfigMaps kept: %d %v", len(cms.Items), err)
					}
					if _, err := upgradelog.Get(ctx, run.Client, plan); err == nil {
						t.Error("logs PLAN finds an UpgradeLog")
					} else {
						t.Logf("logs %s: %v", plan, err)
					}
					if tc.managerOn {
						return
					}
					counts := run.Counter.Snapshot()
					for _, k := range []apicount.Key{{Verb: "get", Resource: "pods/log"}, {Verb: "patch", Resource: "pods"}, {Verb: "list", Resource: "upgradelogs"}, {Verb: "watch", Resource: "upgradelogs"}} {
						if counts[k] > 0 {
							t.Errorf("the manager with the capture off made %d %s requests", counts[k], k)
						}
					}
				},
				want: v1beta1.PhaseSucceeded,
			}.run(t)
		})
	}
}

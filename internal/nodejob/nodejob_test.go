package nodejob_test

import (
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/host/hosttest"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodejob"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

func archives(as []release.ImageArchive) []string {
	var out []string
	for _, a := range as {
		out = append(out, path.Base(a.Archive))
	}
	return out
}

func staged(dir string, as []release.ImageArchive) []string {
	var out []string
	for _, a := range as {
		out = append(out, "write "+dir+"/"+path.Base(a.List), "write "+dir+"/"+path.Base(a.Archive))
	}
	return out
}

// TestPrepareWithoutPreload: a plan that skips the preload imports no
// image, and each node still holds RKE2's restart for Rancher's upgrade.
func TestPrepareWithoutPreload(t *testing.T) {
	repo, url := repoServer(t)
	plan := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) {
		p.Spec.ImagePreloadOption = &v1beta1.ImagePreloadOption{Concurrency: ptr.To(-1)}
	})
	h := fakeHost(repo, nil)
	j := &nodejob.Job{Client: env.Client, Host: h, Plan: plan.Name, Node: "n1", RepoURL: url, Timeouts: fastTimeouts()}
	if err := j.Run(t.Context(), jobspec.Prepare); err != nil {
		t.Fatal(err)
	}
	ops := h.Ops()
	if slices.ContainsFunc(ops, func(op string) bool { return strings.HasPrefix(op, "import-images ") }) {
		t.Errorf("images imported although the plan skips the preload: %v", ops)
	}
	if !slices.Contains(ops, "restart-service rancher-system-agent.service") {
		t.Errorf("RKE2's restart not held: %v", ops)
	}
}

// TestPrepare: the host operations of the image preload, in order, and a
// rerun that finds everything in place only renews the drop-in.
func TestPrepare(t *testing.T) {
	repo, url := repoServer(t)
	plan := jobtest.Plan(t, env.Client, nil)
	h := fakeHost(repo, nil)
	j := &nodejob.Job{Client: env.Client, Host: h, Plan: plan.Name, Node: "n1", RepoURL: url, Timeouts: fastTimeouts()}
	if err := j.Run(t.Context(), jobspec.Prepare); err != nil {
		t.Fatal(err)
	}
	hold := []string{
		"write " + nodejob.AgentDropInDir + "/10-harvester-upgrade.env",
		"write " + nodejob.AgentDropInDir + "/override.conf",
		"restart-service rancher-system-agent.service",
	}
	var want []string
	for _, a := range archives(slices.Concat(repo.Bundle.Images.Common, repo.Bundle.Images.RKE2)) {
		want = append(want, "import-images "+a)
	}
	want = append(want, staged(nodejob.RKE2ImagesDir, repo.Bundle.Images.RKE2)...)
	want = append(want, staged(nodejob.AgentImagesDir, repo.Bundle.Images.Agent)...)
	want = append(want, hold...)
	if got := h.Ops(); !slices.Equal(got, want) {
		t.Errorf("host operations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	rke2 := repo.Bundle.Images.RKE2[0]
	if got, _ := h.File(nodejob.RKE2ImagesDir + "/" + path.Base(rke2.Archive)); len(got) != repo.ArchiveSize {
		t.Errorf("the staged RKE2 archive has %d bytes, want %d", len(got), repo.ArchiveSize)
	}
	if env, _ := h.File(nodejob.AgentDropInDir + "/10-harvester-upgrade.env"); string(env) != "INSTALL_RKE2_SKIP_ENABLE=true\n" {
		t.Errorf("drop-in environment %q", env)
	}

	h.ResetOps()
	if err := j.Run(t.Context(), jobspec.Prepare); err != nil {
		t.Fatal(err)
	}
	if got := h.Ops(); !slices.Equal(got, hold) {
		t.Errorf("a rerun did %v, want only %v", got, hold)
	}
}

// TestPrepareChecksEligibility: an ineligible plan fails before the node is
// touched, with the rule's error; spec.force skips the check.
func TestPrepareChecksEligibility(t *testing.T) {
	repo, url := repoServer(t)
	for _, force := range []bool{false, true} {
		plan := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) {
			p.Spec.Force = ptr.To(force)
			p.Status.PreviousVersion = ptr.To("v1.9.0")
		})
		h := fakeHost(repo, nil)
		j := &nodejob.Job{Client: env.Client, Host: h, Plan: plan.Name, Node: "n1", RepoURL: url, Timeouts: fastTimeouts()}
		err := j.Run(t.Context(), jobspec.Prepare)
		if force {
			if err != nil || len(h.Ops()) == 0 {
				t.Errorf("forced: err %v, %d host operations; want the preload", err, len(h.Ops()))
			}
			continue
		}
		if !errors.Is(err, release.ErrDowngrade) || len(h.Ops()) != 0 {
			t.Errorf("err %v after %v, want a downgrade refusal before any host operation", err, h.Ops())
		}
		if !strings.Contains(err.Error(), `step "check the upgrade eligibility"`) {
			t.Errorf("message %q does not name the step", err)
		}
	}
}

func TestWaitForRepoGivesUp(t *testing.T) {
	plan := jobtest.Plan(t, env.Client, nil)
	timeouts := fastTimeouts()
	timeouts.Repo = 200 * time.Millisecond
	j := &nodejob.Job{Client: env.Client, Host: &hosttest.Fake{}, Plan: plan.Name, Node: "n1", RepoURL: "http://127.0.0.1:1/harvester-iso/", Timeouts: timeouts}
	err := j.Run(t.Context(), jobspec.Prepare)
	if !errors.Is(err, waitfor.ErrTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	for _, part := range []string{"Deployment harvester-system/" + names.Repo(plan.Name) + " does not exist", "connection refused", "kubectl -n harvester-system describe deployment"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message %q lacks %q", err, part)
		}
	}
}

// TestPreDrain runs the pre-drain job against a fake KubeVirt and Longhorn:
// it waits for a degraded volume, records and stops the VM that cannot
// move before it taints the node, lets KubeVirt evacuate the others and
// waits for the evacuation PodDisruptionBudget.
func TestPreDrain(t *testing.T) {
	ctx := t.Context()
	repo, url := repoServer(t)
	n1, n2, n3 := jobtest.Name("node"), jobtest.Name("node"), jobtest.Name("node")
	for _, n := range []string{n1, n2, n3} {
		jobtest.Node(t, env.Client, n)
	}
	ns := jobtest.Namespace(t, env.Client)
	pinned := jobtest.VM(t, env.Client, ns, "pinned", n1, jobtest.Pinned)
	movable := jobtest.VM(t, env.Client, ns, "movable", n1)
	plan := jobtest.Plan(t, env.Client, nil)
	must(t, env.Client.Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cluster.EvacuationPDBPrefix + "abcde"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{}},
	}))
	vol := &longhornv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: jobtest.Name("pvc")},
		Spec: longhornv1beta2.VolumeSpec{NumberOfReplicas: 3}}
	must(t, env.Client.Create(ctx, vol))
	vol.Status.Robustness = cluster.LonghornRobustnessDegraded
	must(t, env.Client.Status().Update(ctx, vol))
	engine := &longhornv1beta2.Engine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: vol.Name + "-e-0"},
		Spec: longhornv1beta2.EngineSpec{VolumeName: vol.Name}}
	must(t, env.Client.Create(ctx, engine))
	engine.Status.CurrentState = cluster.LonghornEngineRunning
	must(t, env.Client.Status().Update(ctx, engine))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), engine) })

	var tl jobtest.Timeline
	background(t, fakeKubeVirt(env.Client, n1, n2, ns, nil))
	go func() {
		time.Sleep(300 * time.Millisecond)
		tl.Add("longhorn healed")
		vol.Status.Robustness = cluster.LonghornRobustnessHealthy
		_ = env.Client.Status().Update(context.Background(), vol)
	}()
	h := fakeHost(repo, &tl)
	j := &nodejob.Job{Client: jobtest.RecordingClient(env.Config, env.Scheme, &tl), Host: h, Plan: plan.Name, Node: n1, RepoURL: url, Timeouts: fastTimeouts()}
	if err := j.Run(ctx, jobspec.PreDrain); err != nil {
		t.Fatalf("%v\ntimeline:\n%s", err, &tl)
	}

	order := []string{
		"host remove " + nodejob.AgentDropInDir,
		"host restart-service rancher-system-agent.service",
		"longhorn healed",
		"api create *v1.ConfigMap " + cluster.HarvesterNamespace + "/" + names.RestoreVMConfigMap(plan.Name),
		"api patch *kubevirtv1.VirtualMachine " + pinned.String(),
		"api patch *v1.Node /" + n1,
		"host remove " + nodejob.CanalConfigManifest,
		"host write " + nodejob.RKE2ConfigDir + "/40-disable-charts.yaml",
	}
	last := -1
	for _, e := range order {
		i := tl.Index(e)
		if i <= last {
			t.Fatalf("%q is not where it belongs in\n%s", e, &tl)
		}
		last = i
	}
	n := &corev1.Node{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: n1}, n))
	if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == cluster.TaintKubeVirtDrain && t.Value == cluster.KubeVirtDrainTaintValue && t.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("node %s lacks the drain taint: %v", n1, n.Spec.Taints)
	}
	vms, _, err := helper.RecordedVMs(ctx, env.Client, plan.Name, n1)
	must(t, err)
	if got := helper.FormatVMList(vms); got != pinned.String() {
		t.Errorf("restore list %q, want the pinned VM", got)
	}
	if got := jobtest.RunStrategyOf(t, env.Client, movable); got != cluster.RunStrategyRerunOnFailure {
		t.Errorf("the movable VM was stopped: %q", got)
	}
}

// TestPreDrainNeverStopsAMigratableVM: a VM whose live migration keeps
// failing is never shut down by the pre-drain Job (only the operator's
// consent, carried out by the manager, does that): the Job waits, then fails
// naming the VM, its migration, the reason and the operator's choices.
func TestPreDrainNeverStopsAMigratableVM(t *testing.T) {
	ctx := t.Context()
	repo, url := repoServer(t)
	n1, n2 := jobtest.Name("node"), jobtest.Name("node")
	for _, n := range []string{n1, n2, jobtest.Name("node")} {
		jobtest.Node(t, env.Client, n)
	}
	ns := jobtest.Namespace(t, env.Client)
	stuck := jobtest.VM(t, env.Client, ns, "stuck", n1)
	plan := jobtest.Plan(t, env.Client, nil)
	background(t, fakeKubeVirt(env.Client, n1, n2, ns, map[string]bool{"stuck": true}))
	timeouts := fastTimeouts()
	timeouts.Evacuation = time.Second
	j := &nodejob.Job{Client: env.Client, Host: fakeHost(repo, nil), Plan: plan.Name, Node: n1, RepoURL: url, Timeouts: timeouts}
	err := j.Run(ctx, jobspec.PreDrain)
	if !errors.Is(err, waitfor.ErrTimeout) {
		t.Fatalf("err = %v, want the wait for the VMs to give up", err)
	}
	for _, part := range []string{
		"1 left: " + stuck.String() + " (Running, migration " + cluster.EvacuationMigrationPrefix + "stuck Failed, 1 failed migration(s), last: source migration failed: volume is ReadWriteOnce)",
		v1beta1.AnnotationRetryMigration, v1beta1.AnnotationShutdownForUpgrade + "=" + plan.Name,
	} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("the failure %q does not say %q", err, part)
		}
	}
	if got := jobtest.RunStrategyOf(t, env.Client, stuck); got != cluster.RunStrategyRerunOnFailure {
		t.Errorf("the VM whose migration failed was stopped: run strategy %q", got)
	}
	if vms, _, err := helper.RecordedVMs(ctx, env.Client, plan.Name, n1); err != nil || len(vms) != 0 {
		t.Errorf("restore list %v (%v), want none", vms, err)
	}
}

// TestPreDrainGivesUpOnUnhealthyVolumes: a volume that stays degraded stops
// the job before any VM is touched, naming the volume.
func TestPreDrainGivesUpOnUnhealthyVolumes(t *testing.T) {
	ctx := t.Context()
	n1 := jobtest.Name("node")
	for _, n := range []string{n1, jobtest.Name("node"), jobtest.Name("node")} {
		jobtest.Node(t, env.Client, n)
	}
	ns := jobtest.Namespace(t, env.Client)
	pinned := jobtest.VM(t, env.Client, ns, "pinned", n1, jobtest.Pinned)
	plan := jobtest.Plan(t, env.Client, nil)
	vol := &longhornv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: jobtest.Name("pvc")}}
	must(t, env.Client.Create(ctx, vol))
	vol.Status.Robustness = "faulted"
	must(t, env.Client.Status().Update(ctx, vol))
	engine := &longhornv1beta2.Engine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: vol.Name + "-e-0"},
		Spec: longhornv1beta2.EngineSpec{VolumeName: vol.Name}}
	must(t, env.Client.Create(ctx, engine))
	engine.Status.CurrentState = cluster.LonghornEngineRunning
	must(t, env.Client.Status().Update(ctx, engine))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), engine) })

	timeouts := fastTimeouts()
	timeouts.Longhorn = 200 * time.Millisecond
	j := &nodejob.Job{Client: env.Client, Host: &hosttest.Fake{}, Plan: plan.Name, Node: n1, Timeouts: timeouts}
	err := j.Run(ctx, jobspec.PreDrain)
	if !errors.Is(err, waitfor.ErrTimeout) || !strings.Contains(err.Error(), "volume "+vol.Name+" is faulted") {
		t.Fatalf("err = %v, want a timeout naming the volume", err)
	}
	if got := jobtest.RunStrategyOf(t, env.Client, pinned); got != cluster.RunStrategyRerunOnFailure {
		t.Errorf("a VM was stopped although the volumes were not healthy: %q", got)
	}
}

// TestMaintenanceModeTaintStays: a node in Harvester's maintenance mode has
// a kubevirt.io/drain taint of its own; pre-drain does not replace it and
// post-drain does not remove it.
func TestMaintenanceModeTaintStays(t *testing.T) {
	ctx := t.Context()
	repo, url := repoServer(t)
	n1 := jobtest.Name("node")
	jobtest.Node(t, env.Client, n1, jobtest.Kubelet(repo.Release.Kubernetes))
	maintenance := corev1.Taint{Key: cluster.TaintKubeVirtDrain, Value: "scheduling", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: n1}, node))
	node.Spec.Taints = append(node.Spec.Taints, maintenance)
	must(t, env.Client.Update(ctx, node))
	plan := jobtest.Plan(t, env.Client, nil)
	h := fakeHost(repo, nil)
	h.PrettyName = repo.Release.OS
	j := &nodejob.Job{Client: env.Client, Host: h, Plan: plan.Name, Node: n1, Pod: "p", RepoURL: url, Timeouts: fastTimeouts()}
	for _, jt := range []string{jobspec.PreDrain, jobspec.PostDrain} {
		if err := j.Run(ctx, jt); err != nil {
			t.Fatal(err)
		}
		must(t, env.Client.Get(ctx, client.ObjectKey{Name: n1}, node))
		if got := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key != cluster.TaintKubeVirtDrain }); !slices.Equal(got, []corev1.Taint{maintenance}) {
			t.Errorf("after %s the drain taints are %v, want only %v", jt, got, maintenance)
		}
	}
}

// TestPostDrain: the kubelet configuration, the wait for the new RKE2, the
// taint removal, the OS upgrade and the reboot; a rerun on a node that runs
// the new OS changes nothing but the always-written files.
func TestPostDrain(t *testing.T) {
	ctx := t.Context()
	repo, url := repoServer(t)
	n1 := jobtest.Name("node")
	jobtest.Node(t, env.Client, n1)
	other := corev1.Taint{Key: "example.com/dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{}
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: n1}, node))
	node.Spec.Taints = append(node.Spec.Taints, other,
		corev1.Taint{Key: cluster.TaintKubeVirtDrain, Value: cluster.KubeVirtDrainTaintValue, Effect: corev1.TaintEffectNoSchedule})
	must(t, env.Client.Update(ctx, node))
	plan := jobtest.Plan(t, env.Client, nil)
	go func() {
		time.Sleep(200 * time.Millisecond)
		n := &corev1.Node{}
		if env.Client.Get(context.Background(), client.ObjectKey{Name: n1}, n) == nil {
			n.Status.NodeInfo.KubeletVersion = repo.Release.Kubernetes
			_ = env.Client.Status().Update(context.Background(), n)
		}
	}()
	h := fakeHost(repo, nil)
	h.Files = map[string][]byte{nodejob.RKE2ConfigDir + "/91-harvester-cdi.yaml": []byte("# tuned by the operator\n")}
	j := &nodejob.Job{Client: env.Client, Host: h, Plan: plan.Name, Node: n1, Pod: "post-drain-pod", RepoURL: url, Timeouts: fastTimeouts()}
	if err := j.Run(ctx, jobspec.PostDrain); err != nil {
		t.Fatal(err)
	}
	config := []string{
		"write " + nodejob.RKE2ConfigDir + "/99-max-pods.yaml",
		"write " + nodejob.RKE2ConfigDir + "/99-z00-harvester-reserved-resources.yaml",
		"write " + nodejob.CleanupKubeletStage,
	}
	rke2 := repo.Bundle.Images.RKE2[0]
	want := slices.Concat(config, []string{
		"remove " + nodejob.RKE2ImagesDir + "/" + path.Base(rke2.List),
		"remove " + nodejob.RKE2ImagesDir + "/" + path.Base(rke2.Archive),
		"write " + nodejob.RootfsPath,
		"upgrade-os " + nodejob.RootfsPath,
		"reboot-after-job harvester-system/post-drain-pod/apply",
	})
	if got := h.Ops(); !slices.Equal(got, want) {
		t.Errorf("host operations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, _ := h.File(nodejob.RKE2ConfigDir + "/99-z00-harvester-reserved-resources.yaml"); !strings.Contains(string(got), "system-reserved=cpu=392m") ||
		!strings.Contains(string(got), "kube-reserved=cpu=588m") {
		t.Errorf("reserved resources for 8 CPUs:\n%s", got)
	}
	must(t, env.Client.Get(ctx, client.ObjectKey{Name: n1}, node))
	if !slices.Contains(node.Spec.Taints, other) || slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cluster.TaintKubeVirtDrain }) {
		t.Errorf("taints %v: want the upgrade's drain taint gone and the other taint kept", node.Spec.Taints)
	}

	h.ResetOps()
	h.PrettyName = repo.Release.OS
	if err := j.Run(ctx, jobspec.PostDrain); err != nil {
		t.Fatal(err)
	}
	want = []string{config[0], config[2],
		"remove " + nodejob.RKE2ImagesDir + "/" + path.Base(rke2.List),
		"remove " + nodejob.RKE2ImagesDir + "/" + path.Base(rke2.Archive)}
	if got := h.Ops(); !slices.Equal(got, want) {
		t.Errorf("rerun on an upgraded node: host operations\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSingleNodeUpgrade: the new OS is downloaded before any VM is stopped,
// every VM of the only node is recorded and stopped, Rancher is asked for the
// new Kubernetes version, and the node reboots into the new OS.
func TestSingleNodeUpgrade(t *testing.T) {
	ctx := t.Context()
	repo, url := repoServer(t)
	// One node in the whole cluster: every VM on it is non-migratable.
	must(t, env.Client.DeleteAllOf(ctx, &corev1.Node{}))
	n1 := jobtest.Name("node")
	jobtest.Node(t, env.Client, n1)
	ns := jobtest.Namespace(t, env.Client)
	a := jobtest.VM(t, env.Client, ns, "a", n1)
	b := jobtest.VM(t, env.Client, ns, "b", n1)
	plan := jobtest.Plan(t, env.Client, nil)
	local := &provisioningv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
		Spec: provisioningv1.ClusterSpec{KubernetesVersion: "v1.34.4+rke2r1"}}
	must(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, local)))

	var tl jobtest.Timeline
	// Fleet is still deploying a chart of the cluster upgrade.
	bundle := &fleetv1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: jobtest.Name("bundle")}}
	must(t, env.Client.Create(ctx, bundle))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), bundle) })
	go func() {
		time.Sleep(300 * time.Millisecond)
		tl.Add("fleet deployed")
		bundle.Status = fleetv1alpha1.BundleStatus{ObservedGeneration: bundle.Generation, Conditions: []common.Condition{{Type: cluster.ConditionReady, Status: "True"}}}
		_ = env.Client.Status().Update(context.Background(), bundle)
	}()
	background(t, fakeKubeVirt(env.Client, n1, "", ns, nil))
	// Rancher moves the node to the cluster's Kubernetes version.
	background(t, func(ctx context.Context) {
		cl := &provisioningv1.Cluster{}
		n := &corev1.Node{}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(local), cl) != nil || env.Client.Get(ctx, client.ObjectKey{Name: n1}, n) != nil {
			return
		}
		if cl.Spec.KubernetesVersion == repo.Release.Kubernetes && n.Status.NodeInfo.KubeletVersion != repo.Release.Kubernetes {
			n.Status.NodeInfo.KubeletVersion = repo.Release.Kubernetes
			_ = env.Client.Status().Update(ctx, n)
		}
	})
	h := fakeHost(repo, &tl)
	j := &nodejob.Job{Client: jobtest.RecordingClient(env.Config, env.Scheme, &tl), Host: h, Plan: plan.Name, Node: n1, Pod: "single-pod", RepoURL: url, Timeouts: fastTimeouts()}
	if err := j.Run(ctx, jobspec.SingleNodeUpgrade); err != nil {
		t.Fatalf("%v\ntimeline:\n%s", err, &tl)
	}
	order := []string{
		"host remove " + nodejob.AgentDropInDir,
		"host remove " + nodejob.CanalConfigManifest,
		"host write " + nodejob.RootfsPath,
		"api create *v1.ConfigMap",
		"api patch *kubevirtv1.VirtualMachine " + a.String(),
		"fleet deployed",
		"host write " + nodejob.RKE2ConfigDir + "/99-max-pods.yaml",
		"api patch *provisioningv1.Cluster " + cluster.FleetLocalNamespace + "/" + cluster.LocalClusterName,
		"host remove " + nodejob.RKE2ImagesDir,
		"host upgrade-os " + nodejob.RootfsPath,
		"host reboot-after-job harvester-system/single-pod/apply",
	}
	last := -1
	for _, e := range order {
		i := tl.Index(e)
		if i <= last {
			t.Fatalf("%q is not where it belongs in\n%s", e, &tl)
		}
		last = i
	}
	if n := strings.Count(tl.String(), "host write "+nodejob.RootfsPath); n != 1 {
		t.Errorf("the OS image was downloaded %d times", n)
	}
	vms, _, err := helper.RecordedVMs(ctx, env.Client, plan.Name, n1)
	must(t, err)
	if got := helper.FormatVMList(vms); got != a.String()+","+b.String() {
		t.Errorf("restore list %q, want every VM of the node", got)
	}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(local), local))
	if local.Spec.KubernetesVersion != repo.Release.Kubernetes || local.Spec.RKEConfig == nil {
		t.Errorf("cluster spec %+v, want kubernetesVersion %s and an rkeConfig", local.Spec, repo.Release.Kubernetes)
	}
}

// TestSwitchIngress: the pre-drain Job of an upgrade to v1.9 or newer
// makes RKE2 run Traefik, once; an upgrade to v1.8 leaves the ingress.
func TestSwitchIngress(t *testing.T) {
	repo, url := repoServer(t)
	n1 := jobtest.Name("node")
	for _, n := range []string{n1, jobtest.Name("node"), jobtest.Name("node")} {
		jobtest.Node(t, env.Client, n)
	}
	to := func(target string) *v1beta1.UpgradePlan {
		return jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) {
			p.Status.PreviousVersion = ptr.To("v1.8.1")
			p.Status.ReleaseMetadata.Harvester = target
		})
	}
	write := "write " + nodejob.TraefikConfig
	for _, tc := range []struct {
		target string
		writes int
	}{{"v1.9.0", 1}, {"v1.9.0-rc1", 1}, {"master-head", 1}, {"v1.8.2", 0}} {
		t.Run(tc.target, func(t *testing.T) {
			plan := to(tc.target)
			h := fakeHost(repo, nil)
			j := &nodejob.Job{Client: env.Client, Host: h, Plan: plan.Name, Node: n1, RepoURL: url, Timeouts: fastTimeouts()}
			for range 2 {
				if err := j.Run(t.Context(), jobspec.PreDrain); err != nil {
					t.Fatal(err)
				}
			}
			if got := slices.Index(h.Ops(), write) >= 0; got != (tc.writes > 0) || strings.Count(strings.Join(h.Ops(), "\n"), write) != tc.writes {
				t.Errorf("host operations %v: want %q %d times over two runs", h.Ops(), write, tc.writes)
			}
			if tc.writes > 0 {
				if got, _ := h.File(nodejob.TraefikConfig); string(got) != "ingress-controller: traefik\n" {
					t.Errorf("%s: %q", nodejob.TraefikConfig, got)
				}
			}
		})
	}
}

// TestImageCleanup removes exactly the previous release's images the node
// has and the new one does not use, keeping retained ones; an image in use
// does not fail the job.
func TestImageCleanup(t *testing.T) {
	_, url := repoServer(t)
	plan := jobtest.Plan(t, env.Client, nil)
	h := &hosttest.Fake{
		Present: []string{
			"docker.io/rancher/harvester:v1.7.1",           // stale
			"docker.io/rancher/harvester-upgrade:v1.7.1",   // retained
			"docker.io/longhornio/longhorn-engine:v1.10.1", // retained
			"docker.io/rancher/fleet:v0.13.0",              // stale
			"docker.io/rancher/mirrored-pause:3.6",         // still used
			"docker.io/rancher/harvester:v1.8.0",           // current
			"docker.io/library/busybox:1.36",               // not the release's
		},
		Errors: map[string]error{"remove-image docker.io/rancher/fleet:v0.13.0": errors.New("image is in use by a container")},
	}
	j := &nodejob.Job{Client: env.Client, Host: h, Plan: plan.Name, Node: "n1", RepoURL: url, Timeouts: fastTimeouts()}
	if err := j.Run(t.Context(), jobspec.ImageCleanup); err != nil {
		t.Fatal(err)
	}
	want := []string{"remove-image docker.io/rancher/fleet:v0.13.0", "remove-image docker.io/rancher/harvester:v1.7.1"}
	if got := h.Ops(); !slices.Equal(got, want) {
		t.Errorf("host operations %v, want %v", got, want)
	}

	// Nothing removable at all fails the job.
	h = &hosttest.Fake{Present: []string{"docker.io/rancher/harvester:v1.7.1"}, Errors: map[string]error{"remove-image": errors.New("crictl: not found")}}
	j.Host = h
	if err := j.Run(t.Context(), jobspec.ImageCleanup); err == nil || !strings.Contains(err.Error(), "crictl: not found") {
		t.Errorf("err = %v, want the failure when no image could be removed", err)
	}

	// A release without the previous version's list: nothing to compare.
	old := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) { p.Status.PreviousVersion = ptr.To("v1.7.0") })
	h = &hosttest.Fake{Present: []string{"docker.io/rancher/harvester:v1.7.1"}}
	j = &nodejob.Job{Client: env.Client, Host: h, Plan: old.Name, Node: "n1", RepoURL: url, Timeouts: fastTimeouts()}
	if err := j.Run(t.Context(), jobspec.ImageCleanup); err != nil || len(h.Ops()) != 0 {
		t.Errorf("err %v, operations %v; want nothing removed", err, h.Ops())
	}
}

func TestUnhealthyVolumes(t *testing.T) {
	engine := func(volume, state string, modes ...string) longhornv1beta2.Engine {
		e := longhornv1beta2.Engine{Spec: longhornv1beta2.EngineSpec{VolumeName: volume}, Status: longhornv1beta2.EngineStatus{CurrentState: state, ReplicaModeMap: map[string]string{}}}
		for i, m := range modes {
			e.Status.ReplicaModeMap[string(rune('a'+i))] = m
		}
		return e
	}
	volume := func(name, robustness string, replicas int) *longhornv1beta2.Volume {
		return &longhornv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: longhornv1beta2.VolumeSpec{NumberOfReplicas: replicas}, Status: longhornv1beta2.VolumeStatus{Robustness: robustness}}
	}
	vols := map[string]*longhornv1beta2.Volume{
		"healthy": volume("healthy", "healthy", 3), "degraded": volume("degraded", "degraded", 3),
		"single": volume("single", "degraded", 1),
	}
	for _, tc := range []struct {
		name    string
		engines []longhornv1beta2.Engine
		nodes   int
		want    []string
	}{
		{"healthy", []longhornv1beta2.Engine{engine("healthy", "running", "RW", "RW", "RW")}, 3, nil},
		{"degraded", []longhornv1beta2.Engine{engine("degraded", "running", "RW", "RW")}, 3, []string{"volume degraded is degraded"}},
		{"stopped engines do not count", []longhornv1beta2.Engine{engine("degraded", "stopped")}, 3, nil},
		{"two nodes: two replicas in sync suffice", []longhornv1beta2.Engine{engine("degraded", "running", "RW", "RW")}, 2, nil},
		{"two nodes: one in sync is not enough", []longhornv1beta2.Engine{engine("degraded", "running", "RW", "WO")}, 2,
			[]string{"volume degraded has 1 of 2 replicas in sync"}},
		{"two nodes: a single-replica volume needs one", []longhornv1beta2.Engine{engine("single", "running", "RW")}, 2, nil},
		{"unknown volume", []longhornv1beta2.Engine{engine("nope", "running")}, 3, []string{"volume nope of engine  not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nodejob.UnhealthyVolumes(tc.engines, vols, tc.nodes); !slices.Equal(got, tc.want) {
				t.Errorf("UnhealthyVolumes = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReservedCPU(t *testing.T) {
	for _, tc := range []struct{ cores, pods, system, kube int }{
		{1, 110, 48, 72},   // 60m
		{2, 110, 56, 84},   // 70m
		{4, 110, 64, 96},   // 80m
		{8, 200, 392, 588}, // 80 + 4 × 2.5 + 400
		{64, 200, 504, 756},
		{0, 200, 0, 0},
	} {
		if s, k := nodejob.ReservedCPU(tc.cores, tc.pods); s != tc.system || k != tc.kube {
			t.Errorf("ReservedCPU(%d, %d) = %d, %d; want %d, %d", tc.cores, tc.pods, s, k, tc.system, tc.kube)
		}
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{jobspec.EnvPlan: "p", jobspec.EnvSUCNode: "n-suc", jobspec.EnvSUCPod: "pod-suc"}
	j := &nodejob.Job{}
	if err := j.FromEnv(func(k string) string { return env[k] }); err != nil || j.Plan != "p" || j.Node != "n-suc" || j.Pod != "pod-suc" {
		t.Errorf("FromEnv: %+v, %v", j, err)
	}
	env[jobspec.EnvNode], env[jobspec.EnvPod] = "n", "pod"
	if err := j.FromEnv(func(k string) string { return env[k] }); err != nil || j.Node != "n" || j.Pod != "pod" {
		t.Errorf("the toolkit's variables must win: %+v, %v", j, err)
	}
	err := j.FromEnv(func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), jobspec.EnvPlan) || !strings.Contains(err.Error(), jobspec.EnvNode) {
		t.Errorf("FromEnv with nothing set: %v", err)
	}
	if err := (&nodejob.Job{Plan: "p", Node: "n"}).Run(context.Background(), "reboot"); err == nil || !strings.Contains(err.Error(), "prepare") {
		t.Errorf("an unknown job type: %v", err)
	}
}

package sim

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
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
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

func TestOptionsStringIsSortedJSON(t *testing.T) {
	opts := provisioningv1.DrainOptions{Enabled: true, Force: true, IgnoreDaemonSets: ptr.To(true), DeleteEmptyDirData: true,
		PreDrainHooks: []provisioningv1.DrainHook{{Annotation: v1beta1.AnnotationPreHook}}}
	got, err := optionsString(opts, false)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"deleteEmptyDirData":true,"disableEviction":false,"enabled":true,"force":true,"ignoreDaemonSets":true,"preDrainHooks":[{"annotation":"management.harvesterhci.io/pre-hook"}]}`
	if got != want {
		t.Errorf("optionsString:\n got %s\nwant %s", got, want)
	}
	single, _ := optionsString(opts, true)
	if !strings.Contains(single, `"enabled":false`) {
		t.Errorf("a one-machine cluster is not drained: %s", single)
	}
}

// hookAcker plays the toolkit's side of the drain-hook handshake: it copies
// Rancher's pre-drain and post-drain values into the hook annotations, and
// records what it saw.
type hookAcker struct {
	mu        sync.Mutex
	order     []string // "pre <node>" / "post <node>"
	mismatch  []string // drain-options differing from the hook value
	sawDrains bool
	notReady  bool
}

func (h *hookAcker) run(ctx context.Context, t *testing.T) {
	for ctx.Err() == nil {
		var secrets corev1.SecretList
		if err := env.Client.List(ctx, &secrets, client.InNamespace(cluster.FleetLocalNamespace)); err == nil {
			for i := range secrets.Items {
				h.ack(ctx, t, &secrets.Items[i])
			}
		}
		cl := &provisioningv1.Cluster{}
		if env.Client.Get(ctx, localClusterKey, cl) == nil && !cl.Status.Ready {
			h.mu.Lock()
			h.notReady = true
			h.mu.Unlock()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (h *hookAcker) ack(ctx context.Context, t *testing.T, sec *corev1.Secret) {
	a := sec.Annotations
	node := nodeOfMachine(sec.Labels[cluster.LabelMachineName])
	h.mu.Lock()
	defer h.mu.Unlock()
	if a[cluster.AnnotationRancherDrainOptions] != "" {
		h.sawDrains = true
	}
	set := ""
	switch {
	case a[cluster.AnnotationRancherPreDrain] != "" && a[v1beta1.AnnotationPreHook] != a[cluster.AnnotationRancherPreDrain]:
		set = v1beta1.AnnotationPreHook
		h.order = append(h.order, "pre "+node)
		if a[cluster.AnnotationRancherPreDrain] != a[cluster.AnnotationRancherDrainOptions] {
			h.mismatch = append(h.mismatch, node)
		}
		a[set] = a[cluster.AnnotationRancherPreDrain]
	case a[cluster.AnnotationRancherPostDrain] != "" && a[v1beta1.AnnotationPostHook] != a[cluster.AnnotationRancherPostDrain]:
		set = v1beta1.AnnotationPostHook
		h.order = append(h.order, "post "+node)
		a[set] = a[cluster.AnnotationRancherPostDrain]
	default:
		return
	}
	if err := env.Client.Update(ctx, sec); err != nil {
		// A conflict: try again on the next round.
		h.order = h.order[:len(h.order)-1]
	}
}

func nodeOfMachine(machine string) string {
	for i := 1; i <= 10; i++ {
		n := "node-" + string(rune('0'+i))
		if machineName(n) == machine {
			return n
		}
	}
	return machine
}

// rollOut patches fleet-local/local as the toolkit's NodeUpgrade phase does.
func rollOut(t *testing.T, version string, hooks bool) {
	t.Helper()
	cl := &provisioningv1.Cluster{}
	get(t, localClusterKey, cl)
	cl.Spec.KubernetesVersion = version
	cl.Spec.RKEConfig.ProvisionGeneration++
	if hooks {
		opts := provisioningv1.DrainOptions{Enabled: true, Force: true, IgnoreDaemonSets: ptr.To(true), DeleteEmptyDirData: true,
			PreDrainHooks:  []provisioningv1.DrainHook{{Annotation: v1beta1.AnnotationPreHook}},
			PostDrainHooks: []provisioningv1.DrainHook{{Annotation: v1beta1.AnnotationPostHook}}}
		cl.Spec.RKEConfig.UpgradeStrategy = &provisioningv1.ClusterUpgradeStrategy{
			ControlPlaneConcurrency: "1", WorkerConcurrency: "1", ControlPlaneDrainOptions: opts, WorkerDrainOptions: opts,
		}
	}
	if err := env.Client.Update(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
}

// waitRolledOut waits until every node runs the kubelet version and the
// cluster is ready with no drain annotation and no cordon left.
func waitRolledOut(t *testing.T, nodes []string, kubelet string) {
	t.Helper()
	eventually(t, 30*time.Second, "the rollout to finish", func() (bool, string) {
		cl := &provisioningv1.Cluster{}
		get(t, localClusterKey, cl)
		if !cl.Status.Ready {
			return false, "cluster not ready"
		}
		for _, name := range nodes {
			n := &corev1.Node{}
			get(t, client.ObjectKey{Name: name}, n)
			if n.Status.NodeInfo.KubeletVersion != kubelet || n.Spec.Unschedulable {
				return false, name + " " + n.Status.NodeInfo.KubeletVersion
			}
			sec := &corev1.Secret{}
			get(t, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: machinePlanSecretName(machineName(name))}, sec)
			for k := range sec.Annotations {
				if strings.HasPrefix(k, "rke.cattle.io/") || strings.HasPrefix(k, v1beta1.Prefix) {
					return false, name + " still has " + k
				}
			}
		}
		return true, ""
	})
}

func TestRancherRollsNodesOneByOneThroughTheHooks(t *testing.T) {
	s := start(t, Config{Nodes: 4, NoKubelet: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The checker sees every node change; with a plan in NodeUpgrading it
	// counts cordoned nodes.
	checker := NewChecker()
	checker.ObservePlan(&v1beta1.UpgradePlan{Status: v1beta1.UpgradePlanStatus{CurrentPhase: v1beta1.PhaseNodeUpgrading}})
	if err := checker.Attach(ctx, s.Informers()); err != nil {
		t.Fatal(err)
	}
	acker := &hookAcker{}
	go acker.run(ctx, t)

	rollOut(t, "v1.35.2-rke2r1", true)
	waitRolledOut(t, s.Nodes(), "v1.35.2+rke2r1")
	cancel()

	acker.mu.Lock()
	defer acker.mu.Unlock()
	want := []string{"pre node-1", "post node-1", "pre node-2", "post node-2", "pre node-3", "post node-3", "pre node-4", "post node-4"}
	// Control-plane machines go first, in machine-name order; the worker last.
	if len(acker.order) != len(want) || acker.order[6] != "pre node-4" {
		t.Errorf("hook order %v: want every machine pre then post, one machine at a time, node-4 (the worker) last", acker.order)
	}
	for i := 0; i+1 < len(acker.order); i += 2 {
		pre, post := acker.order[i], acker.order[i+1]
		if !strings.HasPrefix(pre, "pre ") || post != "post "+strings.TrimPrefix(pre, "pre ") {
			t.Errorf("hook order %v: a machine's post-drain must follow its pre-drain before the next machine starts", acker.order)
			break
		}
	}
	if len(acker.mismatch) > 0 {
		t.Errorf("pre-drain differs from drain-options on %v", acker.mismatch)
	}
	if !acker.notReady {
		t.Error("the cluster never reported ready=false during the rollout")
	}
	for _, v := range checker.Violations() {
		t.Errorf("invariant: %s", v)
	}
	for _, name := range s.Nodes() {
		sec := &corev1.Secret{}
		get(t, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: machinePlanSecretName(machineName(name))}, sec)
		var applied nodePlan
		if err := json.Unmarshal(sec.Data[cluster.AppliedPlanKey], &applied); err != nil || applied.ProvisionGeneration != 1 {
			t.Errorf("machine of %s: applied plan %s", name, sec.Data[cluster.AppliedPlanKey])
		}
	}
}

func TestRancherWithoutHooksOnlyAppliesTheVersion(t *testing.T) {
	s := start(t, Config{Nodes: 2, NoKubelet: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acker := &hookAcker{}
	go acker.run(ctx, t)
	rollOut(t, "v1.35.2+rke2r1", false)
	waitRolledOut(t, s.Nodes(), "v1.35.2+rke2r1")
	cancel()
	acker.mu.Lock()
	defer acker.mu.Unlock()
	if acker.sawDrains || len(acker.order) > 0 {
		t.Errorf("without hooks Rancher must not drain: saw drain options %v, hooks %v", acker.sawDrains, acker.order)
	}
}

// TestRancherDrainBlockedByPDB: a PodDisruptionBudget that allows no
// disruption makes the API server refuse the eviction of its pod; Rancher's
// drain keeps retrying, reports the pod in drain-error and finishes once the
// budget is gone.
func TestRancherDrainBlockedByPDB(t *testing.T) {
	s := start(t, Config{Nodes: 2, NoKubelet: true, NodeImages: []string{"registry.suse.com/bci/bci-base:15.6"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "guarded", Labels: map[string]string{"app": "guarded"}},
		Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: harvesterServiceAccount,
			Containers: []corev1.Container{{Name: "c", Image: "registry.suse.com/bci/bci-base:15.6"}}},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}
	for _, o := range []client.Object{pod, pdb} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), pdb)
		_ = env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
	})
	go (&hookAcker{}).run(ctx, t)
	rollOut(t, "v1.35.2+rke2r1", true)

	sec := &corev1.Secret{}
	key := client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: machinePlanSecretName(machineName("node-1"))}
	want := `error when evicting pods/"guarded" -n "harvester-system": global timeout reached: 10m0s`
	eventually(t, 20*time.Second, "a drain error", func() (bool, string) {
		get(t, key, sec)
		return sec.Annotations[cluster.AnnotationRancherDrainError] == want, sec.Annotations[cluster.AnnotationRancherDrainError]
	})
	if sec.Annotations[cluster.AnnotationRancherDrainDone] != "" {
		t.Error("a blocked drain reported drain-done")
	}
	n := &corev1.Node{}
	get(t, client.ObjectKey{Name: "node-1"}, n)
	if !n.Spec.Unschedulable {
		t.Error("node-1 is not cordoned while its drain is blocked")
	}
	if err := env.Client.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	waitRolledOut(t, s.Nodes(), "v1.35.2+rke2r1")
}

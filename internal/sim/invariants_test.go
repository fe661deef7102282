package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// planState builds one observed state of plan "up": the phases entered so
// far (the last is the current one) and node states as "node=State".
func planState(phases []v1beta1.UpgradePlanPhase, nodes ...string) *v1beta1.UpgradePlan {
	p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "up"}}
	for _, ph := range phases {
		p.Status.PhaseTransitionTimestamps = append(p.Status.PhaseTransitionTimestamps, v1beta1.PhaseTransitionTimestamp{Phase: ph})
	}
	if len(phases) > 0 {
		p.Status.CurrentPhase = phases[len(phases)-1]
	}
	for _, n := range nodes {
		name, state, _ := strings.Cut(n, "=")
		if p.Status.NodeUpgradeStatuses == nil {
			p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
		}
		p.Status.NodeUpgradeStatuses[name] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeUpgradeState(state)}
	}
	return p
}

// retried records that the plan's failure in NodeUpgrading was retried,
// moving the nodes named back from PostDrainFailed to PostDraining.
func retried(p *v1beta1.UpgradePlan, nodes ...string) *v1beta1.UpgradePlan {
	f := v1beta1.Failure{Phase: v1beta1.PhaseNodeUpgrading, RetriedAt: &metav1.Time{}}
	for _, n := range nodes {
		f.Nodes = append(f.Nodes, v1beta1.NodeRetry{Node: n, From: v1beta1.NodeStatePostDrainFailed, To: v1beta1.NodeStatePostDraining})
	}
	p.Status.Failures = []v1beta1.Failure{f}
	return p
}

// upTo returns the pipeline's phases up to and including last.
func upTo(last v1beta1.UpgradePlanPhase) []v1beta1.UpgradePlanPhase {
	return slices.Clone(pipelineOrder[:phaseRank(last)+1])
}

func rules(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Rule)
	}
	return out
}

func TestCheckerPlanSequences(t *testing.T) {
	const (
		pl = v1beta1.NodeStateImagePreloaded
		pd = v1beta1.NodeStatePreDraining
	)
	clean := [][]*v1beta1.UpgradePlan{
		{ // a whole successful upgrade, node by node
			planState(upTo(v1beta1.PhaseInitializing)),
			planState(upTo(v1beta1.PhaseISODownloading)), // several phases in one write
			planState(upTo(v1beta1.PhaseImagePreloading), "n1=ImagePreloading", "n2=ImagePreloading"),
			planState(upTo(v1beta1.PhaseNodeUpgrading), "n1="+string(pl), "n2=UpgradePaused"),
			planState(upTo(v1beta1.PhaseNodeUpgrading), "n1="+string(pd), "n2=UpgradePaused"),
			planState(upTo(v1beta1.PhaseNodeUpgrading), "n1=WaitingReboot", "n2=UpgradePaused"),
			planState(upTo(v1beta1.PhaseNodeUpgrading), "n1=PostDrained", "n2=PreDraining"),
			planState(upTo(v1beta1.PhaseNodeUpgrading), "n1=PostDrained", "n2=PostDrained"),
			planState(upTo(v1beta1.PhaseSucceeded), "n1=ImageCleaned", "n2=ImageCleaned"),
			planState(upTo(v1beta1.PhaseSucceeded), "n1=ImageCleaned", "n2=ImageCleaned"),
		},
		{ // failure from the middle
			planState(upTo(v1beta1.PhaseClusterUpgrading)),
			planState(append(upTo(v1beta1.PhaseClusterUpgrading), v1beta1.PhaseFailed)),
		},
		{ // a failed node retried, as the failure records
			planState(upTo(v1beta1.PhaseNodeUpgrading), "n1=PostDrainFailed"),
			planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed), "n1=PostDrainFailed"),
			retried(planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed, v1beta1.PhaseNodeUpgrading), "n1=PostDraining"), "n1"),
			retried(planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed, v1beta1.PhaseNodeUpgrading), "n1=WaitingReboot"), "n1"),
			retried(planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed, v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded), "n1=PostDrained"), "n1"),
		},
	}
	for i, seq := range clean {
		c := NewChecker()
		for _, p := range seq {
			c.ObservePlan(p)
		}
		if v := c.Violations(); len(v) > 0 {
			t.Errorf("clean sequence %d: %v", i, v)
		}
	}

	bad := []struct {
		name string
		seq  []*v1beta1.UpgradePlan
		rule string
	}{
		{"phase moves back", []*v1beta1.UpgradePlan{
			planState(upTo(v1beta1.PhaseRepoCreating)), planState(upTo(v1beta1.PhaseISODownloading)),
		}, RulePhaseOrder},
		{"a phase is skipped", []*v1beta1.UpgradePlan{
			planState([]v1beta1.UpgradePlanPhase{v1beta1.PhaseInitializing, v1beta1.PhaseInitialized, v1beta1.PhaseRepoCreating}),
		}, RulePhaseOrder},
		{"a phase after Succeeded", []*v1beta1.UpgradePlan{
			planState(upTo(v1beta1.PhaseSucceeded)), planState(append(upTo(v1beta1.PhaseSucceeded), v1beta1.PhaseFailed)),
		}, RulePhaseOrder},
		{"currentPhase not recorded", []*v1beta1.UpgradePlan{func() *v1beta1.UpgradePlan {
			p := planState(upTo(v1beta1.PhaseISODownloading))
			p.Status.CurrentPhase = v1beta1.PhaseISODownloaded
			return p
		}()}, RulePhaseOrder},
		{"history rewritten", []*v1beta1.UpgradePlan{
			planState(upTo(v1beta1.PhaseRepoCreating)), planState(upTo(v1beta1.PhaseInitializing)),
		}, RulePhaseOrder},
		{"node moves back", []*v1beta1.UpgradePlan{
			planState(upTo(v1beta1.PhaseNodeUpgrading), "n1=PreDrained"), planState(upTo(v1beta1.PhaseNodeUpgrading), "n1=PreDraining"),
		}, RuleNodeStateForward},
		{"a retry to another phase than the failed one", []*v1beta1.UpgradePlan{
			planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed)),
			retried(planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed, v1beta1.PhaseImagePreloading))),
		}, RulePhaseOrder},
		{"back from Failed without a retry", []*v1beta1.UpgradePlan{
			planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed)),
			planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed, v1beta1.PhaseNodeUpgrading)),
		}, RulePhaseOrder},
		{"a node the retry did not record moves back", []*v1beta1.UpgradePlan{
			planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed), "n1=PostDrainFailed", "n2=PreDrained"),
			retried(planState(append(upTo(v1beta1.PhaseNodeUpgrading), v1beta1.PhaseFailed, v1beta1.PhaseNodeUpgrading), "n1=PostDraining", "n2=PreDraining"), "n1"),
		}, RuleNodeStateForward},
		{"two nodes draining", []*v1beta1.UpgradePlan{
			planState(upTo(v1beta1.PhaseNodeUpgrading), "n1=PostDraining", "n2=PreDraining"),
		}, RuleOneNodeDraining},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			c := NewChecker()
			for _, p := range tc.seq {
				c.ObservePlan(p)
			}
			if got := rules(c.Violations()); !slices.Contains(got, tc.rule) {
				t.Errorf("violations %v, want %s", c.Violations(), tc.rule)
			}
		})
	}
}

func TestCheckerCordons(t *testing.T) {
	node := func(name string, cordoned bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	}
	c := NewChecker()
	c.ObserveNode(node("admin-cordoned", true)) // before any plan: someone else's
	c.ObservePlan(planState(upTo(v1beta1.PhaseNodeUpgrading)))
	c.ObserveNode(node("n1", true))
	c.ObserveNode(node("n1", false))
	c.ObserveNode(node("n2", true))
	if v := c.Violations(); len(v) > 0 {
		t.Fatalf("one upgrade cordon at a time is fine: %v", v)
	}
	c.ObserveNode(node("n3", true))
	if got := rules(c.Violations()); !slices.Equal(got, []string{RuleOneNodeCordoned}) || !strings.Contains(c.Violations()[0].Message, "n2, n3") {
		t.Errorf("two cordoned nodes: %v", c.Violations())
	}
}

// checkerOfTwoVMs starts a world of two nodes with a running VM each, and a
// Checker that has seen them.
func checkerOfTwoVMs(t *testing.T) *Checker {
	t.Helper()
	start(t, Config{Nodes: 2, VMsPerNode: 1, NonMigratableVMs: -1})
	c := NewChecker()
	var vms kubevirtv1.VirtualMachineList
	if err := env.Client.List(context.Background(), &vms); err != nil {
		t.Fatal(err)
	}
	for i := range vms.Items {
		c.ObserveVM(&vms.Items[i])
	}
	return c
}

func TestCheckFinished(t *testing.T) {
	ctx := context.Background()
	c := checkerOfTwoVMs(t)
	if v, err := c.CheckFinished(ctx, env.Client, "up"); err != nil || len(v) > 0 {
		t.Fatalf("an untouched cluster: %v %v", v, err)
	}

	// Stop both VMs; record only one for restore; leave a Job behind.
	for _, name := range []string{"vm-node-1-1", "vm-node-2-1"} {
		vm := &kubevirtv1.VirtualMachine{}
		get(t, client.ObjectKey{Namespace: "default", Name: name}, vm)
		vm.Spec.RunStrategy = ptr.To(runStrategyHalted)
		if err := env.Client.Update(ctx, vm); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap("up")},
		Data: map[string]string{"node-1": "default/vm-node-1-1"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "up-leftover", Labels: map[string]string{v1beta1.LabelUpgradePlan: "up"}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "i"}},
		}}},
	}
	if err := env.Client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	got, err := c.CheckFinished(ctx, env.Client, "up")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Rule != RuleVMLeftStopped || !strings.Contains(got[0].Message, "default/vm-node-2-1") ||
		got[1].Rule != RuleLeftBehind || !strings.Contains(got[1].Message, "Job harvester-system/up-leftover") {
		t.Errorf("violations %v", got)
	}
	if again, _ := c.CheckFinished(ctx, env.Client, "up"); len(again) != 0 || len(c.Violations()) != 2 {
		t.Errorf("a second check reports the same violations again: %v", again)
	}
}

func TestCheckerJobsGenerationsAndSavedSettings(t *testing.T) {
	job := func(uid string, failed bool) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "up-post-drain-n1", UID: types.UID(uid),
			Labels: map[string]string{v1beta1.LabelUpgradePlan: "up"}}}
		if failed {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}
		}
		return j
	}
	c := NewChecker()
	c.ObserveJob(job("a", false))
	c.ObserveJob(job("a", true))
	c.ObserveJob(job("b", false)) // a retry of a failed Job
	if v := c.Violations(); len(v) > 0 {
		t.Errorf("a Job created again after it failed: %v", v)
	}
	c.ObserveJob(job("c", false))
	if got := rules(c.Violations()); !slices.Equal(got, []string{RuleJobStartedTwice}) {
		t.Errorf("a Job created again while the one before ran: %v", c.Violations())
	}

	c = NewChecker()
	cl := func(g int64) *provisioningv1.Cluster {
		return &provisioningv1.Cluster{Spec: provisioningv1.ClusterSpec{RKEConfig: &provisioningv1.RKEConfig{ProvisionGeneration: g}}}
	}
	c.ObserveProvisioningCluster(cl(3))
	c.ObserveProvisioningCluster(cl(4))
	c.ObserveProvisioningCluster(cl(4))
	if v := c.Violations(); len(v) > 0 {
		t.Errorf("one bump: %v", v)
	}
	c.ObserveProvisioningCluster(cl(5))
	if got := rules(c.Violations()); !slices.Equal(got, []string{RuleProvisionGeneration}) {
		t.Errorf("two bumps: %v", c.Violations())
	}

	saved := func(v *string) *v1beta1.UpgradePlan {
		p := planState(upTo(v1beta1.PhaseNodeUpgrading))
		if v != nil {
			p.Status.SavedSettings = &v1beta1.SavedSettings{LonghornReplicaReplenishmentWaitInterval: v}
		}
		return p
	}
	for name, seq := range map[string][]*string{
		"rewritten":          {ptr.To("600"), ptr.To("1800")},
		"recorded again":     {ptr.To("600"), nil, ptr.To("600")},
		"recorded, restored": {nil, ptr.To("600"), ptr.To("600"), nil},
	} {
		c := NewChecker()
		for _, v := range seq {
			c.ObservePlan(saved(v))
		}
		got := rules(c.Violations())
		if want := name != "recorded, restored"; slices.Contains(got, RuleSettingSavedOnce) != want {
			t.Errorf("%s: violations %v", name, c.Violations())
		}
	}
}

// TestCheckFinishedVMsOffAtSuccess: at a Succeeded end, a VM that ran before
// and is off passes only when the plan's ledger records its owner's stop.
func TestCheckFinishedVMsOffAtSuccess(t *testing.T) {
	ctx := context.Background()
	c := checkerOfTwoVMs(t)
	p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "up-vms"}, Spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), RestoreVM: ptr.To(true)}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })
	p.Status.CurrentPhase = v1beta1.PhaseSucceeded
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	// Both VMs stopped; the ledger says the owner stopped one, the upgrade
	// the other (and its restore did not start it again).
	for _, name := range []string{"vm-node-1-1", "vm-node-2-1"} {
		vm := &kubevirtv1.VirtualMachine{}
		get(t, client.ObjectKey{Namespace: "default", Name: name}, vm)
		vm.Spec.RunStrategy = ptr.To(runStrategyHalted)
		if err := env.Client.Update(ctx, vm); err != nil {
			t.Fatal(err)
		}
	}
	l := &vmledger.Ledger{Started: time.Now(), Records: []vmledger.Record{
		{VM: "default/vm-node-1-1", Node: "node-1", State: vmledger.Running, Leave: vmledger.LeaveMigrate,
			Events: []vmledger.Event{{At: time.Now(), Kind: vmledger.StoppedEvent, Node: "node-1", Cause: vmledger.CauseOwner, By: "harvester"}}},
		{VM: "default/vm-node-2-1", Node: "node-2", State: vmledger.Running, Leave: vmledger.LeaveMigrate,
			Events: []vmledger.Event{{At: time.Now(), Kind: vmledger.StoppedEvent, Node: "node-2", Cause: vmledger.CauseConsent}}},
	}}
	cms, err := vmledger.NewConfigMaps(p, l)
	if err != nil {
		t.Fatal(err)
	}
	cm := cms[0]
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, cm) })
	// The VMs' instances go, as KubeVirt deletes those of halted VMs.
	for _, name := range []string{"vm-node-1-1", "vm-node-2-1"} {
		eventually(t, 30*time.Second, "the instance of "+name+" to go", func() (bool, string) {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &kubevirtv1.VirtualMachineInstance{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	}
	got, err := c.CheckFinished(ctx, env.Client, "up-vms")
	if err != nil {
		t.Fatal(err)
	}
	var off []Violation
	for _, v := range got {
		if v.Rule == RuleVMOffAtSuccess {
			off = append(off, v)
		}
	}
	if len(off) != 1 || !strings.Contains(off[0].Message, "default/vm-node-2-1") {
		t.Errorf("violations %v, want one %s of default/vm-node-2-1", got, RuleVMOffAtSuccess)
	}
}

// Package e2e runs whole upgrades of a simulated Harvester cluster: the
// toolkit's real manager against a real kube-apiserver, with the simulator
// playing Rancher, system-upgrade-controller, CDI, KubeVirt, Longhorn and the
// kubelets. Every scenario checks the invariants as well as the outcome.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/helmv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv("E2E_LOG") != "" {
		log.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		log.SetLogger(logr.Discard())
	}
	// The world's API server, kubelets and nodes get a network of their own.
	os.Exit(testenv.Isolated(m.Run))
}

// scenario is one simulated upgrade.
type scenario struct {
	sim  sim.Config
	spec v1beta1.UpgradePlanSpec
	// annotations are the plan's.
	annotations map[string]string
	// beforePlan runs once the world and the manager run, before the plan
	// is created.
	beforePlan func(t *testing.T, ctx context.Context, run *simrun.Run)
	// during runs while the upgrade runs, with each new state of the plan.
	during func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan)
	// after runs once the plan finished, on the cluster it left.
	after func(t *testing.T, ctx context.Context, run *simrun.Run)
	// restarts kills the manager at a random moment of every phase.
	restarts bool
	// deadlines shortens the manager's deadlines for the scenario.
	deadlines func(*phase.Deadlines)
	// retryWindow keeps a plan that failed for a retry for this long;
	// without it a failed plan is cleaned up at once.
	retryWindow time.Duration
	want        v1beta1.UpgradePlanPhase
	// failure is what the failure message must say.
	failure string
	// broken is an invariant the scenario's world makes the upgrade break
	// (e.g. a pod whose image no node has): it must be, and only it.
	broken string
	// timeout bounds the whole scenario; 3 minutes when unset.
	timeout time.Duration
}

// settings is what the upgrade changes for its duration and must put back.
type settings struct {
	Longhorn        string
	Descheduler     bool
	WorkloadUpdate  []string
	ComparePatches  int
	UpgradeStrategy string
}

func readSettings(t *testing.T, ctx context.Context, c client.Client) settings {
	t.Helper()
	var s settings
	var err error
	if s.Longhorn, _, err = cluster.LonghornSetting(ctx, c, cluster.LonghornReplicaReplenishmentWaitInterval); err != nil {
		t.Fatal(err)
	}
	if s.Descheduler, _, err = cluster.AddonEnabled(ctx, c, cluster.KubeSystemNamespace, cluster.DeschedulerAddon); err != nil {
		t.Fatal(err)
	}
	kv := &kubevirtv1.KubeVirt{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}, kv); err != nil {
		t.Fatal(err)
	}
	s.WorkloadUpdate = kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods
	mc := &managementv3.ManagedChart{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart}, mc); err != nil {
		t.Fatal(err)
	}
	if mc.Spec.Diff != nil {
		s.ComparePatches = len(mc.Spec.Diff.ComparePatches)
	}
	cl := &provisioningv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, cl); err != nil {
		t.Fatal(err)
	}
	if cl.Spec.RKEConfig != nil && cl.Spec.RKEConfig.UpgradeStrategy != nil {
		b, _ := json.Marshal(cl.Spec.RKEConfig.UpgradeStrategy)
		s.UpgradeStrategy = string(b)
	}
	return s
}

// seed is the seed of the random manager restarts: E2E_SEED, or the time,
// logged so that a failure can be replayed.
func seed(t *testing.T) uint64 {
	if s, err := strconv.ParseUint(os.Getenv("E2E_SEED"), 10, 64); err == nil {
		return s
	}
	s := uint64(time.Now().UnixNano())
	t.Logf("restart seed %d (replay with E2E_SEED=%d)", s, s)
	return s
}

func (sc scenario) run(t *testing.T) *v1beta1.UpgradePlan {
	t.Helper()
	timeout := sc.timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	run, err := simrun.Start(ctx, sc.sim)
	if err != nil {
		t.Fatalf("starting the simulated upgrade: %v", err)
	}
	defer func() {
		if err := run.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	}()
	run.PhaseConfig().Deadlines.Reboot = 10 * time.Second
	run.PhaseConfig().RetryWindow = sc.retryWindow
	if sc.deadlines != nil {
		sc.deadlines(&run.PhaseConfig().Deadlines)
	}
	before := readSettings(t, ctx, run.Client)
	if sc.beforePlan != nil {
		sc.beforePlan(t, ctx, run)
	}

	plan, err := run.CreatePlan(ctx, sc.spec, sc.annotations)
	if err != nil {
		t.Fatal(err)
	}
	restarts := run.NewRestarter(seed(t), 200*time.Millisecond)
	final, err := run.WaitFinished(ctx, plan.Name, func(p *v1beta1.UpgradePlan) {
		if sc.during != nil {
			sc.during(t, ctx, run, p)
		}
		if sc.restarts {
			restarts.Observe(p)
		}
	})
	if err := restarts.Wait(); err != nil {
		t.Errorf("restarting the manager: %v", err)
	}
	if err != nil {
		t.Fatalf("%v\nlast state: %+v\ninvariants violated so far: %v\n%s", err, final, run.Checker.Violations(), worldPods(ctx, run))
	}
	// The invariants first: a broken one often explains a wrong outcome.
	violations, err := run.Violations(ctx, plan.Name)
	if err != nil {
		t.Fatal(err)
	}
	brokenSeen := false
	for _, v := range violations {
		if v.Rule == sc.broken {
			brokenSeen = true
			t.Logf("invariant %s violated, as the scenario wants: %s", v.Rule, v.Message)
			continue
		}
		t.Errorf("invariant %s violated: %s", v.Rule, v.Message)
	}
	if sc.broken != "" && !brokenSeen {
		t.Errorf("invariant %s held; the scenario's world should have broken it", sc.broken)
	}
	if final.Status.CurrentPhase != sc.want {
		c := final.Condition(v1beta1.ConditionProgressing)
		t.Fatalf("plan ended in %s, want %s (%+v)", final.Status.CurrentPhase, sc.want, c)
	}
	if sc.failure != "" {
		if c := final.Condition(v1beta1.ConditionProgressing); c == nil || !strings.Contains(c.Message, sc.failure) {
			t.Errorf("failure message %+v does not say %q", c, sc.failure)
		}
	}
	if sc.want == v1beta1.PhaseSucceeded {
		checkVerified(t, final)
	}
	for _, w := range run.Env.UnknownFields.Seen() {
		t.Errorf("a write had a field the real schema does not have (the API server dropped it): %s", w)
	}
	if after := readSettings(t, ctx, run.Client); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("settings not restored:\nbefore %+v\nafter  %+v", before, after)
	}
	if sc.restarts {
		t.Logf("the manager was restarted %d times", run.Restarts())
	}
	if sc.after != nil {
		sc.after(t, ctx, run)
	}
	return final
}

func TestOneNode(t *testing.T) {
	p := scenario{sim: sim.Config{Nodes: 1}, want: v1beta1.PhaseSucceeded}.run(t)
	if s := p.Status.NodeUpgradeStatuses["node-1"].State; s != v1beta1.NodeStateImageCleaned {
		t.Errorf("node-1 ends in %s", s)
	}
}

func TestThreeNodes(t *testing.T) {
	var overlap string
	p := scenario{sim: sim.Config{Nodes: 3, Witness: true}, want: v1beta1.PhaseSucceeded, after: clusterComponentsUpgraded,
		during: func(_ *testing.T, _ context.Context, _ *simrun.Run, p *v1beta1.UpgradePlan) {
			if overlap == "" {
				overlap = cleanedWhileUpgrading(p)
			}
		}}.run(t)
	if len(p.Status.NodeUpgradeStatuses) != 4 {
		t.Errorf("node statuses %v", p.Status.NodeUpgradeStatuses)
	}
	// Each node's old images go as soon as it is upgraded, not after the
	// last node.
	if overlap == "" {
		t.Error("no node's image cleanup overlapped another node's upgrade")
	}
	t.Log(overlap)
}

// cleanedWhileUpgrading names the nodes being cleaned, or cleaned, while
// others are still to be upgraded; "" when there are none.
func cleanedWhileUpgrading(p *v1beta1.UpgradePlan) string {
	if p.Status.CurrentPhase != v1beta1.PhaseNodeUpgrading {
		return ""
	}
	var cleaning, todo []string
	for name, st := range p.Status.NodeUpgradeStatuses {
		switch {
		case st.State == v1beta1.NodeStateImageCleaning || st.State == v1beta1.NodeStateImageCleaned:
			cleaning = append(cleaning, name+" "+string(st.State))
		case !nodestate.Finished(st.State):
			todo = append(todo, name+" "+string(st.State))
		}
	}
	if len(cleaning) == 0 || len(todo) == 0 {
		return ""
	}
	slices.Sort(cleaning)
	slices.Sort(todo)
	return fmt.Sprintf("during NodeUpgrade, %s while %s", strings.Join(cleaning, ", "), strings.Join(todo, ", "))
}

// clusterComponentsUpgraded checks what the real cluster-upgrade Job left:
// every component at the release, as the simulated components report it.
func clusterComponentsUpgraded(t *testing.T, ctx context.Context, run *simrun.Run) {
	c := run.Client
	cfg := run.Sim.Config()
	get := func(key client.ObjectKey, obj client.Object) {
		t.Helper()
		if err := c.Get(ctx, key, obj); err != nil {
			t.Errorf("reading %T %s: %v", obj, key, err)
		}
	}
	sv := &managementv3.Setting{}
	get(client.ObjectKey{Name: cluster.RancherServerVersionSetting}, sv)
	if sv.Value != cfg.To.Rancher {
		t.Errorf("Rancher reports %s, want %s", sv.Value, cfg.To.Rancher)
	}
	for name, version := range map[string]string{
		cluster.HarvesterManagedChart: cfg.To.HarvesterChart, cluster.HarvesterCRDManagedChart: cfg.To.HarvesterChart,
		cluster.MonitoringCRDManagedChart: cfg.To.MonitoringChart,
	} {
		mc := &managementv3.ManagedChart{}
		get(client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc)
		if mc.Spec.Version != version || mc.Spec.Paused || mc.Status.Summary.Ready != 1 {
			t.Errorf("ManagedChart %s: version %s, paused %v, %d ready; want %s deployed", name, mc.Spec.Version, mc.Spec.Paused, mc.Status.Summary.Ready, version)
		}
	}
	if left, err := cluster.BundlesNotReady(ctx, c); err != nil || len(left) > 0 {
		t.Errorf("Fleet bundles not ready: %v %v", left, err)
	}
	mon := &harvesterv1beta1.Addon{}
	get(client.ObjectKey{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon}, mon)
	if mon.Spec.Version != cfg.To.MonitoringChart || mon.Status.Status != cluster.AddonStateDeployed || !strings.Contains(mon.Spec.ValuesContent, "metricLabelsAllowlist") {
		t.Errorf("rancher-monitoring: version %s, status %s, values %q", mon.Spec.Version, mon.Status.Status, mon.Spec.ValuesContent)
	}
	kv := &kubevirtv1.KubeVirt{}
	get(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}, kv)
	if kv.Status.ObservedKubeVirtVersion != kv.Status.TargetKubeVirtVersion || kv.Status.TargetKubeVirtVersion == cfg.KubeVirtVersion {
		t.Errorf("KubeVirt observed %s, target %s", kv.Status.ObservedKubeVirtVersion, kv.Status.TargetKubeVirtVersion)
	}
	fc := &fleetv1alpha1.Cluster{}
	get(client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, fc)
	if ptr.Deref(fc.Status.AgentDeployedGeneration, 0) != 2 {
		t.Errorf("Fleet's agent generation %v, want 2: redeployed once", fc.Status.AgentDeployedGeneration)
	}
	hcc := &helmv1.HelmChartConfig{}
	get(client.ObjectKey{Namespace: cluster.KubeSystemNamespace, Name: cluster.RKE2MultusChartConfig}, hcc)
	if hcc.Spec.FailurePolicy != cluster.HelmFailurePolicyAbort {
		t.Errorf("rke2-multus failurePolicy %q", hcc.Spec.FailurePolicy)
	}
}

// TestComponentsThatDoNotReact: a component that never reacts to the
// cluster upgrade fails the plan at the step that waits for it: the steps
// after it did not run.
func TestComponentsThatDoNotReact(t *testing.T) {
	short := clusterupgrade.DefaultTimeouts()
	short.Interval, short.CAPIStable = 20*time.Millisecond, 0
	short.Charts, short.Fleet, short.KubeVirt = 2*time.Second, 2*time.Second, 2*time.Second
	// Longhorn's crashing manager is ready for moments, until the world
	// sees it and crashes it: the window outlasts the world's reaction on
	// a loaded machine.
	short.Longhorn, short.LonghornStable = 10*time.Second, 5*time.Second
	chartVersion := func(ctx context.Context, c client.Client, name string) string {
		mc := &managementv3.ManagedChart{}
		_ = c.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc)
		return mc.Spec.Version
	}
	registrySynced := func(ctx context.Context, c client.Client) bool {
		s := &harvesterv1beta1.Setting{}
		_ = c.Get(ctx, client.ObjectKey{Name: cluster.ContainerdRegistrySetting}, s)
		return s.Annotations[cluster.AnnotationUpgradePatched] != ""
	}
	for component, stoppedBefore := range map[string]func(ctx context.Context, run *simrun.Run) bool{
		// The harvester chart is not changed while its CRD chart is not deployed.
		sim.ComponentFleet: func(ctx context.Context, run *simrun.Run) bool {
			return chartVersion(ctx, run.Client, cluster.HarvesterManagedChart) == strings.TrimPrefix(run.Sim.Config().From.Harvester, "v")
		},
		sim.ComponentFleetAgent: func(ctx context.Context, run *simrun.Run) bool {
			return chartVersion(ctx, run.Client, cluster.HarvesterCRDManagedChart) == strings.TrimPrefix(run.Sim.Config().From.Harvester, "v")
		},
		sim.ComponentKubeVirt: func(ctx context.Context, run *simrun.Run) bool { return !registrySynced(ctx, run.Client) },
		sim.ComponentLonghorn: func(ctx context.Context, run *simrun.Run) bool {
			return registrySynced(ctx, run.Client) && chartVersion(ctx, run.Client, cluster.MonitoringCRDManagedChart) != run.Sim.Config().To.MonitoringChart
		},
	} {
		t.Run(component, func(t *testing.T) {
			scenario{sim: sim.Config{Nodes: 1, ClusterUpgradeTimeouts: &short, Faults: sim.FaultSet{Unresponsive: []string{component}}},
				want: v1beta1.PhaseFailed, failure: "upgrading the cluster's components failed",
				after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
					if !stoppedBefore(ctx, run) {
						t.Errorf("the cluster upgrade went on past the step that waits for %s", component)
					}
				}}.run(t)
		})
	}
}

func TestPauseThenResume(t *testing.T) {
	var sawPaused, resumed bool
	scenario{
		sim:  sim.Config{Nodes: 3},
		spec: v1beta1.UpgradePlanSpec{NodeUpgradeOption: &v1beta1.NodeUpgradeOption{PauseNodes: []string{"node-2"}}},
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			c := p.Condition(v1beta1.ConditionProgressing)
			if resumed || c == nil || !strings.Contains(c.Message, "node upgrade paused: node-2") {
				return
			}
			sawPaused = true
			if p.Status.NodeUpgradeStatuses["node-2"].State != v1beta1.NodeStateUpgradePaused {
				t.Errorf("paused node in %s", p.Status.NodeUpgradeStatuses["node-2"].State)
			}
			// Resume it, as the operator would.
			resumed = true
			before := p.DeepCopy()
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{}
			if err := run.Client.Patch(ctx, p, client.MergeFrom(before)); err != nil {
				t.Errorf("resuming: %v", err)
			}
		},
		want: v1beta1.PhaseSucceeded,
	}.run(t)
	if !sawPaused {
		t.Error("the plan never reported the paused node")
	}
}

func TestRestoreVM(t *testing.T) {
	scenario{sim: sim.Config{Nodes: 3, NonMigratableVMs: 2}, spec: v1beta1.UpgradePlanSpec{RestoreVM: ptr.To(true)},
		want: v1beta1.PhaseSucceeded}.run(t)
}

func TestFailures(t *testing.T) {
	// The job commands' exit code for a wait that gave up, on which the
	// toolkit's Jobs fail at once (their pod failure policy).
	jobFault := func(typ, node string) sim.FaultSet {
		return sim.FaultSet{FailJobs: []sim.JobFault{{Type: typ, Node: node, ExitCode: 4, Message: "waiting for the node's VMs: gave up after 30m"}}}
	}
	tests := map[string]scenario{
		"iso import": {sim: sim.Config{Nodes: 2, Faults: sim.FaultSet{FailImport: &sim.ImportFault{Message: "404 Not Found"}}},
			failure: "could not be imported"},
		// system-upgrade-controller's Job, retried by the real Job
		// controller up to SUC's backoff limit.
		"image preload": {sim: sim.Config{Nodes: 3, Faults: sim.FaultSet{FailJobs: []sim.JobFault{{Type: sim.JobImagePreload, Node: "node-3", Message: "importing images: no space left"}}}},
			failure: "preloading images on node node-3 failed"},
		"cluster upgrade": {sim: sim.Config{Nodes: 2, Faults: jobFault(sim.JobClusterUpgrade, "")},
			failure: "upgrading the cluster's components failed"},
		// The failure quotes the end of the Job's log, which the kubelet
		// serves through the API server.
		"pre-drain": {sim: sim.Config{Nodes: 3, Faults: jobFault(sim.JobPreDrain, "node-2")},
			failure: "matching FailJob rule at index 0); last log lines:"},
		// A failure that may be transient: the real Job controller retries
		// it, with backoff, up to the Job's backoff limit.
		"post-drain, retried to the backoff limit": {sim: sim.Config{Nodes: 3, Faults: sim.FaultSet{FailJobs: []sim.JobFault{{Type: sim.JobPostDrain, Node: "node-2", Message: "connection refused"}}}},
			failure: "upgrading node node-2 failed in PostDrainFailed: Job harvester-system/hvst-upgrade-"},
		// A Job that never ends: the real Job controller stops it at its
		// active deadline.
		"single-node upgrade past its deadline": {sim: sim.Config{Nodes: 1, Faults: sim.FaultSet{FailJobs: []sim.JobFault{{Type: sim.JobSingleNodeUpgrade, Node: "node-1", Reason: "DeadlineExceeded"}}}},
			deadlines: func(d *phase.Deadlines) { d.NodeJob = 15 * time.Second },
			failure:   "upgrading node node-1 failed in SingleNodeUpgradeFailed: Job harvester-system/"},
		"image cleanup": {sim: sim.Config{Nodes: 2, Faults: sim.FaultSet{FailJobs: []sim.JobFault{{Type: sim.JobImageCleanup, Node: "node-2", Message: "crictl rmi: exit status 1"}}}},
			failure: "every node runs the new release, but removing the previous release's images on node node-2 failed"},
		"node never comes back": {sim: sim.Config{Nodes: 2, Faults: sim.FaultSet{NeverReturn: []string{"node-1"}}},
			failure: "the node did not come back on the new OS in time: waiting for the node to come back on \"Harvester v1.8.0\": it is not Ready"},
	}
	for name, sc := range tests {
		t.Run(name, func(t *testing.T) {
			// Each has a world of its own, and most of their time is the
			// Job controller's backoff and deadlines.
			t.Parallel()
			sc.want = v1beta1.PhaseFailed
			sc.run(t)
		})
	}
}

// TestJobsRunOnTheirNodes: every node Job's pod was placed by the real
// scheduler on its node, control-plane nodes and the nodes Rancher cordoned
// before their pre-drain Job included.
func TestJobsRunOnTheirNodes(t *testing.T) {
	placed := map[string]string{}
	scenario{sim: sim.Config{Nodes: 4}, want: v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, _ *v1beta1.UpgradePlan) {
			var pods corev1.PodList
			if err := run.Client.List(ctx, &pods, client.InNamespace(cluster.HarvesterNamespace), client.HasLabels{v1beta1.LabelJobType}); err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" {
					placed[p.Labels[v1beta1.LabelJobType]+"/"+p.Labels[v1beta1.LabelNode]] = p.Spec.NodeName
				}
			}
		}}.run(t)
	for _, typ := range []string{v1beta1.JobTypePreDrain, v1beta1.JobTypePostDrain} {
		for _, n := range []string{"node-1", "node-2", "node-3", "node-4"} {
			if got := placed[typ+"/"+n]; got != n {
				t.Errorf("the %s Job of %s ran on %q", typ, n, got)
			}
		}
	}
}

// TestJobThatCannotBeScheduled: a node tainted with a taint the upgrade
// does not tolerate once the cluster is upgraded, before its pre-drain Job (a
// taint before the cluster upgrade would rightly hold Longhorn's new
// manager off the node, and the cluster upgrade with it): the
// plan says which node and why while it waits, and fails at the Job's
// deadline with the scheduler's reason.
func TestJobThatCannotBeScheduled(t *testing.T) {
	var tainted, reported bool
	scenario{sim: sim.Config{Nodes: 3}, deadlines: func(d *phase.Deadlines) { d.NodeJob = 20 * time.Second }, want: v1beta1.PhaseFailed,
		failure: "its pod hvst-upgrade-",
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if c := p.Condition(v1beta1.ConditionProgressing); c != nil && strings.Contains(c.Message, "cannot be scheduled on node node-3") &&
				strings.Contains(c.Message, "untolerated taint") {
				reported = true
			}
			if tainted || p.Status.CurrentPhase != v1beta1.PhaseNodeUpgrading {
				return
			}
			tainted = true
			n := &corev1.Node{}
			if err := run.Client.Get(ctx, client.ObjectKey{Name: "node-3"}, n); err != nil {
				t.Fatal(err)
			}
			before := n.DeepCopy()
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Value: "disk", Effect: corev1.TaintEffectNoSchedule})
			if err := run.Client.Patch(ctx, n, client.MergeFrom(before)); err != nil {
				t.Fatal(err)
			}
		}}.run(t)
	if !reported {
		t.Error("while node-3's Job waited, the plan never said that its pod cannot be scheduled there and why")
	}
}

// TestRestartsInEveryPhase kills the manager at a random moment of every
// phase; the upgrade still succeeds with every invariant held.
func TestRestartsInEveryPhase(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", nodes), func(t *testing.T) {
			// Slow enough that restarts land inside phases, fast enough for CI.
			p := scenario{sim: sim.Config{Nodes: nodes, Timing: halfDemoTiming()}, spec: v1beta1.UpgradePlanSpec{RestoreVM: ptr.To(true)},
				restarts: true, want: v1beta1.PhaseSucceeded}.run(t)
			checkPhasesOnce(t, p)
		})
	}
}

// TestPauseInEveryPhase pauses the plan in every phase it is seen in, holds
// it at the safe point for a while and resumes it: while held the plan
// stays in its phase and no node moves, and the upgrade still succeeds,
// verified, with every phase entered once (no deadline ran out while held).
func TestPauseInEveryPhase(t *testing.T) {
	const hold = 2 * time.Second
	var (
		mu        sync.Mutex
		pausedIn  = map[v1beta1.UpgradePlanPhase]bool{}
		heldIn    = map[v1beta1.UpgradePlanPhase]bool{}
		held      []string
		holding   bool
		heldPhase v1beta1.UpgradePlanPhase
		heldNodes string
	)
	setPaused := func(ctx context.Context, run *simrun.Run, name string, paused bool) error {
		p := &v1beta1.UpgradePlan{}
		if err := run.Client.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			return err
		}
		before := p.DeepCopy()
		p.Spec.Paused = ptr.To(paused)
		return run.Client.Patch(ctx, p, client.MergeFrom(before))
	}
	nodeStates := func(p *v1beta1.UpgradePlan) string {
		var out []string
		for n, st := range p.Status.NodeUpgradeStatuses {
			out = append(out, n+"="+string(st.State))
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	final := scenario{sim: sim.Config{Nodes: 3, Timing: halfDemoTiming()}, spec: v1beta1.UpgradePlanSpec{RestoreVM: ptr.To(true)}, want: v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			mu.Lock()
			defer mu.Unlock()
			cur := p.Status.CurrentPhase
			c := p.Condition(v1beta1.ConditionProgressing)
			switch {
			case holding:
				// Nothing of the plan moves while it is held.
				if cur != heldPhase || nodeStates(p) != heldNodes {
					t.Errorf("while held in %s the plan moved: phase %s, nodes %s (were %s)", heldPhase, cur, nodeStates(p), heldNodes)
				}
			case !p.IsPaused() && cur != "" && !cur.IsTerminal() && !pausedIn[cur]:
				pausedIn[cur] = true
				if err := setPaused(ctx, run, p.Name, true); err != nil {
					t.Error(err)
				}
			case p.IsPaused() && c != nil && c.Reason == v1beta1.ReasonPaused && !heldIn[cur]:
				// Once per phase: a change seen after the timer let go, but
				// before the resume reached the API server, still shows
				// the plan paused. A pause asked in one phase may land in
				// the next: that one is not paused again.
				heldIn[cur], pausedIn[cur] = true, true
				holding, heldPhase, heldNodes = true, cur, nodeStates(p)
				// The plan changes nothing while held: resume it from
				// a timer, not from the next change.
				time.AfterFunc(hold, func() {
					mu.Lock()
					held, holding = append(held, string(heldPhase)), false
					mu.Unlock()
					if err := setPaused(ctx, run, p.Name, false); err != nil {
						t.Error(err)
					}
				})
			}
		}}.run(t)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("held in %v", held)
	if len(held) < 5 || !slices.Contains(held, string(v1beta1.PhaseNodeUpgrading)) && !slices.Contains(held, string(v1beta1.PhaseNodeUpgraded)) {
		t.Errorf("the plan was held only in %v: want most phases, NodeUpgrade among them", held)
	}
	checkPhasesOnce(t, final)
}

// halfDemoTiming is the demo's timing with Jobs twice as fast: phases long
// enough to act inside, short enough for CI.
func halfDemoTiming() sim.Timing {
	timing := sim.DemoTiming()
	for k, v := range timing.Jobs {
		timing.Jobs[k] = v / 2
	}
	return timing
}

// checkPhasesOnce: the plan entered no phase twice.
func checkPhasesOnce(t *testing.T, p *v1beta1.UpgradePlan) {
	t.Helper()
	seen := map[v1beta1.UpgradePlanPhase]bool{}
	for _, e := range p.Status.PhaseTransitionTimestamps {
		if seen[e.Phase] {
			t.Errorf("phase %s entered twice", e.Phase)
		}
		seen[e.Phase] = true
	}
}

// TestHealthGateWaitsForRebuild: Rancher moves to the next node as soon as
// the last one is back, while Longhorn still rebuilds the replicas that
// node held; the health gate holds the next drain, named, until every
// volume is healthy again. Meanwhile the node's status counts its replicas
// being rebuilt, after its reboot only: each node holds a replica of each of
// the three volumes.
func TestHealthGateWaitsForRebuild(t *testing.T) {
	timing := sim.DemoTiming()
	timing.ReplicaRebuild = 3 * time.Second
	states := map[string]v1beta1.NodeUpgradeState{}
	held := false
	rebuilding := map[string]int32{}
	scenario{sim: sim.Config{Nodes: 3, Timing: timing}, want: v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			var vols longhornv1beta2.VolumeList
			if err := run.Client.List(ctx, &vols); err != nil {
				t.Fatal(err)
			}
			var degraded []string
			for _, v := range vols.Items {
				if v.Status.Robustness != cluster.LonghornRobustnessHealthy {
					degraded = append(degraded, v.Name+"="+v.Status.Robustness)
				}
			}
			for node, st := range p.Status.NodeUpgradeStatuses {
				if strings.HasPrefix(st.Message, nodestate.HealthGatePrefix) && strings.Contains(st.Message, "replicas missing or rebuilding") {
					held = true
				}
				if st.State == v1beta1.NodeStatePreDraining && states[node] != st.State && len(degraded) > 0 {
					t.Errorf("node %s began its drain while volumes %v were not healthy", node, degraded)
				}
				states[node] = st.State
				rebuilding[node] = max(rebuilding[node], st.ReplicasRebuilding)
				if st.ReplicasRebuilding > 0 && st.PreviousBootID == "" {
					t.Errorf("node %s counts %d replicas rebuilding before its reboot", node, st.ReplicasRebuilding)
				}
			}
		}}.run(t)
	if !held {
		t.Error("the health gate never held a node while a volume rebuilt")
	}
	if want := map[string]int32{"node-1": 3, "node-2": 3, "node-3": 3}; !maps.Equal(rebuilding, want) {
		t.Errorf("most replicas seen rebuilding per node %v, want %v", rebuilding, want)
	}
}

// TestVersionIsSnapshotted: editing the Version during the upgrade changes
// nothing for the running plan.
func TestVersionIsSnapshotted(t *testing.T) {
	var edited bool
	p := scenario{sim: sim.Config{Nodes: 1}, want: v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if edited || p.Status.Version == nil {
				return
			}
			edited = true
			v := &harvesterv1beta1.Version{}
			if err := run.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: *p.Spec.Version}, v); err != nil {
				t.Fatal(err)
			}
			v.Spec.ISOURL = "https://elsewhere.example.com/other.iso"
			if err := run.Client.Update(ctx, v); err != nil {
				t.Fatal(err)
			}
		}}.run(t)
	if strings.Contains(p.Status.Version.ISOURL, "elsewhere") || !slices.Contains([]bool{edited}, true) {
		t.Errorf("version snapshot %+v (edited %v)", p.Status.Version, edited)
	}
}

// checkVerified: a Succeeded plan lists the checks it ran, every one passed.
func checkVerified(t *testing.T, p *v1beta1.UpgradePlan) {
	t.Helper()
	want := []string{
		"ClusterUpgrade/HarvesterVersion", "ClusterUpgrade/HarvesterCharts", "ClusterUpgrade/RancherVersion",
		"ClusterUpgrade/ManagedCharts", "ClusterUpgrade/Addons",
		"Final/HarvesterVersion", "Final/NodesUpgraded", "Final/SettingsRestored", "Final/NothingLeft",
	}
	got := map[string]v1beta1.Check{}
	for _, c := range p.Status.Checks {
		got[c.Name] = c
	}
	for _, name := range want {
		c, ok := got[name]
		if !ok || c.Result != v1beta1.CheckPassed {
			t.Errorf("check %s: %+v, want Passed (checks %+v)", name, c, p.Status.Checks)
		}
	}
	if c := got["Final/NodesUpgraded"]; !strings.Contains(c.Message, "Harvester v1.8.0") {
		t.Errorf("Final/NodesUpgraded does not name the OS image: %q", c.Message)
	}
}

// TestLies: for each way a step can report success while its effect is
// missing, the plan never reaches Succeeded, and its message names the node
// or object with the value expected and the value seen. Each case logs the
// time from the lie to the Failed phase.
func TestLies(t *testing.T) {
	short := func(d *phase.Deadlines) {
		d.Verify, d.Rancher, d.Reboot = 5*time.Second, 8*time.Second, 8*time.Second
	}
	empty := func(typ, node string) sim.FaultSet {
		return sim.FaultSet{EmptyJobs: []sim.JobFault{{Type: typ, Node: node}}}
	}
	tests := map[string]struct {
		sc scenario
		// since is when the lie was told: the moment the plan entered a
		// phase, or node-2 a state.
		phase v1beta1.UpgradePlanPhase
		state v1beta1.NodeUpgradeState
		// within bounds the time from the lie to Failed.
		within time.Duration
	}{
		"the cluster-upgrade Job does nothing": {
			sc: scenario{sim: sim.Config{Nodes: 2, Faults: empty(sim.JobClusterUpgrade, "")},
				failure: "ManagedChart fleet-local/harvester asks for version 1.7.1, expected 1.8.0"},
			phase: v1beta1.PhaseClusterUpgrading, within: 4 * time.Second,
		},
		"Harvester never reports the new version": {
			sc: scenario{sim: sim.Config{Nodes: 2, Faults: sim.FaultSet{StuckVersion: true}},
				failure: "Harvester reports version v1.7.1 (Setting harvesterhci.io server-version), expected v1.8.0"},
			phase: v1beta1.PhaseClusterUpgrading, within: 5*time.Second + 4*time.Second,
		},
		"a node boots its old OS image": {
			sc: scenario{sim: sim.Config{Nodes: 3, Faults: sim.FaultSet{FallbackBoot: []string{"node-2"}}},
				failure: `upgrading node node-2 failed in PostDrainFailed: the node came back from its reboot`},
			state: v1beta1.NodeStateWaitingReboot, within: 4 * time.Second,
		},
		"Rancher never applies a node's RKE2 plan": {
			sc: scenario{sim: sim.Config{Nodes: 3, Faults: sim.FaultSet{PlanNeverApplies: []string{"node-2"}}},
				failure: "upgrading node node-2 failed in PostDrainFailed: waiting for Rancher to drain the node and upgrade RKE2 to v1.35.2+rke2r1; Rancher reports: machine custom-"},
			state: v1beta1.NodeStatePreDrained, within: 8*time.Second + 4*time.Second,
		},
		"a kubelet keeps its old version": {
			sc: scenario{sim: sim.Config{Nodes: 3, Faults: sim.FaultSet{KubeletStaysOld: []string{"node-2"}}},
				failure: "the kubelet reports v1.34.4+rke2r1, not v1.35.2+rke2r1"},
			state: v1beta1.NodeStatePreDrained, within: 8*time.Second + 4*time.Second,
		},
		"the post-drain Job does nothing": {
			sc: scenario{sim: sim.Config{Nodes: 2, Faults: empty(sim.JobPostDrain, "node-2")},
				failure: `the node did not come back on the new OS in time: waiting for the node to reboot into "Harvester v1.8.0": it is Ready on "Harvester v1.7.1"`},
			state: v1beta1.NodeStateWaitingReboot, within: 8*time.Second + 4*time.Second,
		},
		"the single-node Job does nothing": {
			sc: scenario{sim: sim.Config{Nodes: 1, Faults: empty(sim.JobSingleNodeUpgrade, "node-1")},
				failure: `upgrading node node-1 failed in SingleNodeUpgradeFailed: the node did not come back on the new OS in time`},
			within: 8*time.Second + 6*time.Second,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var since time.Time
			tt.sc.want, tt.sc.deadlines = v1beta1.PhaseFailed, short
			tt.sc.during = func(_ *testing.T, _ context.Context, _ *simrun.Run, p *v1beta1.UpgradePlan) {
				node := "node-2"
				if p.Status.SingleNode != nil {
					node = *p.Status.SingleNode
				}
				st := p.Status.NodeUpgradeStatuses[node]
				switch {
				case !since.IsZero():
				case tt.phase != "" && p.Status.CurrentPhase == tt.phase:
					since = time.Now()
				case tt.state != "" && st.State == tt.state:
					since = time.Now()
				case tt.phase == "" && tt.state == "" && st.State == v1beta1.NodeStateWaitingReboot:
					since = time.Now()
				}
			}
			final := tt.sc.run(t)
			failedAt, _ := lastTransition(final, v1beta1.PhaseFailed)
			if since.IsZero() {
				t.Fatal("the plan never reached the moment of the lie")
			}
			took := failedAt.Sub(since.Truncate(time.Second))
			t.Logf("from the lie to Failed: %s (the API stores seconds)", took)
			if took > tt.within {
				t.Errorf("the plan failed %s after the lie, want within %s", took, tt.within)
			}
			if c := final.Condition(v1beta1.ConditionProgressing); c != nil {
				t.Logf("failure: %s", c.Message)
			}
		})
	}
}

// TestFallbackBootFailsAtOnce: a node that comes back from its reboot on
// the old OS image fails the plan within seconds of its return, long
// before the reboot deadline.
func TestFallbackBootFailsAtOnce(t *testing.T) {
	var backAt time.Time
	final := scenario{
		sim:       sim.Config{Nodes: 2, Faults: sim.FaultSet{FallbackBoot: []string{"node-1"}}},
		deadlines: func(d *phase.Deadlines) { d.Reboot = 10 * time.Minute },
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if p.Status.CurrentPhase != v1beta1.PhaseFailed || !backAt.IsZero() {
				return
			}
			n := &corev1.Node{}
			if err := run.Client.Get(ctx, client.ObjectKey{Name: "node-1"}, n); err != nil {
				t.Error(err)
				return
			}
			if c := cluster.ReadyCondition(n); c != nil && c.Status == corev1.ConditionTrue {
				backAt = c.LastTransitionTime.Time
			}
		},
		want:    v1beta1.PhaseFailed,
		failure: `on OS image "Harvester v1.7.1", not the release's "Harvester v1.8.0"`,
	}.run(t)
	st := final.Status.NodeUpgradeStatuses["node-1"]
	if st.State != v1beta1.NodeStatePostDrainFailed || st.Reason != v1beta1.ReasonFallbackBoot {
		t.Fatalf("node-1: %+v", st)
	}
	if !strings.Contains(st.Message, "boot entries") || st.PreviousBootID == "" {
		t.Errorf("node-1's message does not say what to check, or no boot ID was recorded: %+v", st)
	}
	failedAt, _ := lastTransition(final, v1beta1.PhaseFailed)
	if backAt.IsZero() {
		t.Fatal("node-1 was not back Ready when the plan failed")
	}
	took := failedAt.Sub(backAt)
	t.Logf("node-1 back Ready at %s, plan Failed at %s: %s (the API stores seconds)", backAt, failedAt, took)
	if took > 5*time.Second {
		t.Errorf("the plan failed %s after node-1 came back, want within seconds (the reboot deadline is 10m)", took)
	}
}

// lastTransition is when the plan last entered a phase.
func lastTransition(p *v1beta1.UpgradePlan, ph v1beta1.UpgradePlanPhase) (time.Time, bool) {
	for i := len(p.Status.PhaseTransitionTimestamps) - 1; i >= 0; i-- {
		if e := p.Status.PhaseTransitionTimestamps[i]; e.Phase == ph {
			return e.PhaseTransitionTimestamp.Time, true
		}
	}
	return time.Time{}, false
}

// worldPods describes the world's pods, for a failure message: where each
// runs and what keeps it from running.
func worldPods(ctx context.Context, run *simrun.Run) string {
	var pods corev1.PodList
	if err := run.Client.List(context.WithoutCancel(ctx), &pods); err != nil {
		return "listing the pods: " + err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s/%s on %q: %s", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, "; %s=%s %s %s", c.Type, c.Status, c.Reason, c.Message)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/preview"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
)

// TestPreview previews an upgrade of a cluster with VMs that cannot move and
// a degraded volume: the report is checked item by item, and the preview
// made no request but reads.
func TestPreview(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := simrun.Start(ctx, sim.Config{Nodes: 3, NonMigratableVMs: 2, DegradedVolumes: 1})
	if err != nil {
		t.Fatalf("starting the simulated cluster: %v", err)
	}
	defer func() {
		if err := run.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	}()
	counter := apicount.New()
	c, err := client.New(counter.Wrap(run.Env.Config), client.Options{Scheme: cluster.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	version := run.Sim.Config().To.Harvester
	plan := &v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{Version: &version, Force: ptr.To(false), RestoreVM: ptr.To(true),
		NodeUpgradeOption: &v1beta1.NodeUpgradeOption{PauseNodes: []string{"node-3"}}}}
	facts, err := preview.Gather(ctx, c, plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := preview.Build(plan, facts)
	var text strings.Builder
	if err := preview.WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrade-toolkit preflight --version %s --restore-vm --pause-nodes node-3\n%s", version, text.String())
	for k := range counter.Snapshot() {
		if !slices.Contains([]string{"get", "list", "watch"}, k.Verb) {
			t.Errorf("the preview made a %s request on %s", k.Verb, k.Resource)
		}
	}
	if len(counter.Snapshot()) == 0 {
		t.Error("the counter saw no request: the check above proves nothing")
	}

	var fails []string
	for _, ch := range r.Checks {
		if ch.Result == v1beta1.CheckFailed {
			fails = append(fails, ch.Message)
		}
	}
	degraded := "Longhorn volumes are degraded: default/data-1"
	if r.WouldRun || len(fails) != 1 || !strings.Contains(fails[0], degraded) {
		t.Errorf("want exactly one failure, %q; wouldRun %v, failures %q", degraded, r.WouldRun, fails)
	}
	if !slices.ContainsFunc(r.Checks, func(ch preflight.Verdict) bool {
		return ch.Reason == preview.ReasonEligibility && ch.Result == v1beta1.CheckPassed && strings.Contains(ch.Message, "v1.7.1 can be upgraded to "+version)
	}) {
		t.Errorf("eligibility did not pass: %+v", r.Checks)
	}

	want := []struct {
		name     string
		paused   bool
		migrate  []string
		shutDown []string
	}{
		{"node-1", false, []string{"default/vm-node-1-1", "default/vm-node-1-2"}, []string{"default/pinned-node-1-1"}},
		{"node-2", false, []string{"default/vm-node-2-1", "default/vm-node-2-2"}, []string{"default/passthrough-node-2-2"}},
		{"node-3", true, []string{"default/vm-node-3-1", "default/vm-node-3-2"}, nil},
	}
	// The three nodes are control-plane nodes: Rancher takes them in the
	// order of their machines' names.
	var machines capiv1beta1.MachineList
	if err := run.Client.List(ctx, &machines, client.InNamespace(cluster.FleetLocalNamespace)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(machines.Items, func(a, b capiv1beta1.Machine) int { return strings.Compare(a.Name, b.Name) })
	var order, got []string
	for _, m := range machines.Items {
		order = append(order, m.Status.NodeRef.Name)
	}
	for _, n := range r.Nodes {
		got = append(got, n.Name)
	}
	if !slices.Equal(got, order) {
		t.Fatalf("nodes in order %q, want %q (by machine name)", got, order)
	}
	for _, w := range want {
		n := r.Nodes[slices.Index(order, w.name)]
		if n.Role != "control-plane" || !n.Ready || n.Paused != w.paused {
			t.Errorf("%s: %s ready=%v paused=%v; want control-plane ready paused=%v", n.Name, n.Role, n.Ready, n.Paused, w.paused)
		}
		var migrate []string
		for _, m := range n.Migrate {
			migrate = append(migrate, m.Name)
			var others []string
			for _, o := range []string{"node-1", "node-2", "node-3"} {
				if o != n.Name {
					others = append(others, o)
				}
			}
			if !slices.Equal(m.Targets, others) {
				t.Errorf("%s: %s can go to %q, want %q", n.Name, m.Name, m.Targets, others)
			}
		}
		if !slices.Equal(migrate, w.migrate) {
			t.Errorf("%s migrates %q, want %q", n.Name, migrate, w.migrate)
		}
		var stopped []string
		for _, s := range n.ShutDown {
			stopped = append(stopped, s.Name)
			if !s.Restarted || s.Reason == "" {
				t.Errorf("%s: %+v must be restarted (restoreVM) and say why it cannot move", n.Name, s)
			}
		}
		if !slices.Equal(stopped, w.shutDown) {
			t.Errorf("%s shuts down %q, want %q", n.Name, stopped, w.shutDown)
		}
	}
	if len(r.VolumesAtRisk) != 1 {
		t.Fatalf("volumes at risk %+v, want the degraded one", r.VolumesAtRisk)
	}
	if v := r.VolumesAtRisk[0]; v.PVC != "default/data-1" || v.Robustness != "degraded" || v.Node != "node-1" || v.Replicas != 3 {
		t.Errorf("volume at risk %+v", v)
	}
	if got := r.Nodes[slices.Index(order, "node-1")].VolumesAtRisk; len(got) != 1 {
		t.Errorf("node-1 lists volumes at risk %q, want the degraded one", got)
	}
	// 40 for the cluster, 3 x 15 per node, 6 migrations, 2 shutdowns.
	if r.Estimate.Minutes != 40+45+6+4 || !strings.Contains(r.Estimate.Model, "1 paused node(s)") {
		t.Errorf("estimate %d minutes: %s", r.Estimate.Minutes, r.Estimate.Model)
	}
	var plans v1beta1.UpgradePlanList
	if err := run.Client.List(ctx, &plans); err != nil || len(plans.Items) != 0 {
		t.Errorf("plans after the preview: %d (%v)", len(plans.Items), err)
	}
}

// TestDryRun creates a plan with spec.dryRun on the same cluster: it ends in
// Previewed with the report in its status, and the manager changed nothing
// but the plan's status (no Job, no repo, no ISO image, settings as they
// were), without holding the upgrade slot.
func TestDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run, err := simrun.Start(ctx, sim.Config{Nodes: 3, NonMigratableVMs: 2, DegradedVolumes: 1})
	if err != nil {
		t.Fatalf("starting the simulated cluster: %v", err)
	}
	defer func() {
		if err := run.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	}()
	before := readSettings(t, ctx, run.Client)
	run.Counter.Reset()
	plan, err := run.CreatePlan(ctx, v1beta1.UpgradePlanSpec{DryRun: ptr.To(true)}, nil)
	if err != nil {
		t.Fatalf("the webhook must admit a dry run on an unhealthy cluster: %v", err)
	}
	p, err := run.WaitFinished(ctx, plan.Name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.CurrentPhase != v1beta1.PhasePreviewed || len(p.Status.PhaseTransitionTimestamps) != 1 {
		t.Fatalf("phase %s (%+v), want only Previewed", p.Status.CurrentPhase, p.Status.PhaseTransitionTimestamps)
	}
	pv := p.Status.Preview
	if raw, err := yaml.Marshal(p.Status); err == nil {
		t.Logf("status of the dry run:\n%s", raw)
	}
	if pv == nil || pv.WouldRun || len(pv.Failures) != 2 {
		t.Fatalf("preview %+v: want two failures (the VMs that cannot move without restoreVM, the degraded volume)", pv)
	}
	for _, want := range []string{"default/pinned-node-1-1", "Longhorn volumes are degraded: default/data-1"} {
		if !slices.ContainsFunc(pv.Failures, func(f string) bool { return strings.Contains(f, want) }) {
			t.Errorf("no failure mentions %q: %q", want, pv.Failures)
		}
	}
	if len(pv.Nodes) != 3 || len(pv.ShutDownVMs) != 2 || len(pv.VolumesAtRisk) != 1 || pv.EstimatedMinutes == 0 {
		t.Errorf("preview %+v", pv)
	}
	if c := p.Condition(v1beta1.ConditionProgressing); c == nil || c.Reason != v1beta1.ReasonPreviewed {
		t.Errorf("Progressing %+v, want reason Previewed", c)
	}
	if len(p.Finalizers) != 0 {
		t.Errorf("finalizers %q", p.Finalizers)
	}
	if writes := run.Counter.Writes(); len(writes) == 0 {
		t.Error("the manager wrote nothing: the status write is missing")
	} else {
		for k := range writes {
			if k.Resource != "upgradeplans/status" && k.Resource != "events" {
				t.Errorf("the manager wrote %s %s during a dry run", k.Verb, k.Resource)
			}
		}
	}
	var jobs batchv1.JobList
	if err := run.Client.List(ctx, &jobs); err != nil || len(jobs.Items) != 0 {
		t.Errorf("jobs after a dry run: %d (%v)", len(jobs.Items), err)
	}
	for _, obj := range []client.Object{&appsv1.Deployment{}, &harvesterv1beta1.VirtualMachineImage{}} {
		name := names.Repo(plan.Name)
		if _, ok := obj.(*harvesterv1beta1.VirtualMachineImage); ok {
			name = names.ISOImage(plan.Name)
		}
		if err := run.Client.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: name}, obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after a dry run: %v", obj, name, err)
		}
	}
	if after := readSettings(t, ctx, run.Client); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("settings changed:\nbefore %+v\nafter  %+v", before, after)
	}
	violations, err := run.Violations(ctx, plan.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("invariant %s violated: %s", v.Rule, v.Message)
	}
	// The finished dry run holds nothing: another one is admitted.
	if _, err := run.CreatePlan(ctx, v1beta1.UpgradePlanSpec{DryRun: ptr.To(true)}, nil); err != nil {
		t.Errorf("a second dry run: %v", err)
	}
	p.Spec.DryRun = ptr.To(false)
	if err := run.Client.Update(ctx, p); err == nil || !strings.Contains(err.Error(), "spec.dryRun is immutable") {
		t.Errorf("turning dryRun off: %v, want refused as immutable", err)
	}
}

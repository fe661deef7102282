package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/status"
	"github.com/harvester/upgrade-toolkit/internal/upgradelog"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// The scenarios of the VMs' knobs (sim.FaultSet.Migrations, ForcedDrain,
// OwnerStops): the plan never says Succeeded with a VM unexpectedly off, a
// migration in trouble is named within 3 minutes, the operator's consent
// shuts a VM down and the restore starts it again, an owner's stop is
// recorded and does not fail the plan. Every scenario also checks
// sim.RuleVMOffAtSuccess (scenario.run).

// namedWithin is how soon after a migration fails or stops making progress
// the node and the plan's Progressing message must name it.
const namedWithin = 3 * time.Minute

// naming records when the plan first named a VM's migration trouble, in the
// node's status and in its Progressing message.
type naming struct {
	vm, node         string
	inNode, inPlan   time.Time
	nodeMsg, planMsg string
}

func (n *naming) observe(p *v1beta1.UpgradePlan) {
	what := "VM " + n.vm + ": migration "
	if st := p.Status.NodeUpgradeStatuses[n.node]; n.inNode.IsZero() && strings.Contains(st.Message, what) {
		n.inNode, n.nodeMsg = time.Now(), st.Message
	}
	if c := p.Condition(v1beta1.ConditionProgressing); c != nil && n.inPlan.IsZero() && strings.Contains(c.Message, what) {
		n.inPlan, n.planMsg = time.Now(), c.Message
	}
}

// check fails unless the trouble that began at began was named in both
// places within limit.
func (n *naming) check(t *testing.T, began time.Time, limit time.Duration) {
	t.Helper()
	if n.inNode.IsZero() || n.inPlan.IsZero() {
		t.Fatalf("the migration trouble of VM %s was never named (node %s: %q; plan: %q)", n.vm, n.node, n.nodeMsg, n.planMsg)
	}
	for _, at := range []struct {
		where string
		at    time.Time
	}{{"node " + n.node + "'s status", n.inNode}, {"the plan's Progressing message", n.inPlan}} {
		took := at.at.Sub(began)
		t.Logf("VM %s's migration trouble named in %s %s after it began", n.vm, at.where, took.Round(time.Millisecond))
		if took > limit {
			t.Errorf("VM %s's migration trouble was named in %s %s after it began, want within %s", n.vm, at.where, took, limit)
		}
	}
	t.Logf("node %s said: %s", n.node, n.nodeMsg)
}

// ledgerOf reads a plan's VM ledger and logs it.
func ledgerOf(t *testing.T, ctx context.Context, run *simrun.Run, plan string) (*vmledger.Ledger, string) {
	t.Helper()
	l, _, err := vmledger.Read(ctx, run.Client, plan)
	if err != nil || l == nil {
		t.Fatalf("the VM ledger of %s: %v %v", plan, l, err)
	}
	text := string(vmledger.Format(l))
	t.Logf("the VM ledger:\n%s", text)
	return l, text
}

func wantInLedger(t *testing.T, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("the VM ledger does not say %q", w)
		}
	}
}

// checkLedgerShown fails unless `upgrade-toolkit status` shows the ledger
// per node and per VM (the VM's line is want), and the support bundle
// holds the whole ledger.
func checkLedgerShown(t *testing.T, ctx context.Context, run *simrun.Run, want string) {
	t.Helper()
	plan := onlyPlan(t, ctx, run)
	s, err := status.Compute(ctx, run.Client, nil, plan, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	text := status.Text(s)
	t.Logf("upgrade-toolkit status %s:\n%s", plan, text)
	for _, w := range []string{"vms:      2 recorded at the start (ledger harvester-system/" + plan + "-vm-ledger", "  node-1       moved ", want} {
		if !strings.Contains(text, w) {
			t.Errorf("the status does not show %q", w)
		}
	}
	var buf bytes.Buffer
	if err := upgradelog.Archive(ctx, run.Client, nil, plan, "v0.0.0-e2e", time.Now(), &buf); err != nil {
		t.Fatal(err)
	}
	l, _, err := vmledger.Read(ctx, run.Client, plan)
	if err != nil {
		t.Fatal(err)
	}
	if got := untar(t, buf.Bytes())[plan+"/vm-ledger.txt"]; !strings.HasSuffix(got, string(vmledger.Format(l))) || !strings.HasPrefix(got, "# the VM ledger ") {
		t.Errorf("the support bundle's vm-ledger.txt is not the ledger:\n%s", got)
	}
}

// twoVMs is the world of the VMs' scenarios: two nodes, the VM the faults
// hurt on node-1 (RerunOnFailure, Harvester's default) and a calm one on
// node-2.
func twoVMs(timing sim.Timing, name string, faults sim.FaultSet) sim.Config {
	return sim.Config{Nodes: 2, Timing: timing, Faults: faults, VMs: []sim.VM{
		{Namespace: "default", Name: name, Node: "node-1", RunStrategy: "RerunOnFailure"},
		{Namespace: "default", Name: "calm", Node: "node-2"},
	}}
}

// migrationsOf lists a VM's migrations, oldest first.
func migrationsOf(t *testing.T, ctx context.Context, run *simrun.Run, vm string) []kubevirtv1.VirtualMachineInstanceMigration {
	t.Helper()
	ns, name, _ := strings.Cut(vm, "/")
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := run.Client.List(ctx, &migs, client.InNamespace(ns), client.MatchingLabels{cluster.LabelMigrationVMIName: name}); err != nil {
		t.Fatal(err)
	}
	out := migs.Items
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].CreationTimestamp.Before(&out[j-1].CreationTimestamp); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// checkVMsRunning fails unless the final check of the VMs has result and
// its message says each of want.
func checkVMsRunning(t *testing.T, p *v1beta1.UpgradePlan, result v1beta1.CheckResult, want ...string) {
	t.Helper()
	for _, c := range p.Status.Checks {
		if c.Name != phase.GateFinal+"/VMsRunning" {
			continue
		}
		t.Logf("%s: %s: %s", c.Name, c.Result, c.Message)
		if c.Result != result {
			t.Errorf("%s is %s, want %s", c.Name, c.Result, result)
		}
		for _, w := range want {
			if !strings.Contains(c.Message, w) {
				t.Errorf("%s does not say %q", c.Name, w)
			}
		}
		return
	}
	t.Errorf("status.checks has no %s/VMsRunning: %+v", phase.GateFinal, p.Status.Checks)
}

// TestMigrationFailsThenSucceeds: a VM whose first two migrations fail moves
// on the third, after KubeVirt's backoff; the node and the plan name the
// failing migration within 3 minutes, the ledger records each attempt and
// the move, and the plan Succeeds with the VM running.
func TestMigrationFailsThenSucceeds(t *testing.T) {
	const vm = "default/flaky"
	timing := halfDemoTiming()
	timing.MigrationBackoff = 3 * time.Second
	named := &naming{vm: vm, node: "node-1"}
	final := scenario{
		sim:    twoVMs(timing, "flaky", sim.FaultSet{Migrations: []sim.MigrationFault{{VM: vm, Failures: 2}}}),
		want:   v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) { named.observe(p) },
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			// The first failure, from the ledger: KubeVirt keeps an
			// instance's last five finished migrations, and the VM may
			// move again as later nodes drain.
			l, text := ledgerOf(t, ctx, run, onlyPlan(t, ctx, run))
			var first *vmledger.Event
			if rec := l.Find(vm); rec != nil {
				for i := range rec.Events {
					if rec.Events[i].Kind == vmledger.MigrationFailed {
						first = &rec.Events[i]
						break
					}
				}
			}
			if first == nil || first.Migration == "" {
				t.Fatalf("the ledger records no failed migration of %s:\n%s", vm, text)
			}
			named.check(t, first.At, namedWithin)
			wantInLedger(t, text, "default/flaky node=node-1 state=Running leave=migrate",
				"migration-failed node=node-1 mig="+first.Migration+" attempt=1", " attempt=2 ",
				"migrated node=node-1 to=node-2")
			checkLedgerShown(t, ctx, run, "default/flaky (on node-1 at the start): runs on node-2 (live-migrated 1 time(s), 2 failed migration(s))")
		},
	}.run(t)
	checkVMsRunning(t, final, v1beta1.CheckPassed, "2 of 2 VMs that ran when the plan started run")
}

// TestMigrationNeverConverges: a VM whose migration runs and never
// completes is named as making no progress, the node is held past the
// migration deadline and says what the operator can choose; the operator
// consents to the shutdown by the annotation, the upgrade shuts the VM
// down, records it and starts it again after the node's upgrade (without
// spec.restoreVM), and the plan Succeeds with the VM running.
func TestMigrationNeverConverges(t *testing.T) {
	const vm = "default/busy"
	const progress = 10 * time.Second
	named := &naming{vm: vm, node: "node-1"}
	var held time.Time
	var heldMsg string
	final := scenario{
		sim:       twoVMs(halfDemoTiming(), "busy", sim.FaultSet{Migrations: []sim.MigrationFault{{VM: vm, NeverConverges: true}}}),
		deadlines: func(d *phase.Deadlines) { d.MigrationProgress, d.Migration = progress, 20*time.Second },
		want:      v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			named.observe(p)
			st := p.Status.NodeUpgradeStatuses["node-1"]
			if st.Reason != v1beta1.ReasonMigrationHeld || !held.IsZero() {
				return
			}
			held, heldMsg = time.Now(), st.Message
			// The operator reads the choice and consents.
			v := &kubevirtv1.VirtualMachine{}
			if err := run.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "busy"}, v); err != nil {
				t.Error(err)
				return
			}
			before := v.DeepCopy()
			if v.Annotations == nil {
				v.Annotations = map[string]string{}
			}
			v.Annotations[v1beta1.AnnotationShutdownForUpgrade] = p.Name
			if err := run.Client.Patch(ctx, v, client.MergeFrom(before), client.FieldOwner("kubectl-annotate")); err != nil {
				t.Error(err)
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			migs := migrationsOf(t, ctx, run, vm)
			if len(migs) == 0 {
				t.Fatalf("VM %s was never migrated", vm)
			}
			// KubeVirt's progress timeout is the longest a migration may
			// show no progress before it counts as such: naming it must
			// take at most the rest of the 3 minutes.
			began := migs[0].CreationTimestamp.Time.Add(progress)
			named.check(t, began, namedWithin-phase.DefaultConfig().Deadlines.MigrationProgress)
			if held.IsZero() {
				t.Fatal("node-1 was never held for the operator's choice")
			}
			t.Logf("node-1 held: %s", heldMsg)
			for _, w := range []string{"held since", "has run", "without completing", v1beta1.AnnotationRetryMigration, v1beta1.AnnotationShutdownForUpgrade + "="} {
				if !strings.Contains(heldMsg, w) {
					t.Errorf("the held node does not say %q", w)
				}
			}
			v := &kubevirtv1.VirtualMachine{}
			if err := run.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "busy"}, v); err != nil {
				t.Fatal(err)
			}
			if rs := ptr.Deref(v.Spec.RunStrategy, ""); rs != cluster.RunStrategyRerunOnFailure {
				t.Errorf("VM %s was not started again with its run strategy: %s", vm, rs)
			}
			_, text := ledgerOf(t, ctx, run, onlyPlan(t, ctx, run))
			wantInLedger(t, text, "migration-stalled node=node-1", "stopped node=node-1 cause=consent by=\"kubectl-annotate", "started node=node-", "cause=restore")
			if strings.Contains(text, "migration-failed") {
				t.Error("the ledger records the end of a migration of the instance the upgrade shut down as a failure")
			}
		},
	}.run(t)
	checkVMsRunning(t, final, v1beta1.CheckPassed, "2 of 2 VMs that ran when the plan started run")
}

// TestForcedDrainLeavesAVMOff: someone force-drains a RerunOnFailure VM
// off its node (its virt-launcher pod deleted): its instance ends
// Succeeded and KubeVirt does not start it again. The plan does not say
// Succeeded: the final check names the VM, where it ran, what happened and
// what to do, and the plan fails at the verification deadline.
func TestForcedDrainLeavesAVMOff(t *testing.T) {
	const vm = "default/victim"
	final := scenario{
		sim:       twoVMs(halfDemoTiming(), "victim", sim.FaultSet{ForcedDrain: []string{vm}}),
		deadlines: func(d *phase.Deadlines) { d.Verify = 10 * time.Second },
		want:      v1beta1.PhaseFailed,
		failure:   "default/victim (ran on node-1) its instance Succeeded on node-1",
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			_, text := ledgerOf(t, ctx, run, onlyPlan(t, ctx, run))
			wantInLedger(t, text, "ended node=node-1 why=\"its instance Succeeded\"")
		},
	}.run(t)
	c := final.Condition(v1beta1.ConditionProgressing)
	t.Logf("the plan failed: %s", c.Message)
	for _, w := range []string{"stopped by neither the upgrade nor its owner", "virtctl start victim -n default"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("the failure does not say %q", w)
		}
	}
	checkVMsRunning(t, final, v1beta1.CheckPending, "1 of 2 VMs that ran when the plan started run")
}

// TestOwnerStopsAVM: a VM's owner stops it from Harvester's UI as its node
// drains; the ledger records the stop and who made it, and the plan
// Succeeds with the VM off, saying so in its final check.
func TestOwnerStopsAVM(t *testing.T) {
	const vm = "default/owned"
	final := scenario{
		sim:  twoVMs(halfDemoTiming(), "owned", sim.FaultSet{OwnerStops: []string{vm}}),
		want: v1beta1.PhaseSucceeded,
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			if !run.Sim.StoppedByOwner(vm) {
				t.Fatalf("the world did not stop %s", vm)
			}
			_, text := ledgerOf(t, ctx, run, onlyPlan(t, ctx, run))
			wantInLedger(t, text, "stopped node=node-1 cause=owner by=\"harvester (Update at")
			v := &kubevirtv1.VirtualMachine{}
			if err := run.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "owned"}, v); err != nil {
				t.Fatal(err)
			}
			if rs := ptr.Deref(v.Spec.RunStrategy, ""); rs != cluster.RunStrategyHalted {
				t.Errorf("the upgrade started VM %s its owner stopped: %s", vm, rs)
			}
		},
	}.run(t)
	checkVMsRunning(t, final, v1beta1.CheckPassed, "1 of 2 VMs that ran when the plan started run", "stopped by their owners, as recorded: default/owned (ran on node-1) stopped by its owner (harvester (Update at")
}

package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// waitLedger waits until the ledger's text holds every want.
func waitLedger(h *plantest.Harness, plan string, want ...string) *vmledger.Ledger {
	h.T.Helper()
	var l *vmledger.Ledger
	h.Eventually(fmt.Sprintf("the VM ledger to say %q", want), func() (bool, string) {
		l = h.Ledger(plan)
		if l == nil {
			return false, "no ledger"
		}
		text := string(vmledger.Format(l))
		for _, w := range want {
			if !strings.Contains(text, w) {
				return false, text
			}
		}
		return true, ""
	})
	return l
}

// TestLedgerRecordsWhatHappensToTheVMs: the plan records every VM when it
// starts; the ledger's keeper records a failed and a successful migration,
// an owner's stop and who made it, an instance that ended on its own; on a
// draining node it carries out the operator's choices: a retry deletes the
// VM's failed migrations, consent records the VM in the restore list, then
// stops it. The node and the plan's events say what happened.
func TestLedgerRecordsWhatHappensToTheVMs(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(3)
	web, db := h.VM("web", "node-1"), h.VM("db", "node-1")
	app, batch := h.VM("app", "node-2"), h.VM("batch", "node-3")
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	l := waitLedger(h, p.Name, "default/web node=node-1 state=Running leave=migrate", "default/batch node=node-3 state=Running leave=migrate")
	if len(l.Records) != 4 {
		t.Fatalf("the ledger records %d VMs, want 4:\n%s", len(l.Records), vmledger.Format(l))
	}

	h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDraining)
	h.Migration(web, "kubevirt-evacuation-aaaaa", cluster.MigrationPhaseFailed, "node-2", "migration timed out")
	waitLedger(h, p.Name, "migration-failed node=node-1 mig=kubevirt-evacuation-aaaaa attempt=1 why=\"migration timed out\"")
	h.WaitEventually(p.Name, "node-1", "live migration failing: VM default/web: migration kubevirt-evacuation-aaaaa failed at")
	h.WaitEvent(p.Name, "VMMigrationFailing: Live migration kubevirt-evacuation-aaaaa of VM default/web off node node-1 failed: migration timed out")
	if st := h.Get(p.Name).Status.NodeUpgradeStatuses["node-1"]; st.Reason != v1beta1.ReasonMigrationFailing || st.VMs == nil || st.VMs.Failed != 1 || st.VMs.MigrationDeadline == nil {
		t.Errorf("node-1: %+v, vms %+v", st, st.VMs)
	}

	// The operator tries again: the failed migration goes.
	h.ChangeVM(web, "kubectl-annotate", func(vm *kubevirtv1.VirtualMachine) {
		vm.Annotations = map[string]string{v1beta1.AnnotationRetryMigration: "1"}
	})
	waitLedger(h, p.Name, "migration-retried node=node-1 by=\"kubectl-annotate (Update at", "value=1")
	h.Eventually("the failed migration to be deleted", func() (bool, string) {
		err := h.C.Get(h.Ctx(), client.ObjectKey{Namespace: plantest.VMNamespace, Name: "kubevirt-evacuation-aaaaa"}, &kubevirtv1.VirtualMachineInstanceMigration{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	h.WaitEvent(p.Name, "VMMigrationRetried: Trying the live migration of VM default/web off node node-1 again")
	h.Migration(web, "kubevirt-evacuation-bbbbb", cluster.MigrationPhaseSucceeded, "node-2", "")
	waitLedger(h, p.Name, "migrated node=node-1 to=node-2")
	h.Eventually("node-1's counts", func() (bool, string) {
		st := h.Get(p.Name).Status.NodeUpgradeStatuses["node-1"]
		return st.VMs != nil && st.VMs.Moved == 1 && st.VMs.Failed == 0 && st.Reason == "", fmt.Sprintf("%+v %+v\n%s", st, st.VMs, vmledger.Format(h.Ledger(p.Name)))
	})

	// The operator lets the upgrade shut db down: recorded, then stopped.
	h.ChangeVM(db, "kubectl-annotate", func(vm *kubevirtv1.VirtualMachine) {
		vm.Annotations = map[string]string{v1beta1.AnnotationShutdownForUpgrade: p.Name}
	})
	h.Eventually("db to be halted by the upgrade", func() (bool, string) {
		vm := h.GetVM(db)
		return cluster.RunStrategy(vm) == cluster.RunStrategyHalted && vm.Annotations[v1beta1.AnnotationRestoreRunStrategy] == cluster.RunStrategyRerunOnFailure,
			fmt.Sprintf("%v %v", vm.Spec.RunStrategy, vm.Annotations)
	})
	if vms, _, err := helper.RecordedVMs(h.Ctx(), h.C, p.Name, "node-1"); err != nil || helper.FormatVMList(vms) != db.String() {
		t.Errorf("restore list of node-1: %v %v", vms, err)
	}
	h.InstanceEnds(db, "") // KubeVirt deletes the instance of a halted VM
	waitLedger(h, p.Name, "stopped node=node-1 cause=consent by=\"kubectl-annotate (Update at")
	h.WaitEvent(p.Name, "VMShutdownConsented: Shut down VM default/db on node node-1 with the operator's consent")

	// app's owner stops it from Harvester's UI; batch's instance ends on
	// its own.
	h.ChangeVM(app, "harvester", func(vm *kubevirtv1.VirtualMachine) { vm.Spec.RunStrategy = ptr.To(cluster.RunStrategyHalted) })
	h.InstanceEnds(app, "")
	h.InstanceEnds(batch, "Succeeded")
	waitLedger(h, p.Name, "stopped node=node-2 cause=owner by=\"harvester (Update at", "ended node=node-3 why=\"its instance Succeeded\"")
	h.WaitEvent(p.Name, "VMStoppedByOwner: VM default/app was stopped by someone other than the upgrade (harvester (Update at")
	h.WaitEvent(p.Name, "VMUnexpectedlyOff: VM default/batch: its instance Succeeded on node node-3, stopped by neither the upgrade nor its owner")
}

// TestHeldForTheOperatorsChoice: a VM whose migration keeps failing holds
// its node once the migration deadline has passed, and the node says what
// the operator can choose; the deadline does not run while the plan is
// paused.
func TestHeldForTheOperatorsChoice(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(2)
	web := h.VM("web", "node-1")
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	waitLedger(h, p.Name, "default/web node=node-1")
	h.RancherAsks("node-1", cluster.AnnotationRancherPreDrain)
	h.WaitNodeState(p.Name, "node-1", v1beta1.NodeStatePreDraining)
	h.Migration(web, "kubevirt-evacuation-aaaaa", cluster.MigrationPhaseFailed, "node-2", "migration timed out")
	h.WaitEventually(p.Name, "node-1", "the node is held for your choice at")

	// Paused: the deadline waits; resumed after the deadline would have
	// passed, the node is not held yet.
	h.SetPaused(p.Name, true)
	h.Eventually("the pause to be seen", func() (bool, string) {
		ps := h.Get(p.Name).Status.Pauses
		return len(ps) == 1 && ps[0].End == nil, fmt.Sprintf("%+v", ps)
	})
	deadline := h.Get(p.Name).Status.NodeUpgradeStatuses["node-1"].VMs.MigrationDeadline.Time
	h.Clock.Step(h.Cfg.Deadlines.Migration)
	h.SetPaused(p.Name, false)
	// The trouble is stamped by the migration object's (real) time, a few
	// seconds into the pause on the plan's clock: the deadline moves on by
	// the part of the pause after it.
	h.Eventually("the deadline to move on by the pause", func() (bool, string) {
		st := h.Get(p.Name).Status.NodeUpgradeStatuses["node-1"]
		return st.VMs != nil && st.VMs.MigrationDeadline != nil && st.VMs.MigrationDeadline.After(deadline.Add(h.Cfg.Deadlines.Migration-time.Minute)),
			fmt.Sprintf("%+v, deadline before the pause %s, pauses %+v", st.VMs, deadline, h.Get(p.Name).Status.Pauses)
	})
	if st := h.Get(p.Name).Status.NodeUpgradeStatuses["node-1"]; st.Reason != v1beta1.ReasonMigrationFailing {
		t.Fatalf("node-1 held although the plan was paused: %+v", st)
	}

	h.Clock.Step(h.Cfg.Deadlines.Migration + time.Second)
	h.Touch(p.Name)
	h.WaitEventually(p.Name, "node-1", "held since")
	st := h.Get(p.Name).Status.NodeUpgradeStatuses["node-1"]
	for _, want := range []string{
		"VM default/web: migration kubevirt-evacuation-aaaaa failed at",
		"(1 attempt(s), since ",
		"kubectl annotate vm web -n default " + v1beta1.AnnotationRetryMigration + `="$(date +%s)" --overwrite`,
		"kubectl annotate vm web -n default " + v1beta1.AnnotationShutdownForUpgrade + "=" + p.Name,
	} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("node-1's message %q does not say %q", st.Message, want)
		}
	}
	if st.Reason != v1beta1.ReasonMigrationHeld {
		t.Errorf("node-1's reason %q", st.Reason)
	}
	h.WaitEvent(p.Name, "VMMigrationHeld: Node node-1: held since")
	h.WaitProgressing(p.Name, "upgrading node node-1 (PreDraining: held since")
}

// TestLedgerKeptInShards: a ledger of more than vmledger.ShardSize VMs is
// kept in ConfigMaps of ShardSize VMs each, the first naming how many, and
// a change of one VM rewrites only the ConfigMap that holds it.
func TestLedgerKeptInShards(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(3)
	n := 2*vmledger.ShardSize + 7
	var last types.NamespacedName
	for i := range n {
		last = h.VM(fmt.Sprintf("vm-%03d", i), nodes[i%len(nodes)])
	}
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	l := waitLedger(h, p.Name, "default/"+last.Name+" node=")
	if len(l.Records) != n {
		t.Fatalf("the ledger records %d VMs, want %d", len(l.Records), n)
	}
	versions := func() []string {
		var out []string
		for i := range vmledger.Shards(n) {
			cm := &corev1.ConfigMap{}
			if err := h.C.Get(h.Ctx(), vmledger.ShardKey(p.Name, i), cm); err != nil {
				t.Fatal(err)
			}
			if got, want := cm.Data[vmledger.KeyShards], "3"; i == 0 && got != want {
				t.Errorf("%s: %s=%q, want %q", cm.Name, vmledger.KeyShards, got, want)
			}
			out = append(out, cm.ResourceVersion)
		}
		return out
	}
	before := versions()
	if len(before) != 3 {
		t.Fatalf("%d ConfigMaps, want 3", len(before))
	}
	if err := h.C.Get(h.Ctx(), vmledger.ShardKey(p.Name, 3), &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("a fourth ConfigMap: %v", err)
	}

	// The last VM is in the last ConfigMap: only it is written.
	h.Migration(last, "kubevirt-evacuation-zzzzz", cluster.MigrationPhaseFailed, nodes[0], "migration timed out")
	waitLedger(h, p.Name, "mig=kubevirt-evacuation-zzzzz")
	after := versions()
	if after[0] != before[0] || after[1] != before[1] || after[2] == before[2] {
		t.Errorf("resource versions %v, then %v: want only the third ConfigMap written", before, after)
	}
}

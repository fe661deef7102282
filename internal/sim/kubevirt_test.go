package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
)

// taintForDrain taints a node as the pre-drain Job does, which makes the
// simulated KubeVirt evacuate it.
func taintForDrain(t *testing.T, node string) {
	t.Helper()
	n := &corev1.Node{}
	get(t, client.ObjectKey{Name: node}, n)
	before := n.DeepCopy()
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: cluster.TaintKubeVirtDrain, Value: cluster.KubeVirtDrainTaintValue, Effect: corev1.TaintEffectNoSchedule})
	if err := env.Client.Patch(context.Background(), n, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
}

// migrationsOf lists an instance's migrations, oldest first.
func migrationsOf(t *testing.T, vmi string) []kubevirtv1.VirtualMachineInstanceMigration {
	t.Helper()
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := env.Client.List(context.Background(), &migs, client.InNamespace("default"), client.MatchingLabels{labelMigrationVMIName: vmi}); err != nil {
		t.Fatal(err)
	}
	sortByCreation(migs.Items)
	return migs.Items
}

func phases(migs []kubevirtv1.VirtualMachineInstanceMigration) string {
	var out []string
	for _, m := range migs {
		out = append(out, m.Status.Phase)
	}
	return strings.Join(out, ",")
}

// TestMigrationFaults: a VM whose migrations fail twice moves on the third,
// after KubeVirt's backoff, each failure with its reason on the migration
// and the instance; a VM whose migrations never converge keeps one running.
func TestMigrationFaults(t *testing.T) {
	const backoff = 2 * time.Second
	cfg := Config{Nodes: 3, NonMigratableVMs: -1, Timing: Timing{Migration: 100 * time.Millisecond, MigrationBackoff: backoff},
		Faults: FaultSet{Migrations: []MigrationFault{
			{VM: "default/vm-node-2-1", Failures: 2},
			{VM: "default/vm-node-2-2", NeverConverges: true},
		}}}
	start(t, cfg)
	began := time.Now()
	taintForDrain(t, "node-2")
	vmi := &kubevirtv1.VirtualMachineInstance{}
	eventually(t, 20*time.Second, "vm-node-2-1 to move after two failures", func() (bool, string) {
		get(t, client.ObjectKey{Namespace: "default", Name: "vm-node-2-1"}, vmi)
		return vmi.Status.NodeName != "node-2", phases(migrationsOf(t, "vm-node-2-1"))
	})
	// KubeVirt's backoff: 2 s after the first failure, 4 s after the
	// second, from failure times the API stores in whole seconds.
	if took := time.Since(began); took < 3*backoff-2*time.Second {
		var times []string
		for _, m := range migrationsOf(t, "vm-node-2-1") {
			times = append(times, fmt.Sprintf("%s created %s: %s", m.Name, m.CreationTimestamp.UTC().Format(time.RFC3339), m.Status.PhaseTransitionTimestamps))
		}
		t.Errorf("the VM moved %s after its node was tainted (at %s), within KubeVirt's backoff (%s, then %s); its migrations: %s",
			took, began.UTC().Format(time.RFC3339Nano), backoff, 2*backoff, strings.Join(times, "; "))
	}
	migs := migrationsOf(t, "vm-node-2-1")
	byPhase := map[string][]kubevirtv1.VirtualMachineInstanceMigration{}
	for _, m := range migs {
		byPhase[m.Status.Phase] = append(byPhase[m.Status.Phase], m)
	}
	if len(byPhase[migrationFailed]) != 2 || len(byPhase[migrationSucceeded]) != 1 {
		t.Fatalf("migrations %s, want two Failed and one Succeeded", phases(migs))
	}
	for i, m := range byPhase[migrationFailed] {
		st := m.Status.MigrationState
		if st == nil || !st.Failed || st.FailureReason != migrationFailedReason || st.SourceNode != "node-2" || st.EndTimestamp == nil {
			t.Errorf("failed migration %d: %+v", i, st)
		}
	}
	migs = byPhase[migrationSucceeded]
	if st := vmi.Status.MigrationState; st == nil || !st.Completed || st.MigrationUID != migs[0].UID || st.TargetNode != vmi.Status.NodeName {
		t.Errorf("the instance's migration state %+v", st)
	}
	var events corev1.EventList
	if err := env.Client.List(context.Background(), &events, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	failedEvents := slices.DeleteFunc(events.Items, func(e corev1.Event) bool { return e.Reason != cluster.EventFailedMigration })
	if len(failedEvents) != 2 {
		t.Errorf("%d FailedMigration events, want 2", len(failedEvents))
	}

	never := migrationsOf(t, "vm-node-2-2")
	if len(never) != 1 || never[0].Status.Phase != migrationRunning {
		t.Fatalf("the migration that never converges: %s", phases(never))
	}
	time.Sleep(time.Second)
	if again := migrationsOf(t, "vm-node-2-2"); len(again) != 1 || again[0].Status.Phase != migrationRunning {
		t.Errorf("the migration that never converges ended: %s", phases(again))
	}
}

// TestDrainActors: a force-drained RerunOnFailure VM ends Succeeded and stays
// off until someone starts it; a VM its owner stops is Halted by Harvester's
// API server.
func TestDrainActors(t *testing.T) {
	cfg := Config{Nodes: 2, NonMigratableVMs: -1, VMs: []VM{
		{Name: "killed", Node: "node-1", RunStrategy: runStrategyRerunOnFailure},
		{Name: "stopped", Node: "node-1", RunStrategy: runStrategyRerunOnFailure},
		{Name: "moves", Node: "node-1"},
	}, Faults: FaultSet{ForcedDrain: []string{"default/killed"}, OwnerStops: []string{"default/stopped"}}}
	s := start(t, cfg)
	ctx := context.Background()
	taintForDrain(t, "node-1")
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: "default", Name: name} }
	vm := &kubevirtv1.VirtualMachine{}
	eventually(t, 20*time.Second, "the force-drained VM to be off", func() (bool, string) {
		get(t, key("killed"), vm)
		err := env.Client.Get(ctx, key("killed"), &kubevirtv1.VirtualMachineInstance{})
		return vm.Status.PrintableStatus == "Stopped" && err != nil, fmt.Sprintf("%+v %v", vm.Status, err)
	})
	if ptr.Deref(vm.Spec.RunStrategy, "") != runStrategyRerunOnFailure || vm.Status.RunStrategy != runStrategyRerunOnFailure {
		t.Errorf("the force-drained VM: %+v %+v", vm.Spec, vm.Status)
	}
	eventually(t, 20*time.Second, "the owner's stop", func() (bool, string) {
		get(t, key("stopped"), vm)
		return vm.Status.PrintableStatus == "Stopped", vm.Status.PrintableStatus
	})
	managers := func(vm *kubevirtv1.VirtualMachine) (out []string) {
		for _, e := range vm.ManagedFields {
			out = append(out, e.Manager)
		}
		return out
	}
	if ptr.Deref(vm.Spec.RunStrategy, "") != runStrategyHalted || !slices.Contains(managers(vm), ownerFieldManager) || !s.StoppedByOwner("default/stopped") {
		t.Errorf("the owner's stop: %v by %v", vm.Spec.RunStrategy, managers(vm))
	}
	eventually(t, 20*time.Second, "the third VM to move", func() (bool, string) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		get(t, key("moves"), vmi)
		return vmi.Status.NodeName == "node-2", vmi.Status.NodeName
	})
	// virtctl start asks virt-api, which writes a start request.
	get(t, key("killed"), vm)
	before := vm.DeepCopy()
	vm.Status.StateChangeRequests = []kubevirtv1.StateChangeRequest{{Action: actionStart}}
	if err := env.Client.Status().Patch(ctx, vm, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the started VM to run on node-2", func() (bool, string) {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := env.Client.Get(ctx, key("killed"), vmi); err != nil {
			return false, err.Error()
		}
		get(t, key("killed"), vm)
		return vmi.Status.NodeName == "node-2" && vmi.Status.Phase == vmiPhaseRunning && len(vm.Status.StateChangeRequests) == 0, vmi.Status.NodeName
	})
}

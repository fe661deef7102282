package helper_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	os.Exit(testenv.RunMain(m, &env))
}

func detector(c client.Client, power helper.VMPower) *helper.Detector {
	return &helper.Detector{Client: c, Power: power, Events: &helper.Recorder{Client: c, Component: helper.ComponentDetector}}
}

func restoreList(t *testing.T, plan string) map[string]string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(plan)}, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

// TestShutdownRecordsBeforeStopping: the non-migratable VMs of the node are
// written to the restore list before any of them is stopped; migratable,
// paused and upgrade-repo VMs are left alone; a rerun after the stopped
// instances are gone keeps them recorded.
func TestShutdownRecordsBeforeStopping(t *testing.T) {
	ctx := t.Context()
	n1, n2 := jobtest.Name("node"), jobtest.Name("node")
	jobtest.Node(t, env.Client, n1)
	jobtest.Node(t, env.Client, n2)
	ns := jobtest.Namespace(t, env.Client)
	pinned := jobtest.VM(t, env.Client, ns, "pinned", n1, jobtest.Pinned)
	passthrough := jobtest.VM(t, env.Client, ns, "passthrough", n1, jobtest.HostDevice, jobtest.Running)
	movable := jobtest.VM(t, env.Client, ns, "movable", n1)
	paused := jobtest.VM(t, env.Client, ns, "paused", n1, jobtest.Pinned, jobtest.Paused)
	repo := jobtest.VM(t, env.Client, ns, "repo", n1, jobtest.Pinned, jobtest.UpgradeRepo)
	elsewhere := jobtest.VM(t, env.Client, ns, "elsewhere", n2, jobtest.Pinned)
	plan := jobtest.Plan(t, env.Client, nil)

	var w jobtest.Timeline
	c := jobtest.RecordingClient(env.Config, env.Scheme, &w)
	res, err := detector(c, helper.RunStrategyPower{Client: c}).Shutdown(ctx, plan.Name, n1)
	if err != nil {
		t.Fatal(err)
	}
	wantEntry := ns + "/passthrough," + ns + "/pinned"
	if got := restoreList(t, plan.Name); got[n1] != wantEntry || len(got) != 1 {
		t.Errorf("restore list = %v, want only %s: %s", got, n1, wantEntry)
	}
	// The ConfigMap write comes before the first VM write.
	ops := w.Events()
	cmAt := slices.IndexFunc(ops, func(s string) bool { return strings.Contains(s, "ConfigMap") })
	vmAt := slices.IndexFunc(ops, func(s string) bool { return strings.Contains(s, "VirtualMachine ") })
	if cmAt < 0 || vmAt < 0 || cmAt > vmAt {
		t.Errorf("writes %v: the restore list must be written before any VM is stopped", ops)
	}
	if got, want := res.Stopped, []string{passthrough.String(), pinned.String()}; !slices.Equal(got, want) {
		t.Errorf("stopped %v, want %v", got, want)
	}
	if len(res.Found.Skipped) != 2 {
		t.Errorf("skipped %v, want the paused and the upgrade repo VM", res.Found.Skipped)
	}
	// The paused VM can neither migrate nor be stopped: it blocks the node.
	if err := res.Found.CannotLeave(n1); !errors.Is(err, helper.ErrVMCannotLeave) ||
		!strings.Contains(err.Error(), "VM "+paused.String()+" is paused and cannot live-migrate (pinned by nodeSelector") ||
		!strings.Contains(err.Error(), "virtctl unpause vm paused -n "+ns) {
		t.Errorf("CannotLeave = %v, want ErrVMCannotLeave naming %s and how to unpause it", err, paused)
	}
	for vm, want := range map[types.NamespacedName][2]string{
		pinned:      {cluster.RunStrategyHalted, cluster.RunStrategyRerunOnFailure},
		passthrough: {cluster.RunStrategyHalted, cluster.RunStrategyAlways},
		movable:     {cluster.RunStrategyRerunOnFailure, ""},
		paused:      {cluster.RunStrategyRerunOnFailure, ""},
		repo:        {cluster.RunStrategyRerunOnFailure, ""},
		elsewhere:   {cluster.RunStrategyRerunOnFailure, ""},
	} {
		got := jobtest.GetVM(t, env.Client, vm)
		if s := jobtest.RunStrategyOf(t, env.Client, vm); s != want[0] || got.Annotations[v1beta1.AnnotationRestoreRunStrategy] != want[1] {
			t.Errorf("VM %s: runStrategy %q, recorded %q; want %q, %q", vm, s, got.Annotations[v1beta1.AnnotationRestoreRunStrategy], want[0], want[1])
		}
		if vm == passthrough && got.Spec.Running != nil {
			t.Errorf("VM %s still sets spec.running next to runStrategy", vm)
		}
	}
	cm := cluster.HarvesterNamespace + "/" + names.RestoreVMConfigMap(plan.Name)
	wantEvents := []string{
		"Normal RestoreVMConfigMapCreated vm-live-migrate-detector: ConfigMap " + cm + " created",
		"Normal VMShutdownCompleted vm-live-migrate-detector: Shutdown completed for 2 VM(s) on node " + n1 + ", success: 2, failed: 0",
	}
	if got := jobtest.Events(t, env.Client, plan.Name); !slices.Equal(got, wantEvents) {
		t.Errorf("events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantEvents, "\n"))
	}

	// KubeVirt removes the stopped instances; a restarted job runs again.
	for _, vm := range []types.NamespacedName{pinned, passthrough} {
		vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name}}
		if err := env.Client.Delete(ctx, vmi); err != nil {
			t.Fatal(err)
		}
	}
	w.Reset()
	if _, err := detector(c, helper.RunStrategyPower{Client: c}).Shutdown(ctx, plan.Name, n1); err != nil {
		t.Fatal(err)
	}
	if got := restoreList(t, plan.Name)[n1]; got != wantEntry {
		t.Errorf("after a rerun the entry is %q, want %q kept", got, wantEntry)
	}
	if ops := w.Events(); len(ops) != 0 {
		t.Errorf("a rerun with nothing left to do wrote %v", ops)
	}
	if got := jobtest.Events(t, env.Client, plan.Name); len(got) != 3 || !strings.Contains(got[2], "Shutdown completed for 0 VM(s)") {
		t.Errorf("events after the rerun: %v; want one more VMShutdownCompleted for 0 VMs and no second RestoreVMConfigMapCreated", got)
	}
}

// failingPower fails to stop one VM.
type failingPower struct {
	helper.VMPower
	fail types.NamespacedName
}

func (p failingPower) Stop(ctx context.Context, vm types.NamespacedName) error {
	if vm == p.fail {
		return errors.New("admission webhook denied the request")
	}
	return p.VMPower.Stop(ctx, vm)
}

func TestShutdownReportsVMsThatCouldNotBeStopped(t *testing.T) {
	n1 := jobtest.Name("node")
	jobtest.Node(t, env.Client, n1)
	ns := jobtest.Namespace(t, env.Client)
	a := jobtest.VM(t, env.Client, ns, "a", n1, jobtest.Pinned)
	b := jobtest.VM(t, env.Client, ns, "b", n1, jobtest.HostDevice)
	plan := jobtest.Plan(t, env.Client, nil)

	res, err := detector(env.Client, failingPower{helper.RunStrategyPower{Client: env.Client}, a}).Shutdown(t.Context(), plan.Name, n1)
	if !errors.Is(err, helper.ErrVMShutdown) || !strings.Contains(err.Error(), "admission webhook denied") {
		t.Fatalf("err = %v, want ErrVMShutdown naming the cause", err)
	}
	if !slices.Equal(res.Failed, []string{a.String()}) || !slices.Equal(res.Stopped, []string{b.String()}) {
		t.Errorf("failed %v, stopped %v", res.Failed, res.Stopped)
	}
	if got := restoreList(t, plan.Name)[n1]; got != a.String()+","+b.String() {
		t.Errorf("restore list entry %q: both VMs must be recorded", got)
	}
	events := jobtest.Events(t, env.Client, plan.Name)
	if len(events) != 3 || !strings.HasPrefix(events[2], "Warning VMShutdownFailed vm-live-migrate-detector: Shutdown failed for 1 of 2 VM(s) on node "+n1) {
		t.Errorf("events %v: want a Warning VMShutdownFailed last", events)
	}
}

func kubeVirt(t *testing.T, phase, available string) {
	t.Helper()
	ctx := context.Background()
	kv := &kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(kv), kv); err != nil {
		if err := env.Client.Create(ctx, kv); err != nil {
			t.Fatal(err)
		}
	}
	kv.Status.Phase = phase
	kv.Status.Conditions = []kubevirtv1.Condition{{Type: cluster.ConditionAvailable, Status: available, Message: "components " + phase}}
	if err := env.Client.Status().Update(ctx, kv); err != nil {
		t.Fatal(err)
	}
}

func restorer(timeout time.Duration) *helper.Restorer {
	return &helper.Restorer{Client: env.Client, Power: helper.RunStrategyPower{Client: env.Client}, KubeVirtTimeout: timeout, Interval: 20 * time.Millisecond,
		Events: &helper.Recorder{Client: env.Client, Component: helper.ComponentRestoreVM}}
}

// TestRestoreStartsExactlyTheRecordedVMs: after a shutdown, restore-vm
// starts the node's recorded VMs with their own run strategy and nothing
// else; a recorded VM deleted since is reported.
func TestRestoreStartsExactlyTheRecordedVMs(t *testing.T) {
	ctx := t.Context()
	// Tests of this package share the KubeVirt object: keep it healthy.
	kubeVirt(t, cluster.KubeVirtPhaseDeployed, "True")
	n1, n2 := jobtest.Name("node"), jobtest.Name("node")
	jobtest.Node(t, env.Client, n1)
	jobtest.Node(t, env.Client, n2)
	ns := jobtest.Namespace(t, env.Client)
	pinned := jobtest.VM(t, env.Client, ns, "pinned", n1, jobtest.Pinned)
	always := jobtest.VM(t, env.Client, ns, "always", n1, jobtest.Pinned, jobtest.RunStrategy(cluster.RunStrategyAlways))
	gone := jobtest.VM(t, env.Client, ns, "gone", n1, jobtest.HostDevice)
	other := jobtest.VM(t, env.Client, ns, "other", n2, jobtest.Pinned)
	halted := jobtest.VM(t, env.Client, ns, "halted-by-user", n1, jobtest.RunStrategy(cluster.RunStrategyHalted))
	plan := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) { p.Spec.RestoreVM = ptr.To(true) })
	d := detector(env.Client, helper.RunStrategyPower{Client: env.Client})
	for _, n := range []string{n1, n2} {
		if _, err := d.Shutdown(ctx, plan.Name, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Delete(ctx, jobtest.GetVM(t, env.Client, gone)); err != nil {
		t.Fatal(err)
	}

	res, err := restorer(time.Second).Restore(ctx, plan.Name, n1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Started, []string{always.String(), pinned.String()}) || !slices.Equal(res.Gone, []string{gone.String()}) {
		t.Errorf("started %v, gone %v", res.Started, res.Gone)
	}
	for vm, want := range map[types.NamespacedName]string{
		pinned: cluster.RunStrategyRerunOnFailure, always: cluster.RunStrategyAlways,
		other: cluster.RunStrategyHalted, halted: cluster.RunStrategyHalted,
	} {
		if got := jobtest.RunStrategyOf(t, env.Client, vm); got != want {
			t.Errorf("VM %s has runStrategy %q, want %q", vm, got, want)
		}
	}
	if a := jobtest.GetVM(t, env.Client, pinned).Annotations; a[v1beta1.AnnotationRestoreRunStrategy] != "" {
		t.Errorf("VM %s still carries the recorded run strategy after its restore", pinned)
	}
	events := jobtest.Events(t, env.Client, plan.Name)
	want := fmt.Sprintf("Normal RestoreVMCompleted restore-vm: Restored 3 VMs for node %s during upgrade %s, success: 2, failed: 0, deleted since: %s", n1, plan.Name, gone)
	if events[len(events)-1] != want {
		t.Errorf("last event %q, want %q", events[len(events)-1], want)
	}

	// Restoring again changes nothing.
	if _, err := restorer(time.Second).Restore(ctx, plan.Name, n1); err != nil {
		t.Fatal(err)
	}
	if got := jobtest.RunStrategyOf(t, env.Client, pinned); got != cluster.RunStrategyRerunOnFailure {
		t.Errorf("after a second restore VM %s has runStrategy %q", pinned, got)
	}
}

// TestRestoreWithoutRestoreVM: a plan without spec.restoreVM starts again
// only the VMs the operator let it shut down (annotation
// shutdown-for-upgrade naming the plan), not those that cannot migrate.
func TestRestoreWithoutRestoreVM(t *testing.T) {
	ctx := t.Context()
	kubeVirt(t, cluster.KubeVirtPhaseDeployed, "True")
	n1 := jobtest.Name("node")
	jobtest.Node(t, env.Client, n1)
	jobtest.Node(t, env.Client, jobtest.Name("node"))
	ns := jobtest.Namespace(t, env.Client)
	pinned := jobtest.VM(t, env.Client, ns, "pinned", n1, jobtest.Pinned)
	consented := jobtest.VM(t, env.Client, ns, "consented", n1)
	otherPlan := jobtest.VM(t, env.Client, ns, "other-plan", n1)
	plan := jobtest.Plan(t, env.Client, nil)
	power := helper.RunStrategyPower{Client: env.Client}
	for vm, consent := range map[types.NamespacedName]string{consented: plan.Name, otherPlan: "hvst-upgrade-older"} {
		v := jobtest.GetVM(t, env.Client, vm)
		v.Annotations = map[string]string{v1beta1.AnnotationShutdownForUpgrade: consent}
		if err := env.Client.Update(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := helper.RecordVMs(ctx, env.Client, plan, n1, []types.NamespacedName{consented, otherPlan}); err != nil {
		t.Fatal(err)
	}
	for _, vm := range []types.NamespacedName{consented, otherPlan} {
		if err := power.Stop(ctx, vm); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := detector(env.Client, power).Shutdown(ctx, plan.Name, n1); err != nil {
		t.Fatal(err)
	}
	res, err := restorer(time.Second).Restore(ctx, plan.Name, n1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Started, []string{consented.String()}) {
		t.Errorf("started %v, want only %s", res.Started, consented)
	}
	for vm, want := range map[types.NamespacedName]string{
		consented: cluster.RunStrategyRerunOnFailure, pinned: cluster.RunStrategyHalted, otherPlan: cluster.RunStrategyHalted,
	} {
		if got := jobtest.RunStrategyOf(t, env.Client, vm); got != want {
			t.Errorf("VM %s has runStrategy %q, want %q", vm, got, want)
		}
	}
}

// TestRestoreWaitsForKubeVirt: no VM starts while KubeVirt is unhealthy;
// the wait gives up with a message that says what it saw and what to do,
// and succeeds once KubeVirt recovers.
func TestRestoreWaitsForKubeVirt(t *testing.T) {
	ctx := t.Context()
	n1 := jobtest.Name("node")
	jobtest.Node(t, env.Client, n1)
	ns := jobtest.Namespace(t, env.Client)
	vm := jobtest.VM(t, env.Client, ns, "pinned", n1, jobtest.Pinned)
	plan := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) { p.Spec.RestoreVM = ptr.To(true) })
	kubeVirt(t, cluster.KubeVirtPhaseDeployed, "True")
	if _, err := detector(env.Client, helper.RunStrategyPower{Client: env.Client}).Shutdown(ctx, plan.Name, n1); err != nil {
		t.Fatal(err)
	}
	kubeVirt(t, "Deploying", "False")
	defer kubeVirt(t, cluster.KubeVirtPhaseDeployed, "True")

	_, err := restorer(200*time.Millisecond).Restore(ctx, plan.Name, n1)
	if !errors.Is(err, waitfor.ErrTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	for _, part := range []string{`phase "Deploying"`, "Available=False", "start " + vm.String() + " by hand"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message %q does not say %q", err, part)
		}
	}
	if got := jobtest.RunStrategyOf(t, env.Client, vm); got != cluster.RunStrategyHalted {
		t.Errorf("VM started while KubeVirt was unhealthy: runStrategy %q", got)
	}
	events := jobtest.Events(t, env.Client, plan.Name)
	if !strings.HasPrefix(events[len(events)-1], "Warning RestoreVMFailed restore-vm: ") {
		t.Errorf("last event %q, want a Warning RestoreVMFailed", events[len(events)-1])
	}

	go func() {
		time.Sleep(100 * time.Millisecond)
		kubeVirt(t, cluster.KubeVirtPhaseDeployed, "True")
	}()
	if _, err := restorer(10*time.Second).Restore(ctx, plan.Name, n1); err != nil {
		t.Fatal(err)
	}
	if got := jobtest.RunStrategyOf(t, env.Client, vm); got != cluster.RunStrategyRerunOnFailure {
		t.Errorf("VM %s has runStrategy %q after KubeVirt recovered", vm, got)
	}
}

// TestRunStrategyPower covers the strategies a VM can have.
func TestRunStrategyPower(t *testing.T) {
	ctx := t.Context()
	n1 := jobtest.Name("node")
	ns := jobtest.Namespace(t, env.Client)
	p := helper.RunStrategyPower{Client: env.Client}
	for _, tc := range []struct {
		name     string
		opts     []jobtest.VMOpt
		recorded string
		started  string
	}{
		{"rerun", nil, cluster.RunStrategyRerunOnFailure, cluster.RunStrategyRerunOnFailure},
		{"always", []jobtest.VMOpt{jobtest.RunStrategy(cluster.RunStrategyAlways)}, cluster.RunStrategyAlways, cluster.RunStrategyAlways},
		{"running", []jobtest.VMOpt{jobtest.Running}, cluster.RunStrategyAlways, cluster.RunStrategyAlways},
		{"manual", []jobtest.VMOpt{jobtest.RunStrategy(cluster.RunStrategyManual)}, cluster.RunStrategyManual, cluster.RunStrategyAlways},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := jobtest.VM(t, env.Client, ns, tc.name, n1, tc.opts...)
			for range 2 {
				if err := p.Stop(ctx, vm); err != nil {
					t.Fatal(err)
				}
				got := jobtest.GetVM(t, env.Client, vm)
				if s := jobtest.RunStrategyOf(t, env.Client, vm); s != cluster.RunStrategyHalted || got.Annotations[v1beta1.AnnotationRestoreRunStrategy] != tc.recorded {
					t.Fatalf("after Stop: runStrategy %q, recorded %q; want Halted, %q", s, got.Annotations[v1beta1.AnnotationRestoreRunStrategy], tc.recorded)
				}
			}
			rv := jobtest.GetVM(t, env.Client, vm).ResourceVersion
			if err := p.Stop(ctx, vm); err != nil || jobtest.GetVM(t, env.Client, vm).ResourceVersion != rv {
				t.Errorf("stopping a stopped VM wrote it (err %v)", err)
			}
			for range 2 {
				if err := p.Start(ctx, vm); err != nil {
					t.Fatal(err)
				}
				if s := jobtest.RunStrategyOf(t, env.Client, vm); s != tc.started {
					t.Fatalf("after Start: runStrategy %q, want %q", s, tc.started)
				}
			}
		})
	}
	t.Run("halted without a record", func(t *testing.T) {
		vm := jobtest.VM(t, env.Client, ns, "unrecorded", n1, jobtest.RunStrategy(cluster.RunStrategyHalted))
		if err := p.Start(ctx, vm); err != nil {
			t.Fatal(err)
		}
		if s := jobtest.RunStrategyOf(t, env.Client, vm); s != cluster.RunStrategyRerunOnFailure {
			t.Errorf("runStrategy %q, want Harvester's default RerunOnFailure", s)
		}
	})
}

func TestVMList(t *testing.T) {
	vms, err := helper.ParseVMList(" b/y, a/x ,,")
	if err != nil || len(vms) != 2 || vms[0] != (types.NamespacedName{Namespace: "b", Name: "y"}) {
		t.Fatalf("ParseVMList = %v, %v", vms, err)
	}
	if got := helper.FormatVMList(append(vms, vms[1])); got != "a/x,b/y" {
		t.Errorf("FormatVMList = %q, want sorted without duplicates", got)
	}
	for _, bad := range []string{"noslash", "/x", "a/", "a/b/c"} {
		if _, err := helper.ParseVMList("a/ok," + bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseVMList(%q) = %v, want an error naming it", bad, err)
		}
	}
	if vms, err := helper.ParseVMList(""); err != nil || len(vms) != 0 {
		t.Errorf("ParseVMList(\"\") = %v, %v", vms, err)
	}
}

func TestPlanEligibility(t *testing.T) {
	plan := func(prev, target, minimum string, force bool) *v1beta1.UpgradePlan {
		p := &v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{Force: &force}}
		if prev != "" {
			p.Status.PreviousVersion = &prev
		}
		if target != "" {
			p.Status.ReleaseMetadata = &v1beta1.ReleaseMetadata{Harvester: target, MinUpgradableVersion: minimum}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		p    *v1beta1.UpgradePlan
		want error
	}{
		{"eligible", plan("v1.7.1", "v1.8.0", "v1.7.0", false), nil},
		{"downgrade", plan("v1.8.0", "v1.7.1", "", false), release.ErrDowngrade},
		{"forced downgrade", plan("v1.8.0", "v1.7.1", "", true), nil},
		{"below the minimum", plan("v1.7.1", "v1.9.0", "v1.8.0", false), release.ErrBelowMinimum},
		{"older than the toolkit supports", plan("v1.6.0", "v1.8.0", "v1.6.0", false), release.ErrUnsupportedPath},
		{"older than the toolkit supports, forced", plan("v1.6.0", "v1.8.0", "", true), release.ErrUnsupportedPath},
		{"unknown running version", plan("", "v1.8.0", "", false), helper.ErrEligibilityUnknown},
		{"unknown target", plan("v1.7.1", "", "", false), helper.ErrEligibilityUnknown},
		{"forced, unknown", plan("", "", "", true), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := helper.PlanEligibility(tc.p)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("PlanEligibility = %v, want %v", err, tc.want)
			}
		})
	}
}

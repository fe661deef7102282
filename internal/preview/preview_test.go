package preview

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/window"
)

func plan(mod ...func(*v1beta1.UpgradePlan)) *v1beta1.UpgradePlan {
	p := &v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Force: ptr.To(false), RestoreVM: ptr.To(false)}}
	for _, m := range mod {
		m(p)
	}
	return p
}

func node(name string) corev1.Node {
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{cluster.LabelManagedNode: "true"},
			Annotations: map[string]string{cluster.AnnotationCAPIMachine: "m-" + name}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

func machine(node string, controlPlane bool) capiv1beta1.Machine {
	m := capiv1beta1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "m-" + node, Labels: map[string]string{}},
		Status:     capiv1beta1.MachineStatus{Phase: cluster.MachinePhaseRunning, NodeRef: &corev1.ObjectReference{Kind: "Node", Name: node}},
	}
	if controlPlane {
		m.Labels[cluster.LabelMachineControlPlane] = "true"
		m.Labels[cluster.LabelMachineEtcd] = "true"
	}
	return m
}

func vmi(name, node string) kubevirtv1.VirtualMachineInstance {
	return kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Status:     kubevirtv1.VirtualMachineInstanceStatus{NodeName: node, Phase: "Running"},
	}
}

func pinned(name, node string) kubevirtv1.VirtualMachineInstance {
	v := vmi(name, node)
	v.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	return v
}

func volume(name string, replicas int, robustness, node string) longhornv1beta2.Volume {
	return longhornv1beta2.Volume{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: name},
		Spec:       longhornv1beta2.VolumeSpec{NumberOfReplicas: replicas},
		Status: longhornv1beta2.VolumeStatus{State: cluster.LonghornVolumeAttached, Robustness: robustness, CurrentNodeID: node,
			KubernetesStatus: longhornv1beta2.KubernetesStatus{Namespace: "default", PVCName: name + "-pvc"}},
	}
}

// healthy is a three-node cluster running v1.7.1, ready for v1.8.0: n3 is
// the control plane (upgraded first), vm-a runs on n1.
func healthy() *Facts {
	af := &preflight.AdmissionFacts{
		VersionExists: true,
		Cluster: &provisioningv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
			Status:     provisioningv1.ClusterStatus{Ready: true},
		},
		Volumes: []longhornv1beta2.Volume{volume("vol-a", 3, "healthy", "n1")},
		VMIs:    []kubevirtv1.VirtualMachineInstance{vmi("vm-a", "n1")},
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		af.Nodes = append(af.Nodes, node(n))
		af.Machines = append(af.Machines, machine(n, n == "n3"))
	}
	return &Facts{Admission: af, RunningVersion: "v1.7.1", Version: &harvesterv1beta1.Version{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "v1.8.0"},
		Spec:       harvesterv1beta1.VersionSpec{ISOURL: "http://example/iso", MinUpgradableVersion: "v1.7.0"},
	}}
}

func verdicts(r Report, v v1beta1.CheckResult) []string {
	var out []string
	for _, c := range r.Checks {
		if c.Result == v {
			out = append(out, string(c.Reason)+": "+c.Message)
		}
	}
	return out
}

func hasVerdict(r Report, v v1beta1.CheckResult, name preflight.Reason, substr string) bool {
	return slices.ContainsFunc(r.Checks, func(c preflight.Verdict) bool {
		return c.Result == v && c.Reason == name && strings.Contains(c.Message, substr)
	})
}

func nodeNamed(t *testing.T, r Report, name string) Node {
	t.Helper()
	i := slices.IndexFunc(r.Nodes, func(n Node) bool { return n.Name == name })
	if i < 0 {
		t.Fatalf("node %s not in the report: %+v", name, r.Nodes)
	}
	return r.Nodes[i]
}

func TestBuildHealthy(t *testing.T) {
	r := Build(plan(), healthy())
	if !r.WouldRun || len(verdicts(r, v1beta1.CheckFailed)) > 0 || len(verdicts(r, v1beta1.CheckWarning)) > 0 {
		t.Fatalf("a healthy cluster must pass every check: fails %q, warnings %q", verdicts(r, v1beta1.CheckFailed), verdicts(r, v1beta1.CheckWarning))
	}
	if !hasVerdict(r, v1beta1.CheckPassed, "eligibility", "v1.7.1 can be upgraded to v1.8.0 (minUpgradableVersion v1.7.0)") {
		t.Errorf("eligibility not passed: %+v", r.Checks)
	}
	var order []string
	for _, n := range r.Nodes {
		order = append(order, n.Name+"/"+n.Role)
	}
	if want := []string{"n3/control-plane", "n1/worker", "n2/worker"}; !slices.Equal(order, want) {
		t.Errorf("order = %v, want %v (control plane first, then by machine name)", order, want)
	}
	n1 := nodeNamed(t, r, "n1")
	if len(n1.Migrate) != 1 || n1.Migrate[0].Name != "default/vm-a" || !slices.Equal(n1.Migrate[0].Targets, []string{"n2", "n3"}) {
		t.Errorf("n1 migrates %+v, want default/vm-a to n2, n3", n1.Migrate)
	}
	if len(n1.ShutDown) != 0 || len(r.VolumesAtRisk) != 0 {
		t.Errorf("nothing should be shut down or at risk: %+v %+v", n1.ShutDown, r.VolumesAtRisk)
	}
	// 40 + 3 x 15 + 1 migration.
	if r.Estimate.Minutes != 86 {
		t.Errorf("estimate = %d minutes, want 86 (%s)", r.Estimate.Minutes, r.Estimate.Model)
	}
	if r.Target != "Version harvester-system/v1.8.0" || r.RunningVersion != "v1.7.1" {
		t.Errorf("target %q, running %q", r.Target, r.RunningVersion)
	}
	if len(r.NotChecked) == 0 {
		t.Error("the report must say what it did not check")
	}
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plan  *v1beta1.UpgradePlan
		facts func(*Facts)
		run   bool
		check func(t *testing.T, r Report)
	}{{
		name:  "non-migratable VM without restoreVM is refused",
		plan:  plan(),
		facts: func(f *Facts) { f.Admission.VMIs = append(f.Admission.VMIs, pinned("db", "n2")) },
		check: func(t *testing.T, r Report) {
			if !hasVerdict(r, v1beta1.CheckFailed, "admission", "default/db (pinned by nodeSelector kubernetes.io/hostname=n2)") {
				t.Errorf("no failure naming the pinned VM: %q", verdicts(r, v1beta1.CheckFailed))
			}
			n2 := nodeNamed(t, r, "n2")
			if len(n2.ShutDown) != 1 || n2.ShutDown[0].Name != "default/db" || n2.ShutDown[0].Restarted {
				t.Errorf("n2 shuts down %+v, want default/db, not restarted", n2.ShutDown)
			}
		},
	}, {
		name:  "non-migratable VM with restoreVM is shut down and restarted",
		plan:  plan(func(p *v1beta1.UpgradePlan) { p.Spec.RestoreVM = ptr.To(true) }),
		facts: func(f *Facts) { f.Admission.VMIs = append(f.Admission.VMIs, pinned("db", "n2")) },
		run:   true,
		check: func(t *testing.T, r Report) {
			if !hasVerdict(r, v1beta1.CheckWarning, "admission", "default/db") {
				t.Errorf("no warning naming the VM: %q", verdicts(r, v1beta1.CheckWarning))
			}
			n2 := nodeNamed(t, r, "n2")
			if len(n2.ShutDown) != 1 || !n2.ShutDown[0].Restarted || !strings.Contains(n2.ShutDown[0].Reason, "nodeSelector") {
				t.Errorf("n2 shuts down %+v, want default/db restarted", n2.ShutDown)
			}
			if r.Estimate.Minutes != 88 {
				t.Errorf("estimate %d, want 88 (one shutdown: +2)", r.Estimate.Minutes)
			}
		},
	}, {
		name: "paused non-migratable VM is left running",
		plan: plan(),
		facts: func(f *Facts) {
			v := pinned("idle", "n2")
			v.Status.Conditions = []kubevirtv1.Condition{{Type: cluster.ConditionPaused, Status: "True"}}
			f.Admission.VMIs = append(f.Admission.VMIs, v)
		},
		check: func(t *testing.T, r Report) {
			n2 := nodeNamed(t, r, "n2")
			if len(n2.ShutDown) != 0 || !slices.Equal(n2.LeftRunning, []string{"default/idle (paused)"}) {
				t.Errorf("n2: shut down %+v, left running %q", n2.ShutDown, n2.LeftRunning)
			}
		},
	}, {
		name: "degraded and single-replica volumes are at risk",
		plan: plan(),
		facts: func(f *Facts) {
			f.Admission.Volumes = append(f.Admission.Volumes, volume("vol-d", 3, cluster.LonghornRobustnessDegraded, "n2"),
				volume("vol-s", 1, "healthy", "n1"))
		},
		check: func(t *testing.T, r Report) {
			if !hasVerdict(r, v1beta1.CheckFailed, "admission", "Longhorn volumes are degraded: default/vol-d-pvc") {
				t.Errorf("no failure for the degraded volume: %q", verdicts(r, v1beta1.CheckFailed))
			}
			if len(r.VolumesAtRisk) != 2 {
				t.Fatalf("volumes at risk %+v, want vol-d and vol-s", r.VolumesAtRisk)
			}
			d, s := r.VolumesAtRisk[0], r.VolumesAtRisk[1]
			if d.Name != "vol-d" || d.Node != "n2" || d.PVC != "default/vol-d-pvc" || !strings.HasPrefix(d.Risks[0], "degraded") {
				t.Errorf("vol-d: %+v", d)
			}
			if s.Name != "vol-s" || s.Replicas != 1 || !strings.HasPrefix(s.Risks[0], "single replica") {
				t.Errorf("vol-s: %+v", s)
			}
			if got := nodeNamed(t, r, "n2").VolumesAtRisk; !slices.Equal(got, []string{"vol-d"}) {
				t.Errorf("n2 volumes at risk %q", got)
			}
		},
	}, {
		name: "paused node",
		plan: plan(func(p *v1beta1.UpgradePlan) {
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"n1"}}
		}),
		run: true,
		check: func(t *testing.T, r Report) {
			if !nodeNamed(t, r, "n1").Paused || nodeNamed(t, r, "n2").Paused {
				t.Errorf("only n1 is paused: %+v", r.Nodes)
			}
			if !strings.Contains(r.Estimate.Model, "1 paused node(s)") {
				t.Errorf("the estimate must say it does not count the paused node: %s", r.Estimate.Model)
			}
		},
	}, {
		name:  "below minUpgradableVersion",
		plan:  plan(),
		facts: func(f *Facts) { f.Version.Spec.MinUpgradableVersion = "v1.7.2" },
		check: func(t *testing.T, r Report) {
			if !hasVerdict(r, v1beta1.CheckFailed, "eligibility", "v1.7.2") {
				t.Errorf("no eligibility failure: %+v", r.Checks)
			}
		},
	}, {
		name:  "downgrade",
		plan:  plan(),
		facts: func(f *Facts) { f.RunningVersion = "v1.8.1" },
		check: func(t *testing.T, r Report) {
			if !hasVerdict(r, v1beta1.CheckFailed, "eligibility", "v1.8.1") {
				t.Errorf("no eligibility failure: %+v", r.Checks)
			}
		},
	}, {
		name:  "forced skips the version rules",
		plan:  plan(func(p *v1beta1.UpgradePlan) { p.Spec.Force = ptr.To(true) }),
		facts: func(f *Facts) { f.RunningVersion = "v1.8.1" },
		run:   true,
		check: func(t *testing.T, r Report) {
			if !hasVerdict(r, v1beta1.CheckWarning, "eligibility", "spec.force") {
				t.Errorf("no warning: %+v", r.Checks)
			}
		},
	}, {
		name:  "unknown running version",
		plan:  plan(),
		facts: func(f *Facts) { f.RunningVersion = "" },
		check: func(t *testing.T, r Report) {
			if !hasVerdict(r, v1beta1.CheckFailed, "eligibility", "server-version") {
				t.Errorf("no failure: %+v", r.Checks)
			}
		},
	}, {
		name: "image: eligibility needs the ISO",
		plan: plan(func(p *v1beta1.UpgradePlan) { p.Spec.Version, p.Spec.Image = nil, ptr.To("iso-v180") }),
		facts: func(f *Facts) {
			f.Version, f.Admission.VersionExists, f.Admission.ImageExists = nil, false, true
		},
		run: true,
		check: func(t *testing.T, r Report) {
			if !hasVerdict(r, v1beta1.CheckWarning, "eligibility", "not checked") || r.Target != "image harvester-system/iso-v180" {
				t.Errorf("eligibility must be reported as not checked: %+v", r.Checks)
			}
		},
	}, {
		name:  "missing Version",
		plan:  plan(),
		facts: func(f *Facts) { f.Version, f.Admission.VersionExists = nil, false },
		check: func(t *testing.T, r Report) {
			if !hasVerdict(r, v1beta1.CheckFailed, "admission", "v1.8.0") {
				t.Errorf("no failure for the missing Version: %+v", r.Checks)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			if tc.facts != nil {
				tc.facts(f)
			}
			r := Build(tc.plan, f)
			if r.WouldRun != tc.run {
				t.Errorf("wouldRun = %v, want %v; fails: %q", r.WouldRun, tc.run, verdicts(r, v1beta1.CheckFailed))
			}
			tc.check(t, r)
			// The JSON form carries the same verdict.
			raw, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var back Report
			if err := json.Unmarshal(raw, &back); err != nil || back.WouldRun != r.WouldRun || len(back.Nodes) != len(r.Nodes) {
				t.Errorf("JSON round trip: %v %s", err, raw)
			}
		})
	}
}

// The maintenance-window verdict: closed (when the first node would
// begin), open (until when), or open for good; none without windows. The
// estimate says it leaves the waits out.
func TestWindowVerdict(t *testing.T) {
	saturdayNights := []v1beta1.MaintenanceWindow{{Days: []string{"Sat"}, Start: "22:00", End: "04:00"}}
	always := []v1beta1.MaintenanceWindow{{Start: "00:00", End: "00:00"}}
	for _, tc := range []struct {
		name    string
		windows []v1beta1.MaintenanceWindow
		now     time.Time
		result  v1beta1.CheckResult
		says    string
	}{
		{"closed now: the first node waits", saturdayNights, time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC), v1beta1.CheckWarning,
			"the first node begins its drain when the next window opens, 2026-11-28T22:00:00Z (Sat 22:00 UTC)"},
		{"open now: until when", saturdayNights, time.Date(2026, 11, 28, 23, 0, 0, 0, time.UTC), v1beta1.CheckPassed,
			"is open now, until 2026-11-29T04:00:00Z"},
		{"open every day, all day", always, time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC), v1beta1.CheckPassed,
			"are open now and join up: no node waits"},
		{"no window", nil, time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			f.Admission.Now = tc.now
			r := Build(plan(func(p *v1beta1.UpgradePlan) {
				p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{MaintenanceWindows: tc.windows}
			}), f)
			if !r.WouldRun {
				t.Errorf("a window must not stop the plan: fails %q", verdicts(r, v1beta1.CheckFailed))
			}
			found := slices.ContainsFunc(r.Checks, func(c preflight.Verdict) bool { return c.Reason == ReasonMaintenanceWindow })
			if tc.result == "" {
				if found || strings.Contains(r.Estimate.Model, "maintenance window") {
					t.Errorf("a verdict or an estimate note without windows: %+v; %s", r.Checks, r.Estimate.Model)
				}
				return
			}
			if !hasVerdict(r, tc.result, ReasonMaintenanceWindow, tc.says) {
				t.Errorf("no %s verdict saying %q: %+v", tc.result, tc.says, r.Checks)
			}
			if !strings.Contains(r.Estimate.Model, "wait for a maintenance window ("+window.Describe(tc.windows)+")") {
				t.Errorf("the estimate does not say it leaves out the windows: %s", r.Estimate.Model)
			}
		})
	}
}

func TestWriteText(t *testing.T) {
	f := healthy()
	f.Admission.VMIs = append(f.Admission.VMIs, pinned("db", "n2"))
	var b strings.Builder
	if err := WriteText(&b, Build(plan(func(p *v1beta1.UpgradePlan) { p.Spec.RestoreVM = ptr.To(true) }), f)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"WOULD RUN", "n1: live-migrate default/vm-a to one of: n2, n3",
		"n2: shut down default/db, restarted after the node's upgrade (restoreVM)", "ESTIMATED DURATION: about 88 minutes"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the text lacks %q:\n%s", want, b.String())
		}
	}
}

package metrics_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
)

var t0 = time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)

func at(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }

// history builds a phase history, each phase entered at the given second.
func history(p *v1beta1.UpgradePlan, steps ...any) {
	for i := 0; i < len(steps); i += 2 {
		ph := steps[i].(v1beta1.UpgradePlanPhase)
		p.Status.CurrentPhase = ph
		p.Status.PhaseTransitionTimestamps = append(p.Status.PhaseTransitionTimestamps,
			v1beta1.PhaseTransitionTimestamp{Phase: ph, PhaseTransitionTimestamp: at(steps[i+1].(int))})
	}
}

func node(state v1beta1.NodeUpgradeState, sec int) v1beta1.NodeUpgradeStatus {
	t := at(sec)
	return v1beta1.NodeUpgradeStatus{State: state, LastTransitionTime: &t}
}

// TestRecordObservesEachTransitionOnce: the durations and failures are
// observed from what a status write moved, once, whatever is written again.
func TestRecordObservesEachTransitionOnce(t *testing.T) {
	if err := metrics.Register(fake.NewClientBuilder().WithScheme(cluster.Scheme()).Build()); err != nil {
		t.Fatal(err)
	}
	p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "record-once"}}
	history(p, v1beta1.PhaseInitializing, 0)
	steps := []func(*v1beta1.UpgradePlan){
		func(p *v1beta1.UpgradePlan) {
			history(p, v1beta1.PhaseInitialized, 10, v1beta1.PhaseISODownloading, 10)
		},
		func(p *v1beta1.UpgradePlan) {
			history(p, v1beta1.PhaseISODownloaded, 70, v1beta1.PhaseNodeUpgrading, 100)
			p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{
				"node-1": node(v1beta1.NodeStatePreDraining, 100), "node-2": node(v1beta1.NodeStateImagePreloaded, 50),
			}
		},
		func(p *v1beta1.UpgradePlan) {
			p.Status.NodeUpgradeStatuses["node-1"] = node(v1beta1.NodeStatePostDrained, 160)
		},
		func(p *v1beta1.UpgradePlan) {
			p.Status.NodeUpgradeStatuses["node-2"] = node(v1beta1.NodeStatePreDrainFailed, 170)
			history(p, v1beta1.PhaseFailed, 171)
		},
	}
	for _, step := range steps {
		written := p.DeepCopy()
		step(written)
		metrics.Record(p, written)
		metrics.Record(written, written) // a pass that moved nothing
		p = written
	}
	got := gather(t, "record-once")
	want := map[string]float64{
		`upgrade_toolkit_phase_duration_seconds_count{phase="Initialize"}`:         1,
		`upgrade_toolkit_phase_duration_seconds_sum{phase="Initialize"}`:           10,
		`upgrade_toolkit_phase_duration_seconds_sum{phase="ISODownload"}`:          60,
		`upgrade_toolkit_node_upgrade_duration_seconds_count{}`:                    1,
		`upgrade_toolkit_node_upgrade_duration_seconds_sum{}`:                      60,
		`upgrade_toolkit_failures_total{job_type="pre-drain",phase="NodeUpgrade"}`: 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	// The above, ISODownload's count, and a _bucket line per histogram.
	if n := len(got); n != 10 {
		t.Errorf("got %d series, want 10: %v", n, got)
	}

	// Deleted, the plan's series go.
	metrics.Forget("record-once")
	if got := gather(t, "record-once"); len(got) != 0 {
		t.Errorf("series of a deleted plan remain: %v", got)
	}
}

// TestCollectorReportsEveryPlan: the state of the plans is read at each
// scrape, so a restarted manager reports it at once.
func TestCollectorReportsEveryPlan(t *testing.T) {
	running := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "collect-running"}}
	history(running, v1beta1.PhaseInitializing, 0, v1beta1.PhaseNodeUpgrading, 100)
	running.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{
		"node-1": node(v1beta1.NodeStatePostDrained, 160), "node-2": node(v1beta1.NodeStateWaitingReboot, 200),
		"node-3": node(v1beta1.NodeStateImagePreloaded, 50),
	}
	running.Status.PreviousVersion = ptr.To("v1.7.1")
	running.Status.ReleaseMetadata = &v1beta1.ReleaseMetadata{Harvester: "v1.8.0"}
	running.Status.Failures = []v1beta1.Failure{{Phase: v1beta1.PhaseNodeUpgrading, RetriedAt: ptr.To(metav1.NewTime(t0))}, {Phase: v1beta1.PhaseNodeUpgrading}}
	running.Status.NextMaintenanceWindow = ptr.To(metav1.NewTime(t0.Add(time.Hour)))
	// Paused, a plan has not moved on purpose: no time since progress.
	paused := running.DeepCopy()
	paused.Name, paused.Spec.Paused = "collect-paused", ptr.To(true)
	failed := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "collect-failed"}}
	history(failed, v1beta1.PhaseInitializing, 0, v1beta1.PhaseFailed, 5)
	c := fake.NewClientBuilder().WithScheme(cluster.Scheme()).WithObjects(running, paused, failed).Build()
	if err := metrics.Register(c); err != nil {
		t.Fatal(err)
	}
	metrics.SetNow(func() time.Time { return t0.Add(300 * time.Second) })
	defer metrics.SetNow(time.Now)
	got := gather(t, "collect-running")
	want := map[string]float64{
		`upgrade_toolkit_plan_phase{phase="NodeUpgrading"}`:                        1,
		`upgrade_toolkit_plan_nodes{state="PostDrained"}`:                          1,
		`upgrade_toolkit_plan_nodes{state="WaitingReboot"}`:                        1,
		`upgrade_toolkit_plan_nodes{state="ImagePreloaded"}`:                       1,
		`upgrade_toolkit_plan_seconds_since_progress{}`:                            100,
		`upgrade_toolkit_node_state_seconds{node="node-2",state="WaitingReboot"}`:  100,
		`upgrade_toolkit_node_state_seconds{node="node-1",state="PostDrained"}`:    140,
		`upgrade_toolkit_node_state_seconds{node="node-3",state="ImagePreloaded"}`: 250,
		`upgrade_toolkit_plan_info{from_version="v1.7.1",to_version="v1.8.0"}`:     1,
		`upgrade_toolkit_plan_paused{}`:                                            0,
		`upgrade_toolkit_plan_retries{}`:                                           1,
		`upgrade_toolkit_plan_next_maintenance_window_timestamp_seconds{}`:         float64(t0.Add(time.Hour).Unix()),
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if g := gather(t, "collect-paused"); g[`upgrade_toolkit_plan_paused{}`] != 1 || g[`upgrade_toolkit_plan_seconds_since_progress{}`] != 0 {
		t.Errorf("a paused plan says it is paused, and nothing of its progress: %v", g)
	}
	if g := gather(t, "collect-failed"); len(g) != 1 || g[`upgrade_toolkit_plan_phase{phase="Failed"}`] != 1 {
		t.Errorf("a failed plan reports only its phase, got %v", g)
	}
}

// TestNamesAreWhatTheManagerExports: the names the chart's alerts and
// dashboard are checked against are the registry's.
func TestNamesAreWhatTheManagerExports(t *testing.T) {
	p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "names"}}
	history(p, v1beta1.PhaseNodeUpgrading, 0)
	p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{"node-1": node(v1beta1.NodeStatePreDraining, 0)}
	p.Status.PreviousVersion, p.Status.ReleaseMetadata = ptr.To("v1.7.1"), &v1beta1.ReleaseMetadata{Harvester: "v1.8.0"}
	p.Status.Failures = []v1beta1.Failure{{Phase: v1beta1.PhaseNodeUpgrading, RetriedAt: ptr.To(metav1.NewTime(time.Now()))}}
	p.Status.NextMaintenanceWindow = ptr.To(metav1.NewTime(time.Now().Add(time.Hour)))
	p.Status.Insights = []v1beta1.Insight{{Type: v1beta1.InsightStalled, Level: v1beta1.InsightInfo, Impact: v1beta1.ImpactUpgradeStalled,
		Since: metav1.NewTime(time.Now().Add(-time.Minute)), Objects: []string{"Node/node-1"}, Message: "node node-1 has taken 3m"}}
	if err := metrics.Register(fake.NewClientBuilder().WithScheme(cluster.Scheme()).WithObjects(p).Build()); err != nil {
		t.Fatal(err)
	}
	if g := gather(t, "names"); g[`upgrade_toolkit_insight{impact="UpgradeStalled",level="Info",object="Node/node-1",type="Stalled"}`] != 1 {
		t.Errorf("the plan's insight is not exported: %v", g)
	}
	done := p.DeepCopy()
	done.Status.NodeUpgradeStatuses["node-1"] = node(v1beta1.NodeStatePostDrained, 9)
	history(done, v1beta1.PhaseNodeUpgraded, 10, v1beta1.PhaseFailed, 11)
	metrics.Record(p, done)
	failed := done.DeepCopy()
	history(failed, v1beta1.PhaseCleaningUp, 12, v1beta1.PhaseFailed, 13)
	metrics.Record(done, failed)
	// A plan failed by the gate between two phases.
	gated := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "names-gated"}}
	history(gated, v1beta1.PhaseImagePreloaded, 0)
	gatedFailed := gated.DeepCopy()
	history(gatedFailed, v1beta1.PhaseFailed, 1)
	metrics.Record(gated, gatedFailed)
	if g := gather(t, "names-gated"); g[`upgrade_toolkit_failures_total{job_type="none",phase="ImagePreload"}`] != 1 {
		t.Errorf("a plan failed between two phases is not counted: %v", g)
	}
	exported := map[string]bool{}
	for series := range gather(t, "names") {
		exported[series[:strings.IndexByte(series, '{')]] = true
	}
	for _, n := range metrics.Names() {
		if !exported[n] {
			t.Errorf("Names has %s, the registry does not export it (it exports %v)", n, exported)
		}
		delete(exported, n)
	}
	for n := range exported {
		t.Errorf("the registry exports %s, which Names lacks", n)
	}
}

// gather returns the upgrade's series of one plan from the manager's
// registry, named as queries see them with their labels but plan (and le).
func gather(t *testing.T, plan string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "upgrade_toolkit_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			mine := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "plan" {
					mine = l.GetValue() == plan
					continue
				}
				labels = append(labels, l.GetName()+"=\""+l.GetValue()+"\"")
			}
			if !mine {
				continue
			}
			slices.Sort(labels)
			ls := "{" + strings.Join(labels, ",") + "}"
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				out[f.GetName()+"_count"+ls] = float64(m.GetHistogram().GetSampleCount())
				out[f.GetName()+"_sum"+ls] = m.GetHistogram().GetSampleSum()
				out[f.GetName()+"_bucket"+ls] = 1
			case dto.MetricType_COUNTER:
				out[f.GetName()+ls] = m.GetCounter().GetValue()
			default:
				out[f.GetName()+ls] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/status"
	"github.com/harvester/upgrade-toolkit/internal/upgradelog"
)

// TestCaptureNeverCostsTheUpgrade: on a 3-node cluster whose kubelets
// refuse every request of the API server (logs and stats), an upgrade with
// the log capture on ends Succeeded, every log marked incomplete with its
// reason, the UpgradeLog's Incomplete condition and one Warning event per
// node naming the kubelets, `status` showing it and the metric counting
// it; no pod was held past the capture's bound (RulePodHeld, checked in
// every scenario). Its wall time is compared with the same upgrade's with
// the capture off: the bound here (1.5x) catches a capture on the critical
// path (it once cost 15x, silently) and stays clear of a loaded machine's
// noise (13% seen in CI, beside the chaos package); the precise cost, on a
// quiet machine, is BenchmarkCapture's (docs/benchmarks.md).
func TestCaptureNeverCostsTheUpgrade(t *testing.T) {
	off, _ := refusedUpgrade(t, false)
	on, held := refusedUpgrade(t, true)
	t.Logf("3 nodes, every kubelet refusing: %s with the capture off, %s with it on (%.2fx); the longest a pod was held: %s",
		off.Round(time.Millisecond), on.Round(time.Millisecond), on.Seconds()/off.Seconds(), held.Round(time.Millisecond))
	if on.Seconds() > 1.5*off.Seconds() {
		t.Errorf("the capture cost the upgrade: %s with it on, %s off (more than 1.5x)", on, off)
	}
}

// refusedUpgrade runs a 3-node upgrade, with steps a person could watch,
// whose kubelets refuse the API server from the start, and returns its wall
// time, from the plan's creation to its end (released), and the longest a
// pod of it was held by the capture.
func refusedUpgrade(t *testing.T, capture bool) (wall, held time.Duration) {
	var start time.Time
	var incompleteBefore float64
	scenario{
		sim: sim.Config{Nodes: 3, Timing: sim.DemoTiming()},
		// The kubelets' stats cannot be read either: the disk-space check
		// is skipped, as an operator would.
		annotations: map[string]string{v1beta1.AnnotationSkipGCThresholdCheck: "true"},
		beforePlan: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			run.Sim.SetFaults(sim.FaultSet{KubeletsRefuse: run.Sim.Nodes()})
			run.UpgradeLogOptions().Enabled = capture
			if err := run.RestartManager(); err != nil {
				t.Fatal(err)
			}
			incompleteBefore = incompleteLogsCounted(t)
		},
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			if start.IsZero() {
				start = time.Now()
			}
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			wall = time.Since(start)
			held = run.Checker.LongestHold(onlyPlan(t, ctx, run))
			if capture {
				checkIncompleteLogs(t, ctx, run, incompleteBefore)
			}
		},
		want: v1beta1.PhaseSucceeded,
	}.run(t)
	return wall, held
}

// checkIncompleteLogs: every kept log is marked incomplete, why, and said
// so once per node.
func checkIncompleteLogs(t *testing.T, ctx context.Context, run *simrun.Run, countedBefore float64) {
	t.Helper()
	plan := onlyPlan(t, ctx, run)
	nodes := run.Sim.Nodes()
	var ul *v1beta1.UpgradeLog
	// The UpgradeLog's status is written at most every few seconds.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if ul, err = upgradelog.Get(ctx, run.Client, plan); err != nil {
			return false, nil //nolint:nilerr // not made yet
		}
		c := apimeta.FindStatusCondition(ul.Status.Conditions, v1beta1.ConditionIncomplete)
		if c == nil || c.Status != metav1.ConditionTrue {
			return false, nil
		}
		for _, n := range nodes {
			if !strings.Contains(c.Message, "node "+n+" ") {
				return false, nil
			}
		}
		for _, l := range ul.Status.Logs {
			if l.Incomplete == nil {
				return false, nil
			}
		}
		return len(ul.Status.Logs) > 0, nil
	})
	if err != nil {
		t.Fatalf("the UpgradeLog never said every log is incomplete on %v: %+v", nodes, ul)
	}
	components := map[string]bool{}
	for _, l := range ul.Status.Logs {
		components[l.Component] = true
		if in := l.Incomplete; in.Reason != v1beta1.LogKubeletUnreachable || in.Message == "" || in.Since.IsZero() || l.Complete {
			t.Errorf("log of %s/%s %s on %s: complete %v, incomplete %+v; want KubeletUnreachable with the API server's error and since when", l.Namespace, l.Pod, l.Container, l.Node, l.Complete, in)
		}
	}
	for _, c := range []string{v1beta1.ComponentImagePreload, v1beta1.ComponentClusterUpgrade, v1beta1.ComponentNodeUpgrade, v1beta1.ComponentImageCleanup} {
		if !components[c] {
			t.Errorf("no %s Job's log is listed (listed: %v)", c, components)
		}
	}
	var list strings.Builder
	if err := upgradelog.List(&list, ul); err != nil || !strings.Contains(list.String(), "incomplete:"+v1beta1.LogKubeletUnreachable) {
		t.Errorf("logs %s does not say the logs are incomplete (%v):\n%s", plan, err, list.String())
	}
	t.Logf("upgrade-toolkit logs %s:\n%s", plan, list.String())

	// One Warning event per node, none per pod.
	var events corev1.EventList
	if err := run.Client.List(ctx, &events); err != nil {
		t.Fatal(err)
	}
	told := map[string]int{}
	for _, e := range events.Items {
		if e.Reason != v1beta1.EventLogIncomplete || e.InvolvedObject.Name != plan {
			continue
		}
		if e.Type != corev1.EventTypeWarning || e.Count > 1 {
			t.Errorf("event %s: type %s, count %d; want one Warning", e.Name, e.Type, e.Count)
		}
		for _, n := range nodes {
			if strings.Contains(e.Message, "node "+n+" ") {
				told[n]++
			}
		}
		t.Logf("event %s: %s", e.Reason, e.Message)
	}
	for _, n := range nodes {
		if told[n] != 1 {
			t.Errorf("%d %s events name node %s, want 1", told[n], v1beta1.EventLogIncomplete, n)
		}
	}

	// status shows it; the metric counts each log.
	s, err := status.Compute(ctx, run.Client, nil, plan, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if s.Logs == nil || s.Logs.Incomplete != len(ul.Status.Logs) || !strings.Contains(status.Text(s), "incomplete") {
		t.Errorf("status does not show the incomplete logs: %+v\n%s", s.Logs, status.Text(s))
	}
	t.Logf("upgrade-toolkit status %s:\n%s", plan, status.Text(s))
	if got := incompleteLogsCounted(t) - countedBefore; got != float64(len(ul.Status.Logs)) {
		t.Errorf("%s counted %v logs, want %d", metrics.IncompleteLogsName, got, len(ul.Status.Logs))
	}
}

// incompleteLogsCounted reads the manager's (this process's) count of
// logs let go unread because their kubelet was unreachable.
func incompleteLogsCounted(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != metrics.IncompleteLogsName {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == v1beta1.LogKubeletUnreachable {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestCaptureWithHangingKubelets: kubelets that accept the API server's
// connections and never answer (a firewall that drops packets) cost the
// upgrade no more than the capture's bound: no pod is held past it
// (RulePodHeld), and every log is marked incomplete, KubeletTimeout.
func TestCaptureWithHangingKubelets(t *testing.T) {
	scenario{
		sim:         sim.Config{Nodes: 2},
		annotations: map[string]string{v1beta1.AnnotationSkipGCThresholdCheck: "true"},
		beforePlan: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			run.Sim.SetFaults(sim.FaultSet{KubeletsHang: run.Sim.Nodes()})
		},
		after: func(t *testing.T, ctx context.Context, run *simrun.Run) {
			plan := onlyPlan(t, ctx, run)
			var ul *v1beta1.UpgradeLog
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				var err error
				if ul, err = upgradelog.Get(ctx, run.Client, plan); err != nil {
					return false, nil //nolint:nilerr // not made yet
				}
				for _, l := range ul.Status.Logs {
					if l.Incomplete == nil {
						return false, nil
					}
				}
				return len(ul.Status.Logs) > 0, nil
			})
			if err != nil {
				t.Fatalf("the UpgradeLog never marked every log incomplete: %+v", ul)
			}
			for _, l := range ul.Status.Logs {
				if l.Incomplete.Reason != v1beta1.LogKubeletTimeout {
					t.Errorf("log of %s/%s on %s: %+v, want KubeletTimeout", l.Namespace, l.Pod, l.Node, l.Incomplete)
				}
			}
		},
		want: v1beta1.PhaseSucceeded,
	}.run(t)
}

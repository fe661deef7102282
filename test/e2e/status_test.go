package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/status"
)

// TestStatusFollowsAnUpgrade runs `status` (its model and text, as the
// command prints them) at each new state of an upgrade whose last node's
// pre-drain Job fails: every phase and node shows as the plan has it, the
// time left is estimated once a node upgrade was measured and stays within
// what the measured nodes say, and the failed plan shows the Job, its node
// and the last lines of its log.
func TestStatusFollowsAnUpgrade(t *testing.T) {
	const logLine = "waiting for the node's VMs: gave up after 30m"
	var kube kubernetes.Interface
	seen := map[v1beta1.UpgradePlanPhase]bool{}
	estimated, seenFailed := false, false
	check := func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
		if kube == nil {
			var err error
			if kube, err = kubernetes.NewForConfig(run.Env.Config); err != nil {
				t.Fatal(err)
			}
		}
		logs := func(ctx context.Context, namespace, job string) string {
			return phase.LastLogLines(ctx, kube, namespace, job)
		}
		s, err := status.Compute(ctx, run.Client, logs, "", time.Now())
		if err != nil {
			t.Errorf("status: %v", err)
			return
		}
		text := status.Text(s)
		if s.Plan != p.Name {
			t.Errorf("status shows plan %s, want the newest, %s", s.Plan, p.Name)
		}
		// The plan read here may be newer than p; it is never older.
		current := v1beta1.UpgradePlanPhase(s.Phase)
		seen[current] = true
		if !strings.Contains(text, "phase     "+s.Phase) {
			t.Errorf("the text does not show the phase %s:\n%s", s.Phase, text)
		}
		if step, ok := pipeline.StepOf(current); ok && !strings.Contains(text, "/8 "+step.Name+"]") {
			t.Errorf("the text does not show the step %s:\n%s", step.Name, text)
		}
		if _, running := pipeline.Locate(current); running && s.Waiting == nil {
			t.Errorf("a running plan shows nothing it waits for:\n%s", text)
		}
		var mean time.Duration
		finished, left := 0, 0
		for _, n := range s.Nodes {
			if !strings.Contains(text, "  "+n.Name+" ") {
				t.Errorf("the text does not show node %s:\n%s", n.Name, text)
			}
			switch {
			case n.Upgrade != nil && !n.Upgrading:
				mean += n.Upgrade.Duration
				finished++
			default:
				left++
			}
		}
		if current == v1beta1.PhaseNodeUpgrading && finished > 0 {
			mean /= time.Duration(finished)
			e := s.Estimate
			switch {
			case e == nil:
				t.Errorf("no time left estimated once %d node(s) finished:\n%s", finished, text)
			case e.Left.Duration < 0 || e.Left.Duration > mean*time.Duration(left) || !strings.Contains(e.Method, "node(s) left"):
				t.Errorf("time left %s (%s), want between 0 and %d node(s) × %s", e.Left.Duration, e.Method, left, mean)
			default:
				if !estimated {
					t.Logf("status with a node upgrade measured:\n%s", text)
				}
				estimated = true
			}
		}
		if current != v1beta1.PhaseFailed || seenFailed {
			return
		}
		seenFailed = true
		f := s.Failure
		if f == nil || !strings.Contains(f.Job, "harvester-system/") || f.Node != "node-3" {
			t.Errorf("the failed plan's failure %+v does not name the Job and node-3", f)
			return
		}
		for _, want := range []string{"failed    upgrading node node-3 failed", "on node node-3", "  last log lines:\n    | ", logLine + "\"\n", "UpgradeFailed: Upgrade failed", "whole log: upgrade-toolkit logs " + p.Name + " --job " + f.Job + "\n"} {
			if !strings.Contains(text, want) {
				t.Errorf("the failed plan's status does not show %q:\n%s", want, text)
			}
		}
		t.Logf("status of the failed plan:\n%s", text)
	}
	p := scenario{
		sim:     sim.Config{Nodes: 3, Faults: sim.FaultSet{FailJobs: []sim.JobFault{{Type: sim.JobPreDrain, Node: "node-3", ExitCode: 4, Message: logLine}}}},
		during:  check,
		want:    v1beta1.PhaseFailed,
		failure: "upgrading node node-3 failed",
	}.run(t)
	checkMetrics(t, p.Name)
	for _, p := range []v1beta1.UpgradePlanPhase{v1beta1.PhaseISODownloading, v1beta1.PhaseClusterUpgrading, v1beta1.PhaseNodeUpgrading, v1beta1.PhaseFailed} {
		if !seen[p] {
			t.Errorf("status never showed phase %s (it showed %v)", p, seen)
		}
	}
	if !estimated {
		t.Error("status never estimated the time left")
	}
}

// checkMetrics: the manager (in this process) recorded the plan's phases,
// its two node upgrades and its failure, once each.
func checkMetrics(t *testing.T, plan string) {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["plan"] != plan {
				continue
			}
			key := f.GetName() + "{" + labels["phase"] + labels["job_type"] + "}"
			switch {
			case m.GetHistogram() != nil:
				got[key] += float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				got[key] += m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		metrics.NodeUpgradeDurationName + "{}":                                               2,
		metrics.PhaseDurationName + "{" + v1beta1.StepClusterUpgrade + "}":                   1,
		metrics.FailuresName + "{" + v1beta1.StepNodeUpgrade + v1beta1.JobTypePreDrain + "}": 1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (the plan's series: %v)", k, got[k], v, got)
		}
	}
}

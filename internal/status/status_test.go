package status

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

var t0 = time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)

func at(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }

// plan builds a plan that went through the phases, each entered at the
// given second.
func plan(name string, steps ...any) *v1beta1.UpgradePlan {
	p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: name}}
	p.Spec.Version = ptr.To("v1.8.0")
	for i := 0; i < len(steps); i += 2 {
		ph := steps[i].(v1beta1.UpgradePlanPhase)
		p.Status.CurrentPhase = ph
		p.Status.PhaseTransitionTimestamps = append(p.Status.PhaseTransitionTimestamps,
			v1beta1.PhaseTransitionTimestamp{Phase: ph, PhaseTransitionTimestamp: at(steps[i+1].(int))})
	}
	return p
}

func withNodes(p *v1beta1.UpgradePlan, states ...any) *v1beta1.UpgradePlan {
	p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for i := 0; i < len(states); i += 3 {
		t := at(states[i+2].(int))
		p.Status.NodeUpgradeStatuses[states[i].(string)] = v1beta1.NodeUpgradeStatus{State: states[i+1].(v1beta1.NodeUpgradeState), LastTransitionTime: &t}
	}
	return p
}

func withCondition(p *v1beta1.UpgradePlan, typ string, status metav1.ConditionStatus, sec int, msg string) *v1beta1.UpgradePlan {
	p.Status.Conditions = append(p.Status.Conditions, metav1.Condition{Type: typ, Status: status, LastTransitionTime: at(sec), Message: msg})
	return p
}

// nodeUpgrading: node-1 took 60s (from the phase's start at 100s),
// node-2 has been upgrading 20s, node-3 waits.
func nodeUpgrading() *v1beta1.UpgradePlan {
	p := plan("hvst-upgrade-a", v1beta1.PhaseInitializing, 0, v1beta1.PhaseInitialized, 10, v1beta1.PhaseNodeUpgrading, 100)
	withNodes(p, "node-1", v1beta1.NodeStatePostDrained, 160, "node-2", v1beta1.NodeStateWaitingReboot, 175, "node-3", v1beta1.NodeStateImagePreloaded, 50)
	return withCondition(p, v1beta1.ConditionProgressing, metav1.ConditionTrue, 100, "upgrading node node-2: waiting for it to reboot\nmore")
}

// succeeded is an earlier plan: ClusterUpgrade took 200s, ImageCleanup 30s.
func succeeded() *v1beta1.UpgradePlan {
	return plan("hvst-upgrade-old", v1beta1.PhaseClusterUpgrading, 0, v1beta1.PhaseClusterUpgraded, 200,
		v1beta1.PhaseCleaningUp, 500, v1beta1.PhaseCleanedUp, 530, v1beta1.PhaseSucceeded, 531)
}

func TestEstimate(t *testing.T) {
	now := t0.Add(180 * time.Second)
	tests := []struct {
		name     string
		plan     *v1beta1.UpgradePlan
		previous *v1beta1.UpgradePlan
		now      time.Time
		// want is the time left, -1 for no estimate.
		want       time.Duration
		wantMethod []string
	}{
		{"nothing measured yet", plan("p", v1beta1.PhaseISODownloading, 0), nil, now, -1, nil},
		{"a finished plan has nothing left", plan("p", v1beta1.PhaseInitializing, 0, v1beta1.PhaseFailed, 5), succeeded(), now, -1, nil},
		{"nodes left at the mean of the finished ones, less the current one's time", nodeUpgrading(), nil, now,
			2*60*time.Second - 20*time.Second, []string{"2 node(s) left × 1m0s per node (mean of 1 finished) - 20s spent", "not measured yet: ImageCleanup"}},
		{"phases still to run as long as in the previous plan", nodeUpgrading(), succeeded(), now,
			100*time.Second + 30*time.Second, []string{"ImageCleanup 30s as in hvst-upgrade-old"}},
		{"the running phase counts what it spent already", plan("p", v1beta1.PhaseClusterUpgrading, 0), succeeded(), t0.Add(50 * time.Second),
			150*time.Second + 30*time.Second, []string{"ClusterUpgrade 2m30s as in hvst-upgrade-old", "not measured yet: NodeUpgrade"}},
		{"a phase that overran its previous time has none left", plan("p", v1beta1.PhaseClusterUpgrading, 0), succeeded(), t0.Add(900 * time.Second),
			30 * time.Second, []string{"ClusterUpgrade 0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := FromPlan(tt.plan, tt.previous, tt.now).Estimate
			if tt.want < 0 {
				if e != nil {
					t.Fatalf("got an estimate %+v, want none", e)
				}
				return
			}
			if e == nil {
				t.Fatal("no estimate")
			}
			if e.Left.Duration != tt.want {
				t.Errorf("left %s, want %s (%s)", e.Left.Duration, tt.want, e.Method)
			}
			for _, m := range tt.wantMethod {
				if !strings.Contains(e.Method, m) {
					t.Errorf("method %q does not say %q", e.Method, m)
				}
			}
		})
	}
}

func TestFromPlan(t *testing.T) {
	now := t0.Add(180 * time.Second)
	s := FromPlan(nodeUpgrading(), nil, now)
	if s.Step != v1beta1.StepNodeUpgrade || s.StepNumber != 7 || s.Elapsed.Duration != 180*time.Second {
		t.Errorf("step %s %d elapsed %s", s.Step, s.StepNumber, s.Elapsed.Duration)
	}
	var phases []string
	for _, p := range s.Phases {
		phases = append(phases, p.Step+" "+p.Duration.Duration.String())
	}
	if got := strings.Join(phases, ", "); got != "Initialize 10s, NodeUpgrade 1m20s" {
		t.Errorf("phases %s", got)
	}
	if !s.Phases[1].Running || s.Phases[0].Running {
		t.Errorf("only the last phase runs: %+v", s.Phases)
	}
	upgrade := map[string]string{}
	for _, n := range s.Nodes {
		if n.Upgrade != nil {
			upgrade[n.Name] = n.Upgrade.Duration.String()
		}
	}
	if upgrade["node-1"] != "1m0s" || upgrade["node-2"] != "20s" || upgrade["node-3"] != "" || !s.Nodes[1].Upgrading {
		t.Errorf("node upgrades %v %+v", upgrade, s.Nodes)
	}
	if w := s.Waiting; w == nil || w.For != "upgrading node node-2: waiting for it to reboot" || !w.Since.Equal(ptr.To(at(175))) {
		t.Errorf("waiting %+v, want node-2's reboot since node-2 moved (175s)", w)
	}
	if s.Failure != nil {
		t.Errorf("a running plan has no failure: %+v", s.Failure)
	}
}

func TestFailure(t *testing.T) {
	msg := "upgrading node node-2 failed in PreDrainFailed: Job harvester-system/hvst-upgrade-a-pre-drain-node-2 failed (PodFailurePolicy: matching FailJob rule at index 0); last log lines:\nwaiting for the node's VMs\ngave up after 30m\nsee `kubectl -n harvester-system logs job/hvst-upgrade-a-pre-drain-node-2` for the whole log"
	p := plan("hvst-upgrade-a", v1beta1.PhaseNodeUpgrading, 0, v1beta1.PhaseFailed, 90)
	withNodes(p, "node-1", v1beta1.NodeStatePostDrained, 50, "node-2", v1beta1.NodeStatePreDrainFailed, 89)
	withCondition(p, v1beta1.ConditionProgressing, metav1.ConditionFalse, 90, msg)
	s := FromPlan(p, nil, t0.Add(time.Hour))
	f := s.Failure
	if f == nil {
		t.Fatal("no failure")
	}
	if f.Job != "harvester-system/hvst-upgrade-a-pre-drain-node-2" || f.Node != "node-2" {
		t.Errorf("job %q node %q", f.Job, f.Node)
	}
	if strings.Join(f.LogLines, "|") != "waiting for the node's VMs|gave up after 30m" {
		t.Errorf("log lines %q", f.LogLines)
	}
	if strings.Contains(f.Message, "last log lines") || !strings.HasPrefix(f.Message, "upgrading node node-2 failed") {
		t.Errorf("message %q", f.Message)
	}
	if s.Elapsed.Duration != 90*time.Second || s.Waiting != nil || s.Estimate != nil {
		t.Errorf("a failed plan's clock stops at its end and it waits for nothing: %s %+v %+v", s.Elapsed.Duration, s.Waiting, s.Estimate)
	}
	text := Text(s)
	for _, want := range []string{"failed    upgrading node node-2 failed", "  Job harvester-system/hvst-upgrade-a-pre-drain-node-2 on node node-2", "    | gave up after 30m"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text does not show %q:\n%s", want, text)
		}
	}
	var b bytes.Buffer
	if err := Write(&b, s, "json"); err != nil {
		t.Fatal(err)
	}
	var back Status
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Failure.LogLines[1] != "gave up after 30m" || back.Elapsed.Duration != 90*time.Second {
		t.Errorf("json does not round-trip (%v):\n%s", err, b.String())
	}
	if err := Write(&b, s, "table"); err == nil {
		t.Error("an unknown format is accepted")
	}
}

func TestText(t *testing.T) {
	s := FromPlan(nodeUpgrading(), succeeded(), t0.Add(180*time.Second))
	want := `UpgradePlan hvst-upgrade-a: Harvester ? -> v1.8.0   elapsed 3m0s
phase     NodeUpgrading  [7/8 NodeUpgrade]
waiting   upgrading node node-2: waiting for it to reboot (since 08:02:55)
time left ~2m10s (2 node(s) left × 1m0s per node (mean of 1 finished) - 20s spent on the current one + ImageCleanup 30s as in hvst-upgrade-old)
phases:
  Initialize         10s
  NodeUpgrade        1m20s (running)
nodes:
  node-1       PostDrained              upgrade 1m0s
  node-2       WaitingReboot            upgrade 20s (running)
  node-3       ImagePreloaded
`
	if got := Text(s); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestViewPlainPrintsWhatChanged: off a terminal, a clock that moved is no
// change; a node that moved is, and only its line is printed.
func TestViewPlainPrintsWhatChanged(t *testing.T) {
	var out bytes.Buffer
	v := &View{Out: &out}
	p := nodeUpgrading()
	show := func(at time.Duration) string {
		out.Reset()
		if err := v.Show(FromPlan(p, nil, t0.Add(at))); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if first := show(180 * time.Second); !strings.Contains(first, "UpgradePlan hvst-upgrade-a") || !strings.Contains(first, "node-3") {
		t.Errorf("the first view is not whole:\n%s", first)
	}
	if again := show(181500 * time.Millisecond); again != "" {
		t.Errorf("only clocks moved, yet it printed:\n%s", again)
	}
	withNodes(p, "node-1", v1beta1.NodeStatePostDrained, 160, "node-2", v1beta1.NodeStatePostDrained, 190, "node-3", v1beta1.NodeStatePreDraining, 191)
	changed := show(195 * time.Second)
	if !strings.Contains(changed, "node-2       PostDrained") || !strings.Contains(changed, "node-3       PreDraining") || strings.Contains(changed, "node-1") || strings.Contains(changed, "UpgradePlan") {
		t.Errorf("want only node-2's and node-3's new lines (and what they changed), got:\n%s", changed)
	}

	var term bytes.Buffer
	tv := &View{Out: &term, Terminal: true}
	for range 2 {
		if err := tv.Show(FromPlan(p, nil, t0.Add(200*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Count(term.String(), "\x1b[H\x1b[2J") != 2 {
		t.Errorf("a terminal view redraws each time: %q", term.String())
	}
}

// TestRetryChecksAndHistory: a failed plan that awaits a retry shows the
// command that retries it and until when, apart from the failure (not lost
// at the end of the log lines); the checks and every earlier failure show
// too, as the plan's status holds them.
func TestRetryChecksAndHistory(t *testing.T) {
	const name = "hvst-upgrade-a"
	deadline := metav1.NewTime(t0.Add(24 * time.Hour))
	failure := "upgrading node node-2 failed in PostDrainFailed: Job harvester-system/hvst-upgrade-a-post-drain-node-2 failed (PodFailurePolicy: exit code 4); last log lines:\nwaiting for the node's VMs\ngave up after 30m"
	p := plan(name, v1beta1.PhaseNodeUpgrading, 0, v1beta1.PhaseFailed, 90)
	p.Finalizers = []string{v1beta1.FinalizerCleanup}
	withNodes(p, "node-2", v1beta1.NodeStatePostDrainFailed, 89)
	withCondition(p, v1beta1.ConditionProgressing, metav1.ConditionFalse, 90, failure+"; "+RetryHint(name, deadline.Time))
	p.Status.Failures = []v1beta1.Failure{
		{Phase: v1beta1.PhaseISODownloading, Message: "downloading the ISO failed: 404", FailedAt: metav1.NewTime(t0.Add(20 * time.Second)),
			RetriedAt: ptr.To(metav1.NewTime(t0.Add(40 * time.Second))), Retry: "1"},
		{Phase: v1beta1.PhaseNodeUpgrading, Message: failure, FailedAt: metav1.NewTime(t0.Add(90 * time.Second)), RetryDeadline: &deadline},
	}
	p.Status.Checks = []v1beta1.Check{{Name: "ClusterUpgrade/HarvesterVersion", Result: v1beta1.CheckPassed, Message: "server-version is v1.8.0", LastTransitionTime: metav1.NewTime(t0)}}
	s := FromPlan(p, nil, t0.Add(time.Hour))
	if s.Failure == nil || s.Failure.Retry != RetryCommand(name) || !s.Failure.RetryDeadline.Equal(&deadline) {
		t.Fatalf("failure %+v: want the retry command and its deadline", s.Failure)
	}
	if got := strings.Join(s.Failure.LogLines, "|"); got != "waiting for the node's VMs|gave up after 30m" {
		t.Errorf("the log lines carry the retry hint: %q", got)
	}
	text := Text(s)
	for _, want := range []string{
		`retry     fix the cause, then: kubectl annotate upgradeplan hvst-upgrade-a management.harvesterhci.io/retry="$(date +%s)" --overwrite`,
		"          until 2026-11-26T08:00:00Z; then, or when the plan is deleted, everything it changed is cleaned up",
		"failures:\n  08:00:20 ISODownloading         retried at 08:00:40: downloading the ISO failed: 404\n  08:01:30 NodeUpgrading          not retried: upgrading node node-2 failed",
		"checks:\n  Passed   ClusterUpgrade/HarvesterVersion    server-version is v1.8.0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the text does not show %q:\n%s", want, text)
		}
	}
	// Cleaned up (no finalizer): nothing left to retry, no command offered.
	p.Finalizers = nil
	if s := FromPlan(p, nil, t0.Add(time.Hour)); s.Failure.Retry != "" || strings.Contains(Text(s), "retry ") {
		t.Errorf("a plan that can no longer be retried offers a retry:\n%s", Text(s))
	}
}

// TestTextVMs: the ledger is shown per node, with the Longhorn replicas
// being rebuilt there, then per VM something happened to; without a ledger,
// the replicas still are.
func TestTextVMs(t *testing.T) {
	p := nodeUpgrading()
	st := p.Status.NodeUpgradeStatuses["node-1"]
	st.VMs = &v1beta1.NodeVMs{ToMove: 3, Moved: 2, Failed: 1, Stopped: 1}
	st.ReplicasRebuilding = 2
	p.Status.NodeUpgradeStatuses["node-1"] = st
	st = p.Status.NodeUpgradeStatuses["node-2"]
	st.ReplicasRebuilding = 1
	p.Status.NodeUpgradeStatuses["node-2"] = st
	s := FromPlan(p, nil, t0.Add(180*time.Second))
	s.VMs = &VMs{Ledger: "harvester-system/hvst-upgrade-a-vm-ledger", Recorded: 40, More: 2,
		Changed: []VM{{Name: "default/web", Node: "node-1", Summary: "runs on node-2 (live-migrated 1 time(s))"}}}
	got := Text(s)
	want := `vms:      40 recorded at the start (ledger harvester-system/hvst-upgrade-a-vm-ledger; the whole record: upgrade-toolkit logs hvst-upgrade-a --archive, vm-ledger.txt)
  node-1       moved 2 of 3, pending 0, failing 1, shut down 1, Longhorn replicas rebuilding 2
  node-2       Longhorn replicas rebuilding 1
  default/web (on node-1 at the start): runs on node-2 (live-migrated 1 time(s))
  and 2 more VMs
`
	if !strings.Contains(got, want) {
		t.Errorf("got:\n%s\nwant in it:\n%s", got, want)
	}
	s.VMs = nil
	got = Text(s)
	want = `replicas:
  node-1       moved 2 of 3, pending 0, failing 1, shut down 1, Longhorn replicas rebuilding 2
  node-2       Longhorn replicas rebuilding 1
`
	if !strings.Contains(got, want) {
		t.Errorf("without a ledger, got:\n%s\nwant in it:\n%s", got, want)
	}
}

// TestTextAborted: an aborted plan says where it stopped, the nodes
// upgraded and not, and how to finish; it is not shown as failed.
func TestTextAborted(t *testing.T) {
	msg := "aborted (spec.abort) in phase NodeUpgrading: the cluster's components run the new release (there is no downgrade); nodes upgraded: node-1; nodes not upgraded: node-2"
	p := withCondition(plan("hvst-upgrade-a", v1beta1.PhaseNodeUpgrading, 0, v1beta1.PhaseAborted, 90), v1beta1.ConditionProgressing, metav1.ConditionFalse, 90, msg)
	s := FromPlan(p, nil, t0.Add(time.Hour))
	if s.Aborted != msg || s.Failure != nil {
		t.Fatalf("aborted %q, failure %+v: want the abort's message and no failure", s.Aborted, s.Failure)
	}
	if text := Text(s); !strings.Contains(text, "aborted   "+msg) || strings.Contains(text, "failed ") {
		t.Errorf("the text does not show the abort:\n%s", text)
	}
}

// TestWindowWaitsAreNotUpgradeTime: node-2 waited for a maintenance window
// from 160s (node-1 done) to 400s, then began: its upgrade, running, has
// taken 20s, not 260s, so it is not stalled; the view shows the windows,
// and, while nodes wait, when the next opens, which the estimate counts.
func TestWindowWaitsAreNotUpgradeTime(t *testing.T) {
	p := plan("hvst-upgrade-w", v1beta1.PhaseNodeUpgrading, 100)
	withNodes(p, "node-1", v1beta1.NodeStatePostDrained, 160, "node-2", v1beta1.NodeStatePreDraining, 400, "node-3", v1beta1.NodeStateImagePreloaded, 50)
	p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{MaintenanceWindows: []v1beta1.MaintenanceWindow{{Days: []string{"Sat"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}}}
	p.Status.MaintenanceWindowWaits = []v1beta1.Pause{{Start: at(160), End: ptr.To(at(400))}}
	s := FromPlan(p, nil, t0.Add(420*time.Second))
	for _, n := range s.Nodes {
		if n.Name == "node-2" && (n.Upgrade == nil || n.Upgrade.Duration != 20*time.Second || !n.Upgrading) {
			t.Errorf("node-2's upgrade %+v, want 20s running", n)
		}
	}
	if s.Stalled != nil {
		t.Errorf("the wait for the window made node-2 stalled: %+v", s.Stalled)
	}
	// node-1 finished before the wait: its time is whole.
	took, _, _ := NodeUpgradeTimes(&p.Status, DoneTimes(&p.Status))
	if took["node-1"] != 60*time.Second {
		t.Errorf("node-1 took %s, want 1m0s", took["node-1"])
	}
	if !strings.Contains(Text(s), "windows   Sat 22:00-04:00 Europe/Berlin\n") {
		t.Errorf("the view does not show the windows:\n%s", Text(s))
	}

	// Waiting now: the view says when the next window opens, and the
	// estimate waits for it.
	waiting := plan("hvst-upgrade-w", v1beta1.PhaseNodeUpgrading, 100)
	withNodes(waiting, "node-1", v1beta1.NodeStatePostDrained, 160, "node-2", v1beta1.NodeStateImagePreloaded, 50)
	waiting.Spec.NodeUpgradeOption = p.Spec.NodeUpgradeOption
	waiting.Status.NextMaintenanceWindow = ptr.To(at(3760))
	s = FromPlan(waiting, nil, t0.Add(160*time.Second))
	if text := Text(s); !strings.Contains(text, "windows   Sat 22:00-04:00 Europe/Berlin; closed: nodes wait for the next, at 2026-11-25T09:02:40Z\n") {
		t.Errorf("the view does not say when the next window opens:\n%s", text)
	}
	if e := s.Estimate; e == nil || e.Left.Duration != 60*time.Second+time.Hour || !strings.Contains(e.Method, "1h0m0s until the next maintenance window") {
		t.Errorf("estimate %+v, want one node's minute and the hour until the window", e)
	}
}

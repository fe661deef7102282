package nodestate

import (
	"reflect"
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

const (
	preloaded   = v1beta1.NodeStateImagePreloaded
	paused      = v1beta1.NodeStateUpgradePaused
	preDraining = v1beta1.NodeStatePreDraining
	preDrained  = v1beta1.NodeStatePreDrained
	preFailed   = v1beta1.NodeStatePreDrainFailed
	postDrain   = v1beta1.NodeStatePostDraining
	waiting     = v1beta1.NodeStateWaitingReboot
	postDrained = v1beta1.NodeStatePostDrained
	postFailed  = v1beta1.NodeStatePostDrainFailed
	single      = v1beta1.NodeStateSingleNodeUpgrading
	singleDone  = v1beta1.NodeStateSingleNodeUpgraded
	singleFail  = v1beta1.NodeStateSingleNodeUpgradeFailed
	cleaned     = v1beta1.NodeStateImageCleaned
)

var (
	target    = Target{OSImage: "Harvester v1.8.0", KubeletVersion: "v1.35.2+rke2r1"}
	before    = Host{BootID: "boot-1", OSImage: "Harvester v1.7.1"}
	notBack   = Host{BootID: "boot-1", OSImage: "Harvester v1.7.1", KubeletVersion: "v1.35.2+rke2r1"}
	back      = Host{Ready: true, BootID: "boot-2", OSImage: "Harvester v1.8.0", KubeletVersion: "v1.35.2+rke2r1"}
	upNoBoot  = Host{Ready: true, BootID: "boot-1", OSImage: "Harvester v1.7.1", KubeletVersion: "v1.35.2+rke2r1"}
	fellBack  = Host{Ready: true, BootID: "boot-2", OSImage: "Harvester v1.7.1", KubeletVersion: "v1.35.2+rke2r1"}
	oldKube   = Host{Ready: true, BootID: "boot-2", OSImage: "Harvester v1.8.0", KubeletVersion: "v1.34.4+rke2r1"}
	running   = Job{Status: JobRunning}
	succeeded = Job{Status: JobSucceeded}
	failed    = Job{Status: JobFailed, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}
)

func TestDecideOneNode(t *testing.T) {
	tests := []struct {
		name   string
		node   Node
		single bool
		want   v1beta1.NodeUpgradeState
		job    string
		reason string
	}{
		// multi-node, the happy path one event at a time
		{"preloaded waits for Rancher", Node{State: preloaded}, false, preloaded, "", ""},
		{"not seen yet counts as preloaded", Node{}, false, preloaded, "", ""},
		{"Rancher asks for pre-drain", Node{State: preloaded, PreDrainRequested: true}, false, preDraining, "", ""},
		{"pre-draining starts its Job", Node{State: preDraining, PreDrainRequested: true}, false, preDraining, v1beta1.JobTypePreDrain, ""},
		{"pre-drain Job running", Node{State: preDraining, PreDrain: running}, false, preDraining, "", ""},
		{"pre-drain Job done", Node{State: preDraining, PreDrain: succeeded}, false, preDrained, "", ""},
		{"pre-drain Job failed", Node{State: preDraining, PreDrain: failed}, false, preFailed, "", "BackoffLimitExceeded"},
		{"pre-drained waits for post-drain", Node{State: preDrained, PreDrain: succeeded}, false, preDrained, "", ""},
		{"Rancher asks for post-drain", Node{State: preDrained, PostDrainRequested: true, Host: upNoBoot, Target: target}, false, postDrain, "", ""},
		{"Rancher asks for post-drain, kubelet still old", Node{State: preDrained, PostDrainRequested: true, Host: oldKube, Target: target}, false, preDrained, "", ""},
		{"kubelet still old at the deadline", Node{State: preDrained, PostDrainRequested: true, Host: oldKube, Target: target, Overdue: true}, false, postFailed, "", v1beta1.ReasonKubeletVersionMismatch},
		{"Rancher never applies the plan", Node{State: preDrained, Target: target, Overdue: true}, false, postFailed, "", v1beta1.ReasonRancherPlanNotApplied},
		{"a blocked drain says so", Node{State: preDrained, Target: target, DrainBlocked: "drain of node n blocked: PodDisruptionBudget a/b"}, false, preDrained, "", v1beta1.ReasonDrainBlocked},
		{"a drain blocked at the deadline", Node{State: preDrained, Target: target, DrainBlocked: "drain of node n blocked", Overdue: true}, false, postFailed, "", v1beta1.ReasonDrainBlocked},
		{"post-draining starts its Job", Node{State: postDrain, PostDrainRequested: true}, false, postDrain, v1beta1.JobTypePostDrain, ""},
		{"post-drain Job done", Node{State: postDrain, PostDrain: succeeded}, false, waiting, "", ""},
		{"post-drain Job failed", Node{State: postDrain, PostDrain: failed}, false, postFailed, "", "BackoffLimitExceeded"},
		{"still rebooting", Node{State: waiting, PostDrain: succeeded, Before: before, Host: notBack, Target: target}, false, waiting, "", ""},
		{"not gone down yet", Node{State: waiting, Before: before, Host: upNoBoot, Target: target}, false, waiting, "", ""},
		{"rebooted into the new OS", Node{State: waiting, Before: before, Host: back, Target: target}, false, postDrained, "", ""},
		{"never came back", Node{State: waiting, Before: before, Host: notBack, Target: target, Overdue: true}, false, postFailed, "", v1beta1.ReasonRebootTimeout},
		{"never rebooted", Node{State: waiting, Before: before, Host: upNoBoot, Target: target, Overdue: true}, false, postFailed, "", v1beta1.ReasonRebootTimeout},
		{"fell back to the old OS", Node{State: waiting, Before: before, Host: fellBack, Target: target}, false, postFailed, "", v1beta1.ReasonFallbackBoot},
		{"back with an old kubelet", Node{State: waiting, Before: before, Host: oldKube, Target: target}, false, waiting, "", ""},
		{"old kubelet at the deadline", Node{State: waiting, Before: before, Host: oldKube, Target: target, Overdue: true}, false, postFailed, "", v1beta1.ReasonRebootTimeout},
		{"nothing recorded: the OS image decides", Node{State: waiting, Host: back, Target: target}, false, postDrained, "", ""},
		{"no reboot needed when the OS was current", Node{State: waiting, Before: Host{BootID: "boot-1", OSImage: "Harvester v1.8.0"}, Host: Host{Ready: true, BootID: "boot-1", OSImage: "Harvester v1.8.0", KubeletVersion: "v1.35.2+rke2r1"}, Target: target}, false, postDrained, "", ""},
		{"upgraded stays", Node{State: postDrained, PostDrainRequested: true, PreDrainRequested: true}, false, postDrained, "", ""},
		// pause
		{"paused before Rancher asks", Node{State: preloaded, Paused: true}, false, paused, "", v1beta1.ReasonAdministrativelyPaused},
		{"paused when Rancher asks", Node{State: paused, Paused: true, PreDrainRequested: true}, false, paused, "", v1beta1.ReasonAdministrativelyPaused},
		{"resumed, Rancher not there yet", Node{State: paused}, false, paused, "", ""},
		{"resumed and asked", Node{State: paused, PreDrainRequested: true}, false, preDraining, "", ""},
		{"pausing a draining node has no effect", Node{State: preDraining, Paused: true, PreDrain: running}, false, preDraining, "", ""},
		{"a paused plan holds a node Rancher asks for", Node{State: preloaded, PlanPaused: true, PreDrainRequested: true}, false, paused, "", v1beta1.ReasonAdministrativelyPaused},
		{"a paused plan lets a draining node finish", Node{State: preDraining, PlanPaused: true, PreDrain: running}, false, preDraining, "", ""},
		{"a paused plan holds a single node", Node{State: preloaded, PlanPaused: true}, true, paused, "", v1beta1.ReasonAdministrativelyPaused},
		// maintenance windows
		{"a closed window holds a node Rancher asks for", Node{State: preloaded, PreDrainRequested: true, OutsideWindow: closed}, false, preloaded, "", v1beta1.ReasonOutsideMaintenanceWindow},
		{"a closed window holds a resumed node", Node{State: paused, PreDrainRequested: true, OutsideWindow: closed}, false, paused, "", v1beta1.ReasonOutsideMaintenanceWindow},
		{"a closed window lets a draining node finish", Node{State: preDraining, PreDrain: succeeded, OutsideWindow: closed}, false, preDrained, "", ""},
		{"a closed window lets a node go on to its OS upgrade", Node{State: preDrained, PostDrainRequested: true, OutsideWindow: closed}, false, postDrain, "", ""},
		{"a closed window lets a node come back", Node{State: waiting, Before: before, Host: back, Target: target, OutsideWindow: closed}, false, postDrained, "", ""},
		{"pausing wins over a closed window", Node{State: preloaded, PlanPaused: true, PreDrainRequested: true, OutsideWindow: closed}, false, paused, "", v1beta1.ReasonAdministrativelyPaused},
		{"a paused node stays paused in a closed window", Node{State: preloaded, Paused: true, PreDrainRequested: true, OutsideWindow: closed}, false, paused, "", v1beta1.ReasonAdministrativelyPaused},
		{"a closed window holds a single node", Node{State: preloaded, OutsideWindow: closed}, true, preloaded, "", v1beta1.ReasonOutsideMaintenanceWindow},
		{"a closed window lets a single node finish", Node{State: single, SingleNodeUpgrade: succeeded, OutsideWindow: closed}, true, waiting, "", ""},
		// out of order and duplicate events never move a node back
		{"late pre-drain failure after success", Node{State: preDrained, PreDrain: failed}, false, preDrained, "", ""},
		{"late running report after post-drain", Node{State: waiting, PostDrain: running}, false, waiting, "", ""},
		{"stale request after upgrade", Node{State: postDrained, PreDrainRequested: true}, false, postDrained, "", ""},
		{"a failed node stays failed", Node{State: preFailed, PreDrain: succeeded, PreDrainRequested: true}, false, preFailed, "", ""},
		{"image cleanup is later", Node{State: cleaned, PreDrainRequested: true, Host: back}, false, cleaned, "", ""},
		{"post-drain request before pre-drain finished", Node{State: preDraining, PostDrainRequested: true, PreDrain: running}, false, preDraining, "", ""},
		// single node
		{"single node starts without Rancher", Node{State: preloaded}, true, single, "", ""},
		{"single node paused", Node{State: preloaded, Paused: true}, true, paused, "", v1beta1.ReasonAdministrativelyPaused},
		{"single node resumed", Node{State: paused}, true, single, "", ""},
		{"single node starts its Job", Node{State: single}, true, single, v1beta1.JobTypeSingleNodeUpgrade, ""},
		{"single node Job done", Node{State: single, SingleNodeUpgrade: succeeded}, true, waiting, "", ""},
		{"single node Job failed", Node{State: single, SingleNodeUpgrade: failed}, true, singleFail, "", "BackoffLimitExceeded"},
		{"single node rebooted", Node{State: waiting, Before: before, Host: back, Target: target}, true, singleDone, "", ""},
		{"single node never came back", Node{State: waiting, Before: before, Host: notBack, Target: target, Overdue: true}, true, singleFail, "", v1beta1.ReasonRebootTimeout},
		{"single node fell back", Node{State: waiting, Before: before, Host: fellBack, Target: target}, true, singleFail, "", v1beta1.ReasonFallbackBoot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.node.Name = "n1"
			d := Decide([]Node{tt.node}, tt.single)[0]
			if d.State != tt.want || d.StartJob != tt.job || d.Reason != tt.reason {
				t.Errorf("got %+v; want state %s, job %q, reason %q", d, tt.want, tt.job, tt.reason)
			}
			if !v1beta1.CanMoveNodeState(tt.node.State, d.State) {
				t.Errorf("decision moves %q back to %q", tt.node.State, d.State)
			}
		})
	}
}

// closed is what a node held by a closed maintenance window is told.
const closed = "the next opens at 2026-11-28T21:00:00Z (Sat 22:00 Europe/Berlin)"

// TestWindowHoldsWithoutTheGate: a node a closed window holds is not judged
// by the health gate or the breaker (no deadline may run), and says when
// the next window opens.
func TestWindowHoldsWithoutTheGate(t *testing.T) {
	n := Node{Name: "n", State: preloaded, PreDrainRequested: true, OutsideWindow: closed, Unhealthy: "volume v degraded", Breaker: "node m down"}
	if n.AtHealthGate() {
		t.Error("the health gate judges a node a closed window holds")
	}
	d := Decide([]Node{n}, false)[0]
	if !d.Window || d.HealthGate || d.Breaker || d.Message != WindowPrefix+closed {
		t.Errorf("decision %+v", d)
	}
	n.OutsideWindow = ""
	if !n.AtHealthGate() {
		t.Error("the window open, the health gate does not judge the node")
	}
}

func TestAtMostOneNodeInTheDrainSlot(t *testing.T) {
	nodes := []Node{
		{Name: "a", State: postDrain, PostDrain: running},
		{Name: "b", State: preloaded, PreDrainRequested: true},
		{Name: "c", State: paused, PreDrainRequested: true},
	}
	got := Decide(nodes, false)
	if got[1].State != preloaded || got[2].State != paused {
		t.Fatalf("a second node entered the drain slot: %+v", got)
	}
	if got[1].Message != "waiting for node a to finish its upgrade" {
		t.Errorf("message %q", got[1].Message)
	}
	// Once a is out of the slot, b may go.
	nodes[0].State = postDrained
	if got := Decide(nodes, false); got[1].State != preDraining {
		t.Errorf("b did not start after a finished: %+v", got[1])
	}
}

// TestDecideIntoReusesItsArray: a pass's decisions go into the array of
// the last pass's when it is large enough, and are those Decide makes.
func TestDecideIntoReusesItsArray(t *testing.T) {
	nodes := []Node{
		{Name: "a", State: postDrain, PostDrain: running},
		{Name: "b", State: preloaded, PreDrainRequested: true},
	}
	buf := make([]Decision, 3)
	buf[2] = Decision{State: postDrained}
	got := DecideInto(buf, nodes, false)
	if len(got) != len(nodes) || &got[0] != &buf[0] {
		t.Fatalf("DecideInto gave %d decisions in a new array, want %d in the given one", len(got), len(nodes))
	}
	if want := Decide(nodes, false); !reflect.DeepEqual(got, want) {
		t.Errorf("DecideInto = %+v, Decide = %+v", got, want)
	}
}

// TestEveryOrderOfEventsIsForwardOnly feeds every combination of
// observations to every state and checks the machine never moves back.
func TestEveryOrderOfEventsIsForwardOnly(t *testing.T) {
	jobs := []Job{{}, running, succeeded, failed}
	for _, state := range append(v1beta1.AllNodeStates(), "") {
		for mask := 0; mask < 128; mask++ {
			for _, pre := range jobs {
				for _, post := range jobs {
					for _, single := range []bool{false, true} {
						n := Node{Name: "n", State: state, Paused: mask&1 != 0, PreDrainRequested: mask&2 != 0,
							PostDrainRequested: mask&4 != 0, Overdue: mask&16 != 0, Excluded: mask&32 != 0, Before: before, Target: target,
							PreDrain: pre, PostDrain: post, SingleNodeUpgrade: pre}
						if mask&8 != 0 {
							n.Host = back
						}
						if mask&64 != 0 {
							n.OutsideWindow = closed
						}
						// The rules themselves, not Decide's guard against a
						// backward move, must move forward only.
						d := decide(&n, single, "")
						if !v1beta1.CanMoveNodeState(state, d.State) {
							t.Fatalf("%+v (single=%v) moved back to %s", n, single, d.State)
						}
						if d.StartJob != "" && d.State != state {
							t.Fatalf("%+v: a Job is started in the same pass as a state change", n)
						}
						if n.OutsideWindow != "" && NotStarted(state) && !NotStarted(d.State) {
							t.Fatalf("%+v (single=%v) began its upgrade (%s) outside every maintenance window", n, single, d.State)
						}
					}
				}
			}
		}
	}
}

// TestUpgradedNodesStay: an upgraded or excluded node stays where it is,
// silent, whatever is observed of it and of the other nodes; the node
// upgrade relies on it to observe nothing of them.
func TestUpgradedNodesStay(t *testing.T) {
	jobs := []Job{{}, running, succeeded, failed}
	for _, state := range v1beta1.AllNodeStates() {
		if !Finished(state) {
			continue
		}
		for mask := 0; mask < 256; mask++ {
			for _, job := range jobs {
				for _, other := range []v1beta1.NodeUpgradeState{preloaded, postDrain, waiting} {
					n := Node{Name: "n", State: state, Paused: mask&1 != 0, PlanPaused: mask&2 != 0, PreDrainRequested: mask&4 != 0,
						PostDrainRequested: mask&8 != 0, Overdue: mask&16 != 0, Before: before, Target: target,
						PreDrain: job, PostDrain: job, SingleNodeUpgrade: job}
					if mask&32 != 0 {
						n.Host = back
					}
					if mask&64 != 0 {
						n.Unhealthy, n.DrainBlocked, n.Rancher = "a volume is degraded", "a PDB blocks", "waiting"
					}
					n.Excluded = mask&128 != 0
					for _, single := range []bool{false, true} {
						got := DecideInto(nil, []Node{n, {Name: "m", State: other, PreDrainRequested: true}}, single)
						if got[0] != (Decision{State: state}) {
							t.Fatalf("%+v (single=%v, other node %s) decided %+v, want it to stay silently", n, single, other, got[0])
						}
					}
				}
			}
		}
	}
}

func TestAcknowledged(t *testing.T) {
	for _, s := range append(v1beta1.AllNodeStates(), "") {
		pre, post := Acknowledged(s)
		// A node's image cleanup begins as soon as it is back, before
		// Rancher may have seen the acknowledgement.
		backOrCleaning := s == postDrained || s == v1beta1.NodeStateImageCleaning || s == v1beta1.NodeStateImageCleaned || s == v1beta1.NodeStateImageCleanFailed
		if pre != (s == preDrained) || post != (backOrCleaning || s == v1beta1.NodeStateExcluded) {
			t.Errorf("Acknowledged(%q) = %v, %v", s, pre, post)
		}
	}
}

// TestExcluded: a listed node is excluded only while it waits for its
// reboot and is down, and never on a single-node cluster; a listed node
// that is Ready, or in another state, goes on as usual.
func TestExcluded(t *testing.T) {
	down := Node{Name: "n", State: waiting, Excluded: true, Before: before, Target: target}
	d := Decide([]Node{down}, false)[0]
	if d.State != v1beta1.NodeStateExcluded || d.Reason != v1beta1.ReasonExcludedByOperator ||
		!strings.Contains(d.Message, "not Ready") || !strings.Contains(d.Message, "Remove it from the cluster") {
		t.Errorf("a listed node down while it waits for its reboot: %+v, want Excluded saying what it was and what to do", d)
	}
	if d := Decide([]Node{down}, true)[0]; d.State != waiting {
		t.Errorf("single node: %+v, want it to wait", d)
	}
	up := down
	up.Host = back
	if d := Decide([]Node{up}, false)[0]; d.State != postDrained {
		t.Errorf("a listed node back on the new OS: %+v, want PostDrained", d)
	}
	for _, state := range []v1beta1.NodeUpgradeState{preloaded, v1beta1.NodeStatePreDraining, preDrained, postDrain} {
		n := down
		n.State, n.PreDrainRequested = state, true
		if d := Decide([]Node{n}, false)[0]; d.State == v1beta1.NodeStateExcluded {
			t.Errorf("a listed node in %s was excluded: only a node waiting for its reboot is", state)
		}
	}
	if !Finished(v1beta1.NodeStateExcluded) || Upgraded(v1beta1.NodeStateExcluded) {
		t.Error("an excluded node is finished, not upgraded")
	}
}

// A retry sends a failed node back to the start of the step that failed,
// never further: what it did before that step is not done again.
func TestRetryState(t *testing.T) {
	tests := []struct {
		state  v1beta1.NodeUpgradeState
		reason string
		want   v1beta1.NodeUpgradeState
	}{
		{v1beta1.NodeStateImagePreloadFailed, "BackoffLimitExceeded", v1beta1.NodeStateImagePreloading},
		{v1beta1.NodeStatePreDrainFailed, "PodFailurePolicy", v1beta1.NodeStatePreDraining},
		{v1beta1.NodeStatePostDrainFailed, "BackoffLimitExceeded", v1beta1.NodeStatePostDraining},
		{v1beta1.NodeStatePostDrainFailed, v1beta1.ReasonFallbackBoot, v1beta1.NodeStatePostDraining},
		{v1beta1.NodeStatePostDrainFailed, v1beta1.ReasonRebootTimeout, v1beta1.NodeStateWaitingReboot},
		{v1beta1.NodeStatePostDrainFailed, v1beta1.ReasonDrainBlocked, v1beta1.NodeStatePreDrained},
		{v1beta1.NodeStatePostDrainFailed, v1beta1.ReasonRancherPlanNotApplied, v1beta1.NodeStatePreDrained},
		{v1beta1.NodeStatePostDrainFailed, v1beta1.ReasonKubeletVersionMismatch, v1beta1.NodeStatePreDrained},
		{v1beta1.NodeStateSingleNodeUpgradeFailed, "DeadlineExceeded", v1beta1.NodeStateSingleNodeUpgrading},
		{v1beta1.NodeStateSingleNodeUpgradeFailed, v1beta1.ReasonRebootTimeout, v1beta1.NodeStateWaitingReboot},
		{v1beta1.NodeStateImageCleanFailed, "", v1beta1.NodeStateImageCleaning},
	}
	for _, tt := range tests {
		got, ok := RetryState(tt.state, tt.reason)
		if !ok || got != tt.want {
			t.Errorf("RetryState(%s, %s) = %s, %v; want %s", tt.state, tt.reason, got, ok, tt.want)
		}
		from, _ := tt.state.Tier()
		if to, _ := got.Tier(); to >= from {
			t.Errorf("%s goes to %s, which is not back", tt.state, got)
		}
	}
	for _, s := range v1beta1.AllNodeStates() {
		if _, ok := RetryState(s, ""); ok != s.IsFailure() {
			t.Errorf("RetryState(%s) ok=%v, but IsFailure=%v", s, ok, s.IsFailure())
		}
	}
}

// The circuit breaker counts the node to drain with those already down,
// and holds the drain without a deadline (not the health gate's).
func TestBreaker(t *testing.T) {
	for _, tt := range []struct {
		down  []string
		limit int
		open  bool
	}{
		{nil, 1, false},
		{nil, 0, false},
		{[]string{"n3"}, 1, true},
		{[]string{"n3"}, 2, false},
		{[]string{"n2", "n3"}, 2, true},
		{[]string{"n2", "n3"}, 3, false},
	} {
		why := Breaker(tt.down, tt.limit)
		if (why != "") != tt.open {
			t.Errorf("Breaker(%v, %d) = %q, want open %v", tt.down, tt.limit, why, tt.open)
		}
		for _, n := range tt.down {
			if tt.open && !strings.Contains(why, n) {
				t.Errorf("Breaker(%v, %d) does not name %s: %q", tt.down, tt.limit, n, why)
			}
		}
	}
	n := Node{Name: "n1", State: preloaded, PreDrainRequested: true, Breaker: Breaker([]string{"n3"}, 1), Unhealthy: "Longhorn volume v not healthy"}
	d := Decide([]Node{n}, false)[0]
	if d.State != preloaded || !d.Breaker || d.HealthGate || !strings.HasPrefix(d.Message, BreakerPrefix) || !strings.Contains(d.Message, "Longhorn volume v") {
		t.Errorf("held by the breaker and the gate: %+v", d)
	}
	n.Breaker = ""
	if d := Decide([]Node{n}, false)[0]; d.Breaker || !d.HealthGate {
		t.Errorf("breaker closed, gate holds: %+v", d)
	}
	n.Unhealthy = ""
	if d := Decide([]Node{n}, false)[0]; d.State != preDraining {
		t.Errorf("breaker closed, gate open: %+v", d)
	}
}

package insight

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

var t0 = time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)

func TestOneInsightPerProblem(t *testing.T) {
	f := Facts{
		Now: t0, Slot: "node-1", Draining: true, TaintExpected: true,
		TaintWriter:        Writer{Manager: "rogue-controller", At: t0},
		Unavailable:        []NodeProblem{{Node: "node-3", Cordoned: true, CordonedBy: Writer{Manager: "kubectl-cordon", At: t0}}},
		Blocked:            []PodBlock{{Pod: "default/guarded", Budgets: []string{"default/guard (minAvailable 1, 0 disruptions allowed)"}, BudgetNames: []string{"default/guard"}}},
		Refused:            []PodBlock{{Pod: "default/bare", Why: "no controller manages it (drain option force is off)"}},
		V1Upgrades:         []string{"harvester-system/hvst-upgrade-x"},
		ProvisioningPaused: "Cluster/fleet-local/local",
		Stall:              &Stall{What: "node node-1", Object: "Node/node-1", Spent: 3 * time.Minute, Typical: time.Minute, Waiting: "Rancher"},
	}
	got := Evaluate(f, nil)
	want := map[string][]string{
		v1beta1.InsightDrainBlockedByPDB:   {"Node/node-1", "Pod/default/guarded", "PodDisruptionBudget/default/guard"},
		v1beta1.InsightDrainRefusedPod:     {"Node/node-1", "Pod/default/bare"},
		v1beta1.InsightDrainTaintRemoved:   {"Node/node-1"},
		v1beta1.InsightNodeUnavailable:     {"Node/node-3"},
		v1beta1.InsightConcurrentV1Upgrade: {"Upgrade/harvester-system/hvst-upgrade-x"},
		v1beta1.InsightProvisioningPaused:  {"Cluster/fleet-local/local"},
		v1beta1.InsightStalled:             {"Node/node-1"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d insights, want %d: %+v", len(got), len(want), got)
	}
	for _, in := range got {
		objs, ok := want[in.Type]
		if !ok || strings.Join(objs, ",") != strings.Join(in.Objects, ",") {
			t.Errorf("insight %s names %v, want %v", in.Type, in.Objects, objs)
		}
		if in.Message == "" || in.Doc != "docs/verification.md#"+strings.ToLower(in.Type) || !in.Since.Time.Equal(t0) || in.Impact == "" {
			t.Errorf("incomplete insight %+v", in)
		}
	}
	for _, m := range []string{"rogue-controller", "kubectl-cordon", "kubectl uncordon node-3", "default/guard (minAvailable 1"} {
		if !strings.Contains(render(got), m) {
			t.Errorf("no insight says %q:\n%s", m, render(got))
		}
	}
	// Most severe first.
	for i := 1; i < len(got); i++ {
		if rank(got[i].Level) > rank(got[i-1].Level) {
			t.Errorf("insight %d (%s) is more severe than %d (%s)", i, got[i].Level, i-1, got[i-1].Level)
		}
	}
}

func TestLevelsRiseAndSinceIsKept(t *testing.T) {
	f := Facts{Now: t0, Stall: &Stall{What: "step ClusterUpgrade", Object: "UpgradePlan/p", Spent: time.Hour, Typical: time.Minute}}
	first := Evaluate(f, nil)
	if first[0].Level != v1beta1.InsightInfo {
		t.Fatalf("a new stall is %s, want Info", first[0].Level)
	}
	if d := NextChange(first, t0); d != 5*time.Minute {
		t.Errorf("next change in %s, want 5m", d)
	}
	f.Now = t0.Add(6 * time.Minute)
	f.Stall.Spent += 6 * time.Minute
	later := Evaluate(f, first)
	if later[0].Message != first[0].Message {
		t.Errorf("a stall's message changes while it lasts (a status write at every look): %q, then %q", first[0].Message, later[0].Message)
	}
	if later[0].Level != v1beta1.InsightWarning || !later[0].Since.Time.Equal(t0) || !Rose(later[0], first) {
		t.Errorf("after 6 minutes: %+v", later[0])
	}
	if Rose(later[0], later) {
		t.Error("an unchanged level rose")
	}
	f.Now = t0.Add(16 * time.Minute)
	if l := Evaluate(f, later)[0].Level; l != v1beta1.InsightError {
		t.Errorf("after 16 minutes: %s, want Error", l)
	}
	// Gone when its problem is.
	if got := Evaluate(Facts{Now: f.Now}, later); len(got) != 0 {
		t.Errorf("insights without a problem: %+v", got)
	}
}

// The breaker's insight names every node that is down, and only while
// draining another one would leave more unavailable than the limit.
func TestCircuitBreakerOpen(t *testing.T) {
	f := Facts{Now: t0, Slot: "node-1", MaxUnavailable: 1, Unavailable: []NodeProblem{
		{Node: "node-2", Cordoned: true}, {Node: "node-3", NotReady: true},
	}}
	var got *v1beta1.Insight
	for _, in := range Evaluate(f, nil) {
		if in.Type == v1beta1.InsightCircuitBreakerOpen {
			got = &in
		}
	}
	if got == nil || strings.Join(got.Objects, ",") != "Node/node-3" || got.Level != v1beta1.InsightInfo && got.Level != v1beta1.InsightWarning ||
		!strings.Contains(got.Message, "maxUnavailableNodes (1)") {
		t.Fatalf("breaker insight: %+v", got)
	}
	f.MaxUnavailable = 2
	for _, in := range Evaluate(f, nil) {
		if in.Type == v1beta1.InsightCircuitBreakerOpen {
			t.Errorf("breaker open below its limit: %+v", in)
		}
		if in.Type == v1beta1.InsightNodeUnavailable && (strings.Contains(in.Message, "drained all the same") != (in.Objects[0] == "Node/node-3")) {
			t.Errorf("below the limit only the node that is down and not cordoned lets the next drain go on: %s", in.Message)
		}
	}
}

func render(ins []v1beta1.Insight) string {
	var b strings.Builder
	for _, in := range ins {
		b.WriteString(in.Message + "\n")
	}
	return b.String()
}

// TestManyUnavailableNodesStayWithinTheStatusBounds: at 200 nodes a storm
// of NotReady nodes once gave 33 insights, one of 32 objects, and the API
// server refused the whole status: the plan could no longer record
// anything. Many nodes are one insight, within the CRD's bounds.
func TestManyUnavailableNodesStayWithinTheStatusBounds(t *testing.T) {
	var down []NodeProblem
	for i := range 200 {
		down = append(down, NodeProblem{Node: fmt.Sprintf("node-%03d", i), NotReady: true, Cordoned: i%7 == 0})
	}
	before := Evaluate(Facts{Now: t0, Slot: "node-999", MaxUnavailable: 1, Unavailable: down[:10]}, nil)
	got := Evaluate(Facts{Now: t0.Add(time.Minute), Slot: "node-999", MaxUnavailable: 1, Unavailable: down}, before)
	if len(got) > v1beta1.MaxInsights {
		t.Fatalf("%d insights, more than %d", len(got), v1beta1.MaxInsights)
	}
	var unavailable int
	for _, in := range got {
		if len(in.Objects) > v1beta1.MaxInsightObjects || len(in.Message) > v1beta1.MaxInsightMessage {
			t.Errorf("%s: %d objects, %d characters: beyond the CRD's bounds", in.Type, len(in.Objects), len(in.Message))
		}
		if in.Type != v1beta1.InsightNodeUnavailable {
			continue
		}
		unavailable++
		if !strings.Contains(in.Message, "200 nodes are unavailable") || !strings.Contains(in.Message, "and 190 more") {
			t.Errorf("message does not count and name the nodes: %s", in.Message)
		}
		if !in.Since.Time.Equal(t0) {
			t.Errorf("since %s: want %s, when the first of them was seen", in.Since, t0)
		}
	}
	if unavailable != 1 {
		t.Errorf("%d NodeUnavailable insights; want one for all 200 nodes", unavailable)
	}
}

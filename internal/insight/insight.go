// Package insight names, while a plan runs, what keeps it from moving and
// what interferes with it: one insight per problem, with a level that rises
// the longer it lasts, what it puts at risk, since when, the objects
// involved and what to do. Evaluate is pure, over the facts Gather reads.
package insight

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
)

// NodesNamedApart is how many unavailable nodes get an insight each; more
// are one problem (a partition, a storm of NotReady nodes) and get one
// insight that names them all, so that the status stays within its bounds
// (v1beta1.MaxInsights) and a reader sees the problem, not a page of it.
const NodesNamedApart = 4

// Facts are what one look at the cluster saw.
type Facts struct {
	Now time.Time
	// Slot is the node being upgraded now ("" when none) and Draining
	// whether Rancher drains it now (it is PreDrained).
	Slot     string
	Draining bool
	// SlotTainted: the slot's node has the kubevirt.io/drain taint; only
	// read while the node should have it (TaintExpected).
	SlotTainted, TaintExpected bool
	// TaintWriter is who last changed the slot node's taints, and when.
	TaintWriter Writer
	// Unavailable are the managed nodes, other than the slot's, that are
	// cordoned or not Ready.
	Unavailable []NodeProblem
	// MaxUnavailable is the circuit breaker's limit
	// (spec.nodeUpgradeOption.maxUnavailableNodes).
	MaxUnavailable int
	// Blocked are the pods on the draining node that the eviction API
	// refuses now, with the budgets that refuse them.
	Blocked []PodBlock
	// Refused are the pods on the draining node Rancher's drain options
	// refuse to delete.
	Refused []PodBlock
	// V1Upgrades are Harvester's own upgrades (upgrades.harvesterhci.io)
	// that have not finished.
	V1Upgrades []string
	// ProvisioningPaused says which provisioning object is paused, "" when
	// none.
	ProvisioningPaused string
	// Stall is what overran its estimate, nil when nothing did.
	Stall *Stall
}

// Writer is who last changed a field and when, from managed fields.
type Writer struct {
	Manager string
	At      time.Time
}

func (w Writer) String() string {
	if w.Manager == "" {
		return ""
	}
	return fmt.Sprintf(" (last changed by %s at %s)", w.Manager, w.At.UTC().Format(time.RFC3339))
}

// NodeProblem is a node that is cordoned or not Ready.
type NodeProblem struct {
	Node       string
	Cordoned   bool
	NotReady   bool
	CordonedBy Writer
}

// PodBlock is a pod the drain cannot remove, and why.
type PodBlock struct {
	Pod string
	// Budgets name the PodDisruptionBudgets that allow no disruption
	// (e.g. "default/guard (minAvailable 1, 0 disruptions allowed)").
	Budgets []string
	// BudgetNames are their namespace/name.
	BudgetNames []string
	// Why says why the drain options refuse it.
	Why string
}

// Stall is a node or step that overran its estimate.
type Stall struct {
	// What is "node node-3" or "step ClusterUpgrade".
	What    string
	Object  string
	Spent   time.Duration
	Typical time.Duration
	// Began is when it began, moved on by the time the plan was paused.
	Began time.Time
	// Waiting is what the plan says it waits for.
	Waiting string
}

// kind is what every insight of a type shares.
type kind struct {
	impact v1beta1.InsightImpact
	// levels rise at these ages: Info from 0, Warning from warn, Error
	// from err; a negative age means never, 0 at once.
	warn, err time.Duration
}

var kinds = map[string]kind{
	v1beta1.InsightDrainBlockedByPDB:   {v1beta1.ImpactUpgradeStalled, 0, 10 * time.Minute},
	v1beta1.InsightDrainRefusedPod:     {v1beta1.ImpactUpgradeStalled, 0, 10 * time.Minute},
	v1beta1.InsightDrainTaintRemoved:   {v1beta1.ImpactVMAvailability, 0, 0},
	v1beta1.InsightNodeUnavailable:     {v1beta1.ImpactDataRedundancy, 0, 5 * time.Minute},
	v1beta1.InsightCircuitBreakerOpen:  {v1beta1.ImpactUpgradeStalled, 0, 15 * time.Minute},
	v1beta1.InsightConcurrentV1Upgrade: {v1beta1.ImpactAPIAvailability, 0, 0},
	v1beta1.InsightProvisioningPaused:  {v1beta1.ImpactUpgradeStalled, 0, 10 * time.Minute},
	v1beta1.InsightStalled:             {v1beta1.ImpactUpgradeStalled, 5 * time.Minute, 15 * time.Minute},
}

// Doc is where docs/verification.md says what to do about an insight type.
func Doc(insightType string) string {
	return "docs/verification.md#" + strings.ToLower(insightType)
}

// Evaluate turns the facts into insights, keeping since when each was
// first seen from the previous ones, most severe first.
func Evaluate(f Facts, previous []v1beta1.Insight) []v1beta1.Insight {
	var out []v1beta1.Insight
	// grouped: one insight of its type stands for many objects, which
	// come and go while the problem lasts; it is as old as the oldest
	// insight of its type before.
	add := func(t, msg string, grouped bool, objects ...string) {
		objects = objects[:min(len(objects), v1beta1.MaxInsightObjects)]
		in := v1beta1.Insight{Type: t, Impact: kinds[t].impact, Since: metav1.NewTime(f.Now), Objects: objects, Message: msg, Doc: Doc(t)}
		for _, p := range previous {
			if p.Type == t && (slices.Equal(p.Objects, objects) || grouped && p.Since.Before(&in.Since)) {
				in.Since = p.Since
			}
		}
		in.Level = levelAt(kinds[t], f.Now.Sub(in.Since.Time))
		out = append(out, in)
	}
	for _, b := range f.Blocked {
		objects := append([]string{"Node/" + f.Slot, "Pod/" + b.Pod}, prefixed("PodDisruptionBudget/", b.BudgetNames)...)
		add(v1beta1.InsightDrainBlockedByPDB, fmt.Sprintf(
			"drain of node %s blocked: PodDisruptionBudget %s refuses the eviction of pod %s; Rancher retries until its drain timeout. "+
				"Delete or relax the budget, or move the pod's workload", f.Slot, strings.Join(b.Budgets, ", "), b.Pod), false, objects...)
	}
	for _, b := range f.Refused {
		add(v1beta1.InsightDrainRefusedPod, fmt.Sprintf("drain of node %s blocked: Rancher's drain options refuse to delete pod %s: %s; "+
			"delete the pod, or enable the option in the provisioning cluster's upgradeStrategy drain options", f.Slot, b.Pod, b.Why), false, "Node/"+f.Slot, "Pod/"+b.Pod)
	}
	if f.TaintExpected && !f.SlotTainted {
		add(v1beta1.InsightDrainTaintRemoved, fmt.Sprintf("node %s is being upgraded but lost its kubevirt.io/drain taint%s: VMs may be scheduled "+
			"onto it and stopped by its reboot. Find what removes it (a controller or a person) and stop it; the node's pre-drain taints it again on a retry",
			f.Slot, f.TaintWriter), false, "Node/"+f.Slot)
	}
	var down, downObjects []string
	for _, n := range f.Unavailable {
		if n.NotReady {
			down = append(down, n.Node)
			downObjects = append(downObjects, "Node/"+n.Node)
		}
	}
	breaker := nodestate.Breaker(down, f.MaxUnavailable)
	if len(f.Unavailable) > NodesNamedApart {
		add(v1beta1.InsightNodeUnavailable, unavailableTogether(f, breaker), true, nodeObjects(f.Unavailable)...)
	}
	for _, n := range f.Unavailable {
		if len(f.Unavailable) > NodesNamedApart {
			break
		}
		var what []string
		if n.Cordoned {
			what = append(what, "cordoned"+n.CordonedBy.String())
		}
		if n.NotReady {
			what = append(what, "not Ready")
		}
		holds := "no other node is drained until it is back"
		if !n.Cordoned && breaker == "" {
			// Below the circuit breaker's limit the next drain goes on.
			holds = fmt.Sprintf("the next node is drained all the same (spec.nodeUpgradeOption.maxUnavailableNodes is %d)", f.MaxUnavailable)
		}
		add(v1beta1.InsightNodeUnavailable, fmt.Sprintf("node %s is %s while %s: %s "+
			"(its volumes' replicas and VMs are at risk); uncordon it (kubectl uncordon %s) or bring it back",
			n.Node, strings.Join(what, " and "), slotPhrase(f.Slot), holds, n.Node), false, "Node/"+n.Node)
	}
	if breaker != "" {
		add(v1beta1.InsightCircuitBreakerOpen, "the circuit breaker holds every further drain: "+breaker+
			"; bring the nodes back, or raise the limit at the risk of the volumes with replicas on them", true, downObjects...)
	}
	for _, u := range f.V1Upgrades {
		add(v1beta1.InsightConcurrentV1Upgrade, fmt.Sprintf("Harvester's built-in upgrade %s runs at the same time as this plan: the two upgrade the same "+
			"nodes and charts. Delete the upgrade (kubectl delete upgrades.harvesterhci.io -n harvester-system %s) or this plan",
			u, strings.TrimPrefix(u, "harvester-system/")), false, "Upgrade/"+u)
	}
	if f.ProvisioningPaused != "" {
		add(v1beta1.InsightProvisioningPaused, fmt.Sprintf("%s is paused: Rancher upgrades no node until it is resumed", f.ProvisioningPaused), false, f.ProvisioningPaused)
	}
	if s := f.Stall; s != nil {
		add(v1beta1.InsightStalled, s.Message(), false, s.Object)
	}
	slices.SortStableFunc(out, func(a, b v1beta1.Insight) int { return rank(b.Level) - rank(a.Level) })
	return out[:min(len(out), v1beta1.MaxInsights)]
}

// unavailableTogether is the one insight's message for many unavailable
// nodes: how many, which (names.List), and what holds.
func unavailableTogether(f Facts, breaker string) string {
	var notReady, cordoned []string
	for _, n := range f.Unavailable {
		if n.NotReady {
			notReady = append(notReady, n.Node)
		}
		if n.Cordoned {
			cordoned = append(cordoned, n.Node+n.CordonedBy.String())
		}
	}
	var what []string
	if len(notReady) > 0 {
		what = append(what, fmt.Sprintf("%d not Ready (%s)", len(notReady), names.List(notReady)))
	}
	if len(cordoned) > 0 {
		what = append(what, fmt.Sprintf("%d cordoned (%s)", len(cordoned), names.List(cordoned)))
	}
	holds := "no other node is drained until they are back"
	if len(cordoned) == 0 && breaker == "" {
		holds = fmt.Sprintf("the next node is drained all the same (spec.nodeUpgradeOption.maxUnavailableNodes is %d)", f.MaxUnavailable)
	}
	return fmt.Sprintf("%d nodes are unavailable while %s: %s; %s (their volumes' replicas and VMs are at risk). "+
		"So many at once is one cause: the network, the API server or the nodes' kubelets; uncordon the cordoned ones or bring them back",
		len(f.Unavailable), slotPhrase(f.Slot), strings.Join(what, "; "), holds)
}

func nodeObjects(nodes []NodeProblem) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, "Node/"+n.Node)
	}
	return out
}

// Message says what overran and what the plan waits for. It names when the
// node or step began, not how long it has taken: a message that changed at
// every look would be a status write at every look.
func (s *Stall) Message() string {
	msg := fmt.Sprintf("%s, begun at %s, has run past its estimate of %s", s.What, s.Began.UTC().Format(time.RFC3339), round(s.Typical))
	if s.Waiting != "" {
		msg += "; waiting for: " + s.Waiting
	}
	return msg
}

func slotPhrase(slot string) string {
	if slot == "" {
		return "the plan runs"
	}
	return "node " + slot + " is upgraded"
}

func levelAt(k kind, age time.Duration) v1beta1.InsightLevel {
	switch {
	case age >= k.err:
		return v1beta1.InsightError
	case age >= k.warn:
		return v1beta1.InsightWarning
	}
	return v1beta1.InsightInfo
}

func rank(l v1beta1.InsightLevel) int {
	switch l {
	case v1beta1.InsightError:
		return 2
	case v1beta1.InsightWarning:
		return 1
	}
	return 0
}

// NextChange is how long until an insight's level rises, 0 when none will.
func NextChange(insights []v1beta1.Insight, now time.Time) time.Duration {
	var next time.Duration
	for _, in := range insights {
		k := kinds[in.Type]
		age := now.Sub(in.Since.Time)
		for _, at := range []time.Duration{k.warn, k.err} {
			if at > age && (next == 0 || at-age < next) {
				next = at - age
			}
		}
	}
	return next
}

// Rose reports, for an insight of now, whether it is new or its level rose
// since previous.
func Rose(in v1beta1.Insight, previous []v1beta1.Insight) bool {
	for _, p := range previous {
		if p.Type == in.Type && slices.Equal(p.Objects, in.Objects) {
			return rank(in.Level) > rank(p.Level)
		}
	}
	return true
}

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

func round(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

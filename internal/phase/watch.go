package phase

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/insight"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/status"
)

// WatchInterval is how often the watchdog looks while a plan runs: what it
// reads (pods, budgets, Harvester's own upgrades) is not watched, and each
// problem must be named within a minute.
const WatchInterval = 15 * time.Second

// finishedGrace is how long a node that just finished its upgrade may stay
// cordoned: Rancher uncordons it once its post-drain hook is done.
const finishedGrace = 2 * time.Minute

// The watchdog reads the pods of the node Rancher drains, the budgets that
// may refuse their eviction, Harvester's own upgrades and the Cluster API
// cluster, and a node's managed fields to say who cordoned it.
//
// Listing pods everywhere also serves the Jobs' pods and the log capture's
// (harvester-system, cattle-system), which list no wider.
//
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list
// +kubebuilder:rbac:groups=harvesterhci.io,resources=upgrades,verbs=list
// +kubebuilder:rbac:groups=cluster.x-k8s.io,namespace=fleet-local,resources=clusters,verbs=get

// Watch looks for what keeps the running plan from moving and what
// interferes with it, and records it in status.insights and the Stalled
// condition: a Warning event tells of each new insight and each rise of
// level. It returns when to look again.
func Watch(ctx context.Context, s *Scope, previous *v1beta1.UpgradePlan) (time.Duration, error) {
	f, err := gather(ctx, s, previous)
	if err != nil {
		return 0, err
	}
	before := s.Plan.Status.Insights
	now := insight.Evaluate(f, before)
	for _, in := range now {
		if in.Level != v1beta1.InsightInfo && insight.Rose(in, before) {
			s.Event(corev1.EventTypeWarning, v1beta1.EventInsight, "%s %s: %s", in.Level, in.Type, in.Message)
		}
	}
	if !equality.Semantic.DeepEqual(before, now) {
		s.Plan.Status.Insights = now
	}
	setStalled(s, f.Stall)
	next := WatchInterval
	if d := insight.NextChange(now, s.Clock.Now()); d > 0 && d < next {
		next = d
	}
	return next, nil
}

// setStalled says in the Stalled condition whether a node or step overran
// its estimate.
func setStalled(s *Scope, st *insight.Stall) {
	c := metav1.Condition{Type: v1beta1.ConditionStalled, Status: metav1.ConditionFalse, Reason: v1beta1.ReasonNotStalled}
	if st != nil {
		c = metav1.Condition{Type: v1beta1.ConditionStalled, Status: metav1.ConditionTrue, Reason: v1beta1.InsightStalled, Message: st.Message()}
	}
	c.ObservedGeneration = s.Plan.Generation
	meta.SetStatusCondition(&s.Plan.Status.Conditions, c)
}

// gather reads what the insights are made of.
func gather(ctx context.Context, s *Scope, previous *v1beta1.UpgradePlan) (insight.Facts, error) {
	now := s.Clock.Now()
	f := insight.Facts{Now: now, MaxUnavailable: s.Plan.MaxUnavailableNodes()}
	st := &s.Plan.Status
	recent := map[string]bool{}
	for name, ns := range st.NodeUpgradeStatuses {
		switch {
		case nodestate.InDrainSlot(ns.State):
			f.Slot = name
			f.Draining = ns.State == v1beta1.NodeStatePreDrained
			f.TaintExpected = f.Draining
		case nodestate.Upgraded(ns.State) && ns.LastTransitionTime != nil && now.Sub(ns.LastTransitionTime.Time) < finishedGrace:
			recent[name] = true
		}
	}
	nodes, err := s.Kept.ManagedNodes(ctx, s.Client)
	if err != nil {
		return f, err
	}
	var rancher map[string]bool
	for i := range nodes {
		n := &nodes[i]
		if n.Name == f.Slot {
			f.SlotTainted = cluster.HasDrainTaint(n)
			continue
		}
		notReady := !cluster.NodeReady(n)
		if (!n.Spec.Unschedulable && !notReady) || recent[n.Name] || st.NodeUpgradeStatuses[n.Name].State == v1beta1.NodeStateExcluded {
			// An excluded node is known lost: the plan's NodesExcluded
			// condition names it.
			continue
		}
		if rancher == nil {
			if rancher, err = rancherDrains(ctx, s); err != nil {
				return f, err
			}
		}
		if rancher[n.Name] && !notReady {
			// Rancher cordons the node it is about to drain.
			continue
		}
		p := insight.NodeProblem{Node: n.Name, Cordoned: n.Spec.Unschedulable, NotReady: notReady}
		if p.Cordoned {
			if p.CordonedBy, err = lastWriter(ctx, s, n.Name, "unschedulable"); err != nil {
				return f, err
			}
		}
		f.Unavailable = append(f.Unavailable, p)
	}
	if f.TaintExpected && !f.SlotTainted {
		if f.TaintWriter, err = lastWriter(ctx, s, f.Slot, "taints"); err != nil {
			return f, err
		}
	}
	if f.Draining {
		if err := gatherDrain(ctx, s, &f); err != nil {
			return f, err
		}
	}
	if f.V1Upgrades, err = v1Upgrades(ctx, s); err != nil {
		return f, err
	}
	if f.ProvisioningPaused, err = provisioningPaused(ctx, s); err != nil {
		return f, err
	}
	f.Stall = stall(s, previous, now)
	return f, nil
}

// rancherDrains are the nodes Rancher works on now (it cordons them
// itself); none on a cluster without machine plans.
func rancherDrains(ctx context.Context, s *Scope) (map[string]bool, error) {
	drains, err := s.Kept.DrainRequests(ctx, s.Client)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for node, sec := range drains.ByNode() {
		out[node] = cluster.InRancherDrain(sec.GetAnnotations())
	}
	return out, nil
}

// lastWriter reads a node from the API server (the cache drops managed
// fields) to say who last changed a field of its spec.
func lastWriter(ctx context.Context, s *Scope, node, field string) (insight.Writer, error) {
	n := &corev1.Node{}
	if err := s.APIReader.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		return insight.Writer{}, client.IgnoreNotFound(err)
	}
	who, at := cluster.LastSpecWriter(&n.ObjectMeta, field)
	return insight.Writer{Manager: who, At: at}, nil
}

// gatherDrain finds the pods on the node Rancher drains that its drain
// cannot remove: those a PodDisruptionBudget protects while it allows no
// disruption, and those its drain options refuse.
func gatherDrain(ctx context.Context, s *Scope, f *insight.Facts) error {
	var pods corev1.PodList
	if err := s.APIReader.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", f.Slot)}); err != nil {
		return fmt.Errorf("listing the pods of node %s, which Rancher drains: %w", f.Slot, err)
	}
	var pdbs policyv1.PodDisruptionBudgetList
	if err := s.APIReader.List(ctx, &pdbs); err != nil {
		return fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	opts, err := drainOptionsOf(ctx, s, f.Slot)
	if err != nil {
		return err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !cluster.DrainEvicts(p) {
			continue
		}
		key := p.Namespace + "/" + p.Name
		b := insight.PodBlock{Pod: key}
		for j := range pdbs.Items {
			pdb := &pdbs.Items[j]
			if cluster.Protects(pdb, p) && pdb.Status.DisruptionsAllowed == 0 && pdb.Status.ObservedGeneration >= pdb.Generation {
				b.Budgets = append(b.Budgets, cluster.DescribePDB(pdb))
				b.BudgetNames = append(b.BudgetNames, pdb.Namespace+"/"+pdb.Name)
			}
		}
		if len(b.Budgets) > 0 {
			f.Blocked = append(f.Blocked, b)
		}
		if opts != nil {
			if why := cluster.DrainRefuses(*opts, p); why != "" {
				f.Refused = append(f.Refused, insight.PodBlock{Pod: key, Why: why})
			}
		}
	}
	return nil
}

// drainOptionsOf reads the drain options Rancher drains the node with from
// its machine-plan Secret; nil when Rancher has not written them.
func drainOptionsOf(ctx context.Context, s *Scope, node string) (*provisioningv1.DrainOptions, error) {
	drains, err := s.Kept.DrainRequests(ctx, s.Client)
	if err != nil {
		return nil, err
	}
	sec := drains.ByNode()[node]
	if sec == nil {
		return nil, nil
	}
	raw := sec.GetAnnotations()[cluster.AnnotationRancherDrainOptions]
	if raw == "" {
		return nil, nil
	}
	var opts provisioningv1.DrainOptions
	if err := json.Unmarshal([]byte(raw), &opts); err != nil {
		// Not ours to judge: Rancher reads them.
		return nil, nil //nolint:nilerr
	}
	return &opts, nil
}

// v1Upgrades names Harvester's own upgrades that have not finished; none
// when Harvester's Upgrade kind is not installed.
func v1Upgrades(ctx context.Context, s *Scope) ([]string, error) {
	var list harvesterv1beta1.UpgradeList
	if err := s.APIReader.List(ctx, &list); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing Harvester's upgrades (upgrades.harvesterhci.io): %w", err)
	}
	var out []string
	for i := range list.Items {
		if u := &list.Items[i]; !u.Finished() {
			out = append(out, u.Namespace+"/"+u.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// provisioningPaused names the Cluster API cluster of the local cluster when
// it is paused (spec.paused or the paused annotation): Rancher's planner
// then rolls out nothing.
func provisioningPaused(ctx context.Context, s *Scope) (string, error) {
	c := &capiv1beta1.Cluster{}
	err := s.APIReader.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, c)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("reading Cluster API cluster %s/%s: %w", cluster.FleetLocalNamespace, cluster.LocalClusterName, err)
	}
	if _, annotated := c.Annotations[cluster.AnnotationCAPIPaused]; c.Spec.Paused || annotated {
		return "Cluster/" + cluster.FleetLocalNamespace + "/" + cluster.LocalClusterName, nil
	}
	return "", nil
}

// stall finds the node or step that overran its estimate, as the status
// view reckons it.
func stall(s *Scope, previous *v1beta1.UpgradePlan, now time.Time) *insight.Stall {
	v := status.FromPlan(s.Plan, previous, now)
	if v.Stalled == nil {
		return nil
	}
	out := &insight.Stall{What: v.Stalled.What, Object: v.Stalled.Object, Spent: v.Stalled.Spent.Duration, Typical: v.Stalled.Estimate.Duration,
		Began: now.Add(-v.Stalled.Spent.Duration).Truncate(time.Second)}
	if v.Waiting != nil {
		out.Waiting = v.Waiting.For
	}
	return out
}

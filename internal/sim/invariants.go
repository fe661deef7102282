package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// The rules the Checker enforces.
const (
	// RulePhaseOrder: a plan's phases follow the pipeline order, each
	// recorded in phaseTransitionTimestamps; Failed may follow any phase;
	// nothing follows Succeeded or Failed.
	RulePhaseOrder = "phase-order"
	// RuleNodeStateForward: a node's state never moves back a tier.
	RuleNodeStateForward = "node-state-forward"
	// RuleOneNodeDraining: at most one node is in PreDraining, PreDrained,
	// PostDraining or WaitingReboot.
	RuleOneNodeDraining = "one-node-draining"
	// RuleOneNodeCordoned: while a plan runs, at most one node is cordoned
	// (nodes cordoned before are not counted).
	RuleOneNodeCordoned = "one-node-cordoned"
	// RuleVMLeftStopped: a VM that ran before the plan and is stopped after it
	// is recorded in the plan's restore-vm ConfigMap, or as its owner's stop
	// in the plan's VM ledger.
	RuleVMLeftStopped = "vm-left-stopped"
	// RuleVMNotRestored: after a plan that Succeeded with spec.restoreVM,
	// every VM that ran before and was recorded runs again.
	RuleVMNotRestored = "vm-not-restored"
	// RuleVMOffAtSuccess: no VM that ran before a plan is off (halted, or
	// without a running instance) when the plan Succeeded, unless the plan's
	// VM ledger records that its owner stopped it, or the upgrade shut it
	// down as planned (it cannot live-migrate) without spec.restoreVM.
	RuleVMOffAtSuccess = "vm-off-at-success"
	// RuleLeftBehind: nothing labelled with the plan is left once it ended.
	RuleLeftBehind = "left-behind"
	// RuleJobStartedTwice: no Job of a plan is created again under the same
	// name, unless the one before failed (a retry runs it again).
	RuleJobStartedTwice = "job-started-twice"
	// RuleProvisionGeneration: the provisioning Cluster's provisionGeneration
	// is bumped at most once (Rancher rolls the nodes once).
	RuleProvisionGeneration = "provision-generation"
	// RuleSettingSavedOnce: each setting a plan records in
	// status.savedSettings is recorded once, never rewritten with another
	// value, and never recorded again once restored.
	RuleSettingSavedOnce = "setting-saved-once"
)

// Violation is a broken invariant.
type Violation struct {
	// Plan is the UpgradePlan concerned ("" for cluster-wide rules).
	Plan string
	// Rule is one of the Rule… constants.
	Rule string
	// Message says what happened.
	Message string
}

func (v Violation) String() string {
	if v.Plan == "" {
		return fmt.Sprintf("[%s] %s", v.Rule, v.Message)
	}
	return fmt.Sprintf("[%s] plan %s: %s", v.Rule, v.Plan, v.Message)
}

// pipelineOrder is the order of a successful upgrade's phases.
var pipelineOrder = []v1beta1.UpgradePlanPhase{
	v1beta1.PhaseInitializing, v1beta1.PhaseInitialized, v1beta1.PhaseISODownloading, v1beta1.PhaseISODownloaded,
	v1beta1.PhaseRepoCreating, v1beta1.PhaseRepoCreated, v1beta1.PhaseMetadataPopulating, v1beta1.PhaseMetadataPopulated,
	v1beta1.PhaseImagePreloading, v1beta1.PhaseImagePreloaded, v1beta1.PhaseClusterUpgrading, v1beta1.PhaseClusterUpgraded,
	v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded, v1beta1.PhaseCleaningUp, v1beta1.PhaseCleanedUp, v1beta1.PhaseSucceeded,
}

// drainingStates are the states of a node being drained or rebooted.
var drainingStates = []v1beta1.NodeUpgradeState{
	v1beta1.NodeStatePreDraining, v1beta1.NodeStatePreDrained, v1beta1.NodeStatePostDraining, v1beta1.NodeStateWaitingReboot,
}

// Checker watches UpgradePlans, Nodes and VirtualMachines during a run and
// records every violation of the upgrade's invariants. Feed it with Attach
// (informers) or the Observe methods; call CheckFinished once a plan ended.
// It is safe for concurrent use.
type Checker struct {
	mu         sync.Mutex
	plans      map[string]*planTrack
	cordoned   map[string]bool // by the upgrade
	preCordon  map[string]bool // cordoned before anything ran
	ranBefore  map[string]bool // VMs running when first seen
	violations []Violation
	seen       map[Violation]bool
	jobs       map[string]jobTrack // by namespace/name
	// generations are the provisionGeneration values seen, in order.
	generations []int64
	// held are the upgrade's pods being deleted that the log capture
	// holds, by namespace/name; a hold may last holdAllowance from the
	// manager's latest start (RulePodHeld).
	held          map[string]heldPod
	managerStart  time.Time
	holdAllowance time.Duration
	// longestHold is, by plan, the longest a pod of it was held past the
	// start of its hold's count.
	longestHold map[string]time.Duration
	// checked counts the states checked.
	checked int
}

type planTrack struct {
	phase  v1beta1.UpgradePlanPhase
	phases []v1beta1.UpgradePlanPhase
	states map[string]v1beta1.NodeUpgradeState
	// saved is each recorded setting's value as JSON; restored, the
	// settings whose record was cleared.
	saved    map[string]string
	restored map[string]bool
}

// jobTrack is the last Job seen under a name.
type jobTrack struct {
	uid    string
	failed bool
}

// NewChecker returns a Checker that has seen nothing yet.
func NewChecker() *Checker {
	return &Checker{
		plans: map[string]*planTrack{}, cordoned: map[string]bool{}, preCordon: map[string]bool{},
		ranBefore: map[string]bool{}, seen: map[Violation]bool{}, jobs: map[string]jobTrack{}, held: map[string]heldPod{},
		longestHold: map[string]time.Duration{},
	}
}

// Attach feeds the Checker from informers of UpgradePlans, Nodes and
// VirtualMachines (e.g. Sim.Informers()).
func (c *Checker) Attach(ctx context.Context, informers cache.Informers) error {
	observe := func(obj any) {
		switch o := obj.(type) {
		case *v1beta1.UpgradePlan:
			c.ObservePlan(o)
		case *corev1.Node:
			c.ObserveNode(o)
		case *kubevirtv1.VirtualMachine:
			c.ObserveVM(o)
		case *batchv1.Job:
			c.ObserveJob(o)
		case *provisioningv1.Cluster:
			c.ObserveProvisioningCluster(o)
		case *corev1.Pod:
			c.ObservePod(o)
			c.observePodImages(o)
		}
	}
	for _, obj := range []client.Object{&v1beta1.UpgradePlan{}, &corev1.Node{}, &kubevirtv1.VirtualMachine{}, &batchv1.Job{}, &provisioningv1.Cluster{}, &corev1.Pod{}} {
		inf, err := informers.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("sim: checker: %w", err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    observe,
			UpdateFunc: func(_, obj any) { observe(obj) },
			DeleteFunc: c.podGone,
		}); err != nil {
			return fmt.Errorf("sim: checker: %w", err)
		}
	}
	return nil
}

// Checked returns how many states of plans, nodes, VMs, Jobs and the
// provisioning Cluster the Checker has checked.
func (c *Checker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked
}

// Violations returns what the Checker found so far.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations)
}

func (c *Checker) report(v Violation) {
	if c.seen[v] {
		return
	}
	c.seen[v] = true
	c.violations = append(c.violations, v)
}

func phaseRank(p v1beta1.UpgradePlanPhase) int { return slices.Index(pipelineOrder, p) }

// ObservePlan checks one state of a plan against the states seen before.
func (c *Checker) ObservePlan(p *v1beta1.UpgradePlan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	t := c.plans[p.Name]
	if t == nil {
		t = &planTrack{states: map[string]v1beta1.NodeUpgradeState{}, saved: map[string]string{}, restored: map[string]bool{}}
		c.plans[p.Name] = t
	}
	bad := func(rule, format string, args ...any) {
		c.report(Violation{Plan: p.Name, Rule: rule, Message: fmt.Sprintf(format, args...)})
	}

	cur := p.Status.CurrentPhase
	var retried *v1beta1.Failure
	if f := p.LastFailure(); f != nil && f.RetriedAt != nil {
		retried = f
	}
	if cur != t.phase && t.phase != "" && !phaseMayFollow(t.phase, cur, retried) {
		bad(RulePhaseOrder, "phase moved from %s to %s", t.phase, cur)
	}
	if cur != "" {
		t.phase = cur
	}
	var phases []v1beta1.UpgradePlanPhase
	for _, ts := range p.Status.PhaseTransitionTimestamps {
		phases = append(phases, ts.Phase)
	}
	if len(phases) < len(t.phases) || !slices.Equal(phases[:len(t.phases)], t.phases) {
		bad(RulePhaseOrder, "phaseTransitionTimestamps was rewritten: %s became %s", joinPhases(t.phases), joinPhases(phases))
	}
	if msg := phaseSequenceError(phases, p.Status.Failures); msg != "" {
		bad(RulePhaseOrder, "%s", msg)
	}
	if cur != "" && len(phases) > 0 && phases[len(phases)-1] != cur {
		bad(RulePhaseOrder, "currentPhase %s is not the last phase recorded in phaseTransitionTimestamps (%s)", cur, phases[len(phases)-1])
	}
	t.phases = phases
	c.checkSaved(p, t, bad)

	var draining []string
	for node, st := range p.Status.NodeUpgradeStatuses {
		if prev, ok := t.states[node]; ok && !v1beta1.CanMoveNodeState(prev, st.State) && !retriedNode(retried, node, prev, st.State) {
			bad(RuleNodeStateForward, "node %s moved from %s to %s", node, prev, st.State)
		}
		t.states[node] = st.State
		if slices.Contains(drainingStates, st.State) {
			draining = append(draining, node+"="+string(st.State))
		}
	}
	if len(draining) > 1 {
		sort.Strings(draining)
		bad(RuleOneNodeDraining, "%d nodes are draining or rebooting at once: %s", len(draining), strings.Join(draining, ", "))
	}
}

// phaseMayFollow reports whether a plan in phase prev may next be seen in
// phase next: forward in pipeline order (several steps in one write are
// allowed here; phaseTransitionTimestamps must still list each), or Failed
// or Aborted from any phase that is not terminal.
func phaseMayFollow(prev, next v1beta1.UpgradePlanPhase, retried *v1beta1.Failure) bool {
	switch {
	case prev == v1beta1.PhaseFailed && retried != nil:
		// A retry goes back to the phase that failed.
		return next == retried.Phase || phaseMayFollow(retried.Phase, next, nil)
	case prev.IsTerminal():
		return false
	case next == v1beta1.PhaseFailed || next == v1beta1.PhaseAborted:
		return true
	case next == v1beta1.PhasePreviewed:
		return prev == ""
	}
	return phaseRank(next) > phaseRank(prev) && phaseRank(prev) >= 0
}

// phaseSequenceError describes what is wrong with a recorded phase sequence,
// "" when nothing: it starts with Initializing and each phase is the next in
// pipeline order, or Failed after a phase that is not terminal, or, after
// the n-th Failed, the phase the n-th failure was retried in.
func phaseSequenceError(phases []v1beta1.UpgradePlanPhase, failures []v1beta1.Failure) string {
	failed := 0
	for i, p := range phases {
		if i > 0 && phases[i-1] == v1beta1.PhaseFailed {
			failed++
			if f := failed - 1; f < len(failures) && failures[f].RetriedAt != nil && failures[f].Phase == p {
				continue
			}
		}
		if i == 0 {
			if p == v1beta1.PhasePreviewed && len(phases) == 1 {
				return ""
			}
			if p != v1beta1.PhaseInitializing {
				return fmt.Sprintf("the first recorded phase is %s, not %s", p, v1beta1.PhaseInitializing)
			}
			continue
		}
		prev := phases[i-1]
		ok := !prev.IsTerminal() && (p == v1beta1.PhaseFailed || p == v1beta1.PhaseAborted || (phaseRank(prev) >= 0 && phaseRank(p) == phaseRank(prev)+1))
		if !ok {
			return fmt.Sprintf("recorded phases go from %s to %s: %s", prev, p, joinPhases(phases))
		}
	}
	return ""
}

// checkSaved checks that each recorded setting is recorded once and never
// again once restored.
func (c *Checker) checkSaved(p *v1beta1.UpgradePlan, t *planTrack, bad func(rule, format string, args ...any)) {
	now := map[string]string{}
	if ss := p.Status.SavedSettings; ss != nil {
		for name, v := range map[string]any{
			"longhornReplicaReplenishmentWaitInterval": ss.LonghornReplicaReplenishmentWaitInterval,
			"deschedulerEnabled":                       ss.DeschedulerEnabled, "kubeVirt": ss.KubeVirt, "rancher": ss.Rancher,
		} {
			if b, _ := json.Marshal(v); string(b) != "null" {
				now[name] = string(b)
			}
		}
	}
	for name, v := range now {
		switch old, had := t.saved[name]; {
		case t.restored[name]:
			bad(RuleSettingSavedOnce, "setting %s was recorded again after it was restored: %s", name, v)
		case had && old != v:
			bad(RuleSettingSavedOnce, "the record of setting %s was rewritten: %s became %s", name, old, v)
		}
		t.saved[name] = v
	}
	for name := range t.saved {
		if _, ok := now[name]; !ok {
			t.restored[name] = true
			delete(t.saved, name)
		}
	}
}

// ObserveJob checks that a plan's Job is not created again under the same
// name unless the one before it failed.
func (c *Checker) ObserveJob(j *batchv1.Job) {
	plan := j.Labels[v1beta1.LabelUpgradePlan]
	if plan == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	key := j.Namespace + "/" + j.Name
	failed := slices.ContainsFunc(j.Status.Conditions, func(cond batchv1.JobCondition) bool {
		return cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue
	})
	if prev, ok := c.jobs[key]; ok && prev.uid != string(j.UID) && !prev.failed {
		c.report(Violation{Plan: plan, Rule: RuleJobStartedTwice, Message: fmt.Sprintf("Job %s was created again although the one before had not failed", key)})
	}
	c.jobs[key] = jobTrack{uid: string(j.UID), failed: failed}
}

// ObserveProvisioningCluster checks that the provisionGeneration of the
// cluster is bumped at most once.
func (c *Checker) ObserveProvisioningCluster(cl *provisioningv1.Cluster) {
	if cl.Spec.RKEConfig == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	g := cl.Spec.RKEConfig.ProvisionGeneration
	if n := len(c.generations); n > 0 && c.generations[n-1] == g {
		return
	}
	c.generations = append(c.generations, g)
	if len(c.generations) > 2 {
		c.report(Violation{Rule: RuleProvisionGeneration, Message: fmt.Sprintf("provisionGeneration of the provisioning Cluster went %v: bumped more than once", c.generations)})
	}
}

// retriedNode reports whether a retry moved the node back from state prev,
// and the node went on from there to cur.
func retriedNode(retried *v1beta1.Failure, node string, prev, cur v1beta1.NodeUpgradeState) bool {
	if retried == nil {
		return false
	}
	for _, n := range retried.Nodes {
		if n.Node == node && n.From == prev && v1beta1.CanMoveNodeState(n.To, cur) {
			return true
		}
	}
	return false
}

func joinPhases(ps []v1beta1.UpgradePlanPhase) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// planRunning reports whether some plan has started and not ended.
func (c *Checker) planRunning() bool {
	for _, t := range c.plans {
		if t.phase != "" && !t.phase.IsTerminal() {
			return true
		}
	}
	return false
}

// ObserveNode checks that the upgrade cordons at most one node at a time. A
// node first seen cordoned while no plan runs, or cordoned by Sim.Cordon,
// was cordoned by someone else.
func (c *Checker) ObserveNode(n *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	_, known := c.cordoned[n.Name]
	if _, other := n.Annotations[annotationCordonedByOther]; other || (!known && n.Spec.Unschedulable && !c.planRunning()) {
		c.preCordon[n.Name] = true
	}
	if !n.Spec.Unschedulable {
		delete(c.preCordon, n.Name)
	}
	c.cordoned[n.Name] = n.Spec.Unschedulable && !c.preCordon[n.Name]
	if !c.planRunning() {
		return
	}
	var cordoned []string
	for name, on := range c.cordoned {
		if on {
			cordoned = append(cordoned, name)
		}
	}
	if len(cordoned) > 1 {
		sort.Strings(cordoned)
		c.report(Violation{Rule: RuleOneNodeCordoned, Message: fmt.Sprintf("%d nodes are cordoned at once: %s", len(cordoned), strings.Join(cordoned, ", "))})
	}
}

// ObserveVM records whether a VM ran when the Checker first saw it.
func (c *Checker) ObserveVM(vm *kubevirtv1.VirtualMachine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	key := vmKey(vm.Namespace, vm.Name)
	if _, ok := c.ranBefore[key]; !ok {
		want := wantsRunning(vm)
		c.ranBefore[key] = want != nil && *want
	}
}

// CheckFinished checks a plan that ended (or was deleted): no VM that ran
// before is left stopped unless recorded in the plan's restore-vm ConfigMap
// or as its owner's stop in its VM ledger (and, after a Succeeded plan with
// spec.restoreVM, none recorded for restore is; after a Succeeded plan, no
// VM is off but as recorded: RuleVMOffAtSuccess),
// and nothing labelled with the plan is left. It returns the new violations,
// which Violations also lists from then on.
func (c *Checker) CheckFinished(ctx context.Context, r client.Reader, plan string) ([]Violation, error) {
	var found []Violation
	recorded := map[string]bool{}
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.RestoreVMConfigMap(plan)}, cm); client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	for _, vms := range cm.Data {
		for _, key := range strings.Split(vms, ",") {
			recorded[strings.TrimSpace(key)] = true
		}
	}
	p := &v1beta1.UpgradePlan{}
	if err := r.Get(ctx, client.ObjectKey{Name: plan}, p); client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	restored := p.Status.CurrentPhase == v1beta1.PhaseSucceeded && p.RestoreVMEnabled()
	records, err := ledgerRecords(ctx, r, plan)
	if err != nil {
		return nil, err
	}
	var vms kubevirtv1.VirtualMachineList
	if err := r.List(ctx, &vms); err != nil {
		return nil, err
	}
	c.mu.Lock()
	for i := range vms.Items {
		vm := &vms.Items[i]
		key := vmKey(vm.Namespace, vm.Name)
		want := wantsRunning(vm)
		if c.ranBefore[key] && want != nil && !*want && !recorded[key] && !ownerStopped(records[key]) {
			found = append(found, Violation{Plan: plan, Rule: RuleVMLeftStopped, Message: fmt.Sprintf("VM %s ran before the upgrade and is stopped, but %s/%s does not record it", key, cluster.HarvesterNamespace, names.RestoreVMConfigMap(plan))})
		}
		if c.ranBefore[key] && want != nil && !*want && recorded[key] && restored {
			found = append(found, Violation{Plan: plan, Rule: RuleVMNotRestored, Message: fmt.Sprintf("VM %s ran before the upgrade, was recorded for restore and is still stopped after the plan Succeeded with spec.restoreVM", key)})
		}
	}
	c.mu.Unlock()
	if p.Status.CurrentPhase == v1beta1.PhaseSucceeded {
		off, err := c.offAtSuccess(ctx, r, p, records)
		if err != nil {
			return nil, err
		}
		found = append(found, off...)
	}

	left, err := labelledWith(ctx, r, plan)
	if err != nil {
		return nil, err
	}
	for _, l := range left {
		found = append(found, Violation{Plan: plan, Rule: RuleLeftBehind, Message: l + " is left behind"})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkHolds(plan, time.Now())
	var fresh []Violation
	for _, v := range found {
		if !c.seen[v] {
			c.report(v)
			fresh = append(fresh, v)
		}
	}
	return fresh, nil
}

// offAtSuccess checks RuleVMOffAtSuccess for a plan that Succeeded: it
// reads the VMs' instances itself and takes from the plan's ledger only
// what it recorded.
func (c *Checker) offAtSuccess(ctx context.Context, r client.Reader, p *v1beta1.UpgradePlan, records map[string]*vmledger.Record) ([]Violation, error) {
	var vms kubevirtv1.VirtualMachineList
	if err := r.List(ctx, &vms); err != nil {
		return nil, err
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := r.List(ctx, &vmis); err != nil {
		return nil, err
	}
	running := map[string]bool{} // an instance that has not ended, nor is being deleted
	for _, vmi := range vmis.Items {
		running[vmKey(vmi.Namespace, vmi.Name)] = vmi.DeletionTimestamp == nil &&
			vmi.Status.Phase != cluster.VMIPhaseSucceeded && vmi.Status.Phase != cluster.VMIPhaseFailed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var found []Violation
	for i := range vms.Items {
		vm := &vms.Items[i]
		key := vmKey(vm.Namespace, vm.Name)
		want := wantsRunning(vm)
		if !c.ranBefore[key] || (running[key] && (want == nil || *want)) {
			continue
		}
		rec := records[key]
		if rec != nil && (ownerStopped(rec) || rec.Leave == vmledger.LeaveStop && !p.RestoreVMEnabled()) {
			continue
		}
		found = append(found, Violation{Plan: p.Name, Rule: RuleVMOffAtSuccess, Message: fmt.Sprintf("VM %s ran before the upgrade and is off at its Succeeded end, but the VM ledger %s does not record its owner's stop", key, vmledger.Key(p.Name))})
	}
	return found, nil
}

// ledgerRecords reads the records of the plan's VM ledger, by VM; empty
// when it has none.
func ledgerRecords(ctx context.Context, r client.Reader, plan string) (map[string]*vmledger.Record, error) {
	l, _, err := vmledger.Read(ctx, r, plan)
	records := map[string]*vmledger.Record{}
	if err != nil || l == nil {
		return records, err
	}
	for i := range l.Records {
		records[l.Records[i].VM] = &l.Records[i]
	}
	return records, nil
}

// ownerStopped reports whether the last stop the ledger records of a VM is
// its owner's.
func ownerStopped(r *vmledger.Record) bool {
	if r == nil {
		return false
	}
	for i := len(r.Events) - 1; i >= 0; i-- {
		switch e := r.Events[i]; e.Kind {
		case vmledger.StoppedEvent, vmledger.Deleted:
			return e.Cause == vmledger.CauseOwner
		case vmledger.Ended, vmledger.Started:
			return false
		}
	}
	return false
}

// labelledWith lists the objects of the kinds a plan creates that carry its
// upgrade-plan label, as "Kind namespace/name".
func labelledWith(ctx context.Context, r client.Reader, plan string) ([]string, error) {
	kinds := []struct {
		kind string
		list client.ObjectList
	}{
		{"VirtualMachineImage", &harvesterv1beta1.VirtualMachineImageList{}},
		{"Deployment", &appsv1.DeploymentList{}},
		{"Service", &corev1.ServiceList{}},
		{"Plan", &upgradev1.PlanList{}},
		{"Job", &batchv1.JobList{}},
		{"ConfigMap", &corev1.ConfigMapList{}},
		{"Pod", &corev1.PodList{}},
	}
	var out []string
	for _, k := range kinds {
		if err := r.List(ctx, k.list, client.MatchingLabels{v1beta1.LabelUpgradePlan: plan}); err != nil {
			return nil, fmt.Errorf("listing %ss labelled %s=%s: %w", k.kind, v1beta1.LabelUpgradePlan, plan, err)
		}
		items, err := metaItems(k.list)
		if err != nil {
			return nil, err
		}
		for _, o := range items {
			desc := fmt.Sprintf("%s %s", k.kind, client.ObjectKeyFromObject(o))
			if o.GetDeletionTimestamp() != nil {
				desc += fmt.Sprintf(" (deleting, finalizers %v)", o.GetFinalizers())
			}
			out = append(out, desc)
		}
	}
	return out, nil
}

func metaItems(list client.ObjectList) ([]client.Object, error) {
	objs, err := apimeta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]client.Object, 0, len(objs))
	for _, o := range objs {
		if co, ok := o.(client.Object); ok {
			out = append(out, co)
		}
	}
	return out, nil
}

package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// LedgerControllerName names the controller that keeps the plans' VM
// ledgers; its events come from "vm-ledger-controller".
const LedgerControllerName = "vm-ledger"

// The ledger's keeper reads the VMs, their instances and migrations from the
// cache, the VM whole from the API server to say who changed it (its
// managedFields), writes the ledger, and acts on the operator's choices: it
// stops a VM with consent (recorded in the restore list first) and deletes
// a VM's migrations to try again.
//
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=delete
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=configmaps,verbs=create;update

// LedgerReconciler keeps the VM ledger of the plan that runs: it records
// what happens to each VM the plan found at its start (internal/vmledger),
// and carries out the operator's choice for a VM whose live migration off a
// draining node fails: try again (annotation retry-migration), or shut it
// down now and start it after the node's upgrade (shutdown-for-upgrade). It
// writes the ledger only, never the plan: the plan reconciler reads the
// ledger, counts and judges from it.
type LedgerReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  record.EventRecorder
	Clock     clock.PassiveClock
	Config    *phase.Config
	Power     helper.VMPower
	// Ledgers reads the ledgers, parsed once per version of each ConfigMap.
	Ledgers *vmledger.Cache
}

// SetupLedger registers the ledger's keeper with a manager; ledgers is the
// cache it shares with the plan reconciler, so that each version of a
// ledger's ConfigMap is parsed once.
func SetupLedger(mgr ctrl.Manager, cfg *phase.Config, clk clock.PassiveClock, ledgers *vmledger.Cache) error {
	r := &LedgerReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clk, Config: cfg,
		Recorder: mgr.GetEventRecorderFor(LedgerControllerName + "-controller"),
		Power:    helper.RunStrategyPower{Client: mgr.GetClient()},
		Ledgers:  ledgers,
	}
	toPlans := handler.EnqueueRequestsFromMapFunc(r.observingPlans)
	return ctrl.NewControllerManagedBy(mgr).
		Named(LedgerControllerName).
		For(&v1beta1.UpgradePlan{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: drainOrPhaseChanged})).
		Watches(&kubevirtv1.VirtualMachine{}, toPlans).
		Watches(&kubevirtv1.VirtualMachineInstance{}, toPlans).
		Watches(&kubevirtv1.VirtualMachineInstanceMigration{}, toPlans).
		// A new ledger: the first look at the VMs it records.
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(planOfOwner),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc: func(e event.CreateEvent) bool { return isLedger(e.Object) },
				UpdateFunc: func(event.UpdateEvent) bool { return false },
				DeleteFunc: func(event.DeleteEvent) bool { return false },
			})).
		Complete(r)
}

// isLedger reports whether a ConfigMap is the VM ledger of its plan.
func isLedger(obj client.Object) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.Kind == "UpgradePlan" && names.VMLedger(o.Name) == obj.GetName() {
			return true
		}
	}
	return false
}

// drainOrPhaseChanged keeps the plan updates the ledger's keeper acts on: a
// phase change, and a node entering or leaving its drain (where the
// operator's choices apply).
func drainOrPhaseChanged(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*v1beta1.UpgradePlan)
	n, okN := e.ObjectNew.(*v1beta1.UpgradePlan)
	if !okO || !okN || o.Status.CurrentPhase != n.Status.CurrentPhase || len(o.Status.NodeUpgradeStatuses) != len(n.Status.NodeUpgradeStatuses) {
		return true
	}
	for node, st := range n.Status.NodeUpgradeStatuses {
		if draining(st.State) != draining(o.Status.NodeUpgradeStatuses[node].State) {
			return true
		}
	}
	return false
}

// draining reports whether a node in this state waits for its VMs to leave
// (or failed to): the operator's choices for its VMs apply.
func draining(s v1beta1.NodeUpgradeState) bool {
	return s == v1beta1.NodeStatePreDraining || s == v1beta1.NodeStatePreDrainFailed
}

// observing reports whether the plan's ledger is kept now: from its start
// until it ends, and while it waits for a retry.
func observing(p *v1beta1.UpgradePlan) bool {
	return p.IsStarted() && p.DeletionTimestamp.IsZero() && !p.IsDryRun() && (!p.IsFinished() || p.AwaitsRetry())
}

// observingPlans maps a VM, instance or migration to the plans whose
// ledger is kept.
func (r *LedgerReconciler) observingPlans(ctx context.Context, _ client.Object) []reconcile.Request {
	return plansWhere(ctx, r.Client, observing)
}

// vmCluster is what one pass of the keeper sees of the VMs.
type vmCluster struct {
	vms  map[string]*kubevirtv1.VirtualMachine
	vmis map[string]*kubevirtv1.VirtualMachineInstance
	migs map[string][]vmledger.MigrationFacts
	raw  map[string][]*kubevirtv1.VirtualMachineInstanceMigration
}

// readVMs reads the VMs, instances and migrations from the cache, by
// namespace/name (of the VM, for migrations). Not copied: a pass runs on
// every change of any VM, instance or migration, and reads them only.
func (r *LedgerReconciler) readVMs(ctx context.Context) (*vmCluster, error) {
	var vms kubevirtv1.VirtualMachineList
	if err := r.Client.List(ctx, &vms, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing VMs: %w", err)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := r.Client.List(ctx, &vmis, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing VM instances: %w", err)
	}
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := r.Client.List(ctx, &migs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing VM migrations: %w", err)
	}
	c := &vmCluster{vms: map[string]*kubevirtv1.VirtualMachine{}, vmis: map[string]*kubevirtv1.VirtualMachineInstance{},
		migs: map[string][]vmledger.MigrationFacts{}, raw: map[string][]*kubevirtv1.VirtualMachineInstanceMigration{}}
	for i := range vms.Items {
		c.vms[key(&vms.Items[i])] = &vms.Items[i]
	}
	for i := range vmis.Items {
		c.vmis[key(&vmis.Items[i])] = &vmis.Items[i]
	}
	for i := range migs.Items {
		m := &migs.Items[i]
		k := types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName}.String()
		c.migs[k] = append(c.migs[k], migrationFacts(m))
		c.raw[k] = append(c.raw[k], m)
	}
	return c, nil
}

func key(o client.Object) string { return client.ObjectKeyFromObject(o).String() }

// facts are what the cluster shows of one VM, for plan.
func (c *vmCluster) facts(vm, plan string) vmledger.Facts {
	var f vmledger.Facts
	if v := c.vms[vm]; v != nil {
		f.VM = &vmledger.VMFacts{
			RunStrategy:   cluster.RunStrategy(v),
			ByUpgrade:     v.Annotations[v1beta1.AnnotationRestoreRunStrategy] != "",
			Consent:       v.Annotations[v1beta1.AnnotationShutdownForUpgrade] == plan,
			StopRequested: cluster.StopRequested(v),
		}
	}
	if vmi := c.vmis[vm]; vmi != nil {
		f.VMI = &vmledger.VMIFacts{Instance: vmledger.InstanceName(vmi), Node: vmi.Status.NodeName, Phase: vmi.Status.Phase, Final: vmledger.Final(vmi)}
	}
	f.Migrations = c.migs[vm]
	return f
}

func migrationFacts(m *kubevirtv1.VirtualMachineInstanceMigration) vmledger.MigrationFacts {
	f := vmledger.MigrationFacts{Name: m.Name, Phase: m.Status.Phase, Created: m.CreationTimestamp.Time}
	if st := m.Status.MigrationState; st != nil {
		f.Source, f.Target, f.Reason = st.SourceNode, st.TargetNode, st.FailureReason
		if st.StartTimestamp != nil {
			f.Started = st.StartTimestamp.Time
		}
		if st.EndTimestamp != nil {
			f.Ended = st.EndTimestamp.Time
		}
	}
	return f
}

// Reconcile brings the plan's ledger up to date with what the cluster shows,
// after carrying out the operator's choices, and writes it when it changed.
func (r *LedgerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	plan := &v1beta1.UpgradePlan{}
	if err := r.Client.Get(ctx, req.NamespacedName, plan); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !observing(plan) {
		return ctrl.Result{}, nil
	}
	l, cms, err := r.Ledgers.ReadShards(ctx, r.Client, plan.Name)
	if err != nil || l == nil {
		return ctrl.Result{}, err
	}
	vc, err := r.readVMs(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	var added []recorded
	var next time.Time
	// The ledger read is shared: the records that change are copies.
	changed := map[int]vmledger.Record{}
	for i := range l.Records {
		rec := &l.Records[i]
		retried, err := r.choose(ctx, plan, rec, vc, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		evs, at := vmledger.Observe(rec, vc.facts(rec.VM, plan.Name), now, r.Config.Deadlines.MigrationProgress)
		if retried != nil {
			evs = append([]vmledger.Event{*retried}, evs...)
		}
		if !at.IsZero() && (next.IsZero() || at.Before(next)) {
			next = at
		}
		if len(evs) == 0 {
			continue
		}
		if err := r.who(ctx, rec.VM, evs); err != nil {
			return ctrl.Result{}, err
		}
		c := *rec
		c.Events = slices.Clone(rec.Events)
		c.Add(evs...)
		changed[i] = c
		for _, e := range evs {
			added = append(added, recorded{vm: rec.VM, shard: vmledger.ShardOf(i), Event: e})
		}
	}
	res := ctrl.Result{}
	if !next.IsZero() {
		res.RequeueAfter = max(next.Sub(now), time.Second)
	}
	if len(added) == 0 {
		return res, nil
	}
	written, err := r.write(ctx, plan.Name, l, cms, changed)
	for _, e := range added {
		if written[e.shard] {
			r.tell(plan, e)
		}
	}
	if apierrors.IsConflict(err) {
		// A ConfigMap changed since it was read: the next pass observes
		// its VMs again.
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

// write writes the ConfigMaps of the ledger whose records changed, and only
// those: each holds vmledger.ShardSize VMs, so that a change costs the same
// whatever the cluster's size. written are the ConfigMaps it wrote.
func (r *LedgerReconciler) write(ctx context.Context, plan string, l *vmledger.Ledger, cms []*corev1.ConfigMap, changed map[int]vmledger.Record) (written map[int]bool, err error) {
	next := &vmledger.Ledger{Started: l.Started, Records: slices.Clone(l.Records)}
	shards := map[int]bool{}
	for i, rec := range changed {
		next.Records[i] = rec
		shards[vmledger.ShardOf(i)] = true
	}
	written = map[int]bool{}
	for _, i := range slices.Sorted(maps.Keys(shards)) {
		cm := cms[i].DeepCopy()
		if cm.Data, cm.BinaryData, err = vmledger.EncodeShard(next, i); err != nil {
			return written, err
		}
		if err := r.Client.Update(ctx, cm); err != nil {
			return written, fmt.Errorf("writing the VM ledger %s: %w", vmledger.ShardKey(plan, i), err)
		}
		written[i] = true
	}
	return written, nil
}

// recorded is an event recorded of a VM.
type recorded struct {
	vm    string
	shard int
	vmledger.Event
}

// choose carries out the operator's choice for a VM on a draining node, if
// any: with consent (shutdown-for-upgrade naming the plan) it records the VM
// in the plan's restore list, then stops it, which the ledger records as it
// sees it; with a new retry-migration value, while the VM's migration is in
// trouble, it deletes the VM's unfinished and failed migrations, so that
// KubeVirt tries again at once, and returns the retry to record.
func (r *LedgerReconciler) choose(ctx context.Context, plan *v1beta1.UpgradePlan, rec *vmledger.Record, vc *vmCluster, now time.Time) (*vmledger.Event, error) {
	vm := vc.vms[rec.VM]
	state := rec.Now()
	if vm == nil || !state.Running || !draining(plan.Status.NodeUpgradeStatuses[state.Node].State) {
		return nil, nil
	}
	ns, name, _ := strings.Cut(rec.VM, "/")
	vmKey := types.NamespacedName{Namespace: ns, Name: name}
	if vm.Annotations[v1beta1.AnnotationShutdownForUpgrade] == plan.Name && cluster.RunStrategy(vm) != cluster.RunStrategyHalted {
		if _, err := helper.RecordVMs(ctx, r.Client, plan, state.Node, []types.NamespacedName{vmKey}); err != nil {
			return nil, err
		}
		return nil, r.Power.Stop(ctx, vmKey)
	}
	value := vm.Annotations[v1beta1.AnnotationRetryMigration]
	if !rec.Retry(value) {
		return nil, nil
	}
	deleted := 0
	for _, m := range vc.raw[rec.VM] {
		if m.Status.Phase == cluster.MigrationPhaseSucceeded || m.DeletionTimestamp != nil {
			continue
		}
		if err := r.Client.Delete(ctx, m.DeepCopy()); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("deleting migration %s/%s to try VM %s's migration again: %w", m.Namespace, m.Name, rec.VM, err)
		}
		deleted++
	}
	return &vmledger.Event{At: now, Kind: vmledger.MigrationRetried, Node: state.Node, Value: value,
		Why: fmt.Sprintf("deleted %d failed or unfinished migration(s)", deleted)}, nil
}

// who adds to the events people made who made them, as the VM's
// managedFields say: read from the API server, since the cache drops them.
func (r *LedgerReconciler) who(ctx context.Context, vm string, evs []vmledger.Event) error {
	var full *kubevirtv1.VirtualMachine
	for i := range evs {
		e := &evs[i]
		if !byPerson(e) {
			continue
		}
		if full == nil {
			ns, name, _ := strings.Cut(vm, "/")
			full = &kubevirtv1.VirtualMachine{}
			if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, full); err != nil {
				if apierrors.IsNotFound(err) {
					return nil
				}
				return fmt.Errorf("reading VM %s to say who changed it: %w", vm, err)
			}
		}
		for _, path := range changedFields(e, full) {
			if e.By = vmledger.Who(full.ManagedFields, path...); e.By != "" {
				break
			}
		}
	}
	return nil
}

// byPerson reports whether someone, not a controller, made the event.
func byPerson(e *vmledger.Event) bool {
	switch e.Kind {
	case vmledger.MigrationRetried:
		return true
	case vmledger.StoppedEvent:
		return e.Cause == vmledger.CauseConsent || e.Cause == vmledger.CauseOwner
	case vmledger.Started:
		return e.Cause == vmledger.CauseOwner
	}
	return false
}

// changedFields are the VM's fields whose last writer made the event, the
// likeliest first: the annotation of the operator's choice; for an owner's
// stop or start, the run strategy (Harvester's UI, kubectl) or the start and
// stop requests (virtctl, which keeps a RerunOnFailure VM's strategy).
func changedFields(e *vmledger.Event, vm *kubevirtv1.VirtualMachine) [][]string {
	runStrategy, requests := []string{"spec", "runStrategy"}, []string{"status", "stateChangeRequests"}
	switch {
	case e.Kind == vmledger.MigrationRetried:
		return [][]string{{"metadata", "annotations", v1beta1.AnnotationRetryMigration}}
	case e.Cause == vmledger.CauseConsent:
		return [][]string{{"metadata", "annotations", v1beta1.AnnotationShutdownForUpgrade}}
	case e.Kind == vmledger.StoppedEvent && cluster.RunStrategy(vm) != cluster.RunStrategyHalted:
		return [][]string{requests, runStrategy}
	}
	return [][]string{runStrategy, requests}
}

// tell records on the plan, once, what a person would want to know of an
// event: a migration's first trouble, a stop or start by someone else, an
// instance that ended on its own, the operator's choices carried out.
func (r *LedgerReconciler) tell(plan *v1beta1.UpgradePlan, e recorded) {
	switch {
	case (e.Kind == vmledger.MigrationFailed || e.Kind == vmledger.MigrationStalled) && e.Attempt == 1:
		what := "failed: " + e.Why
		if e.Kind == vmledger.MigrationStalled {
			what = fmt.Sprintf("has run %s without completing (%s)", e.Took.Round(time.Second), e.Why)
		}
		r.Recorder.Eventf(plan, corev1.EventTypeWarning, v1beta1.EventVMMigrationFailing,
			"Live migration %s of VM %s off node %s %s; KubeVirt tries again, the node shows each attempt", e.Migration, e.vm, e.Node, what)
	case e.Kind == vmledger.StoppedEvent && e.Cause == vmledger.CauseConsent:
		r.Recorder.Eventf(plan, corev1.EventTypeNormal, v1beta1.EventVMShutdownConsented,
			"Shut down VM %s on node %s with the operator's consent (%s); it is started again after the node's upgrade (ConfigMap %s/%s)",
			e.vm, e.Node, e.By, cluster.HarvesterNamespace, names.RestoreVMConfigMap(plan.Name))
	case e.Kind == vmledger.MigrationRetried:
		r.Recorder.Eventf(plan, corev1.EventTypeNormal, v1beta1.EventVMMigrationRetried,
			"Trying the live migration of VM %s off node %s again (%s=%s by %s): %s", e.vm, e.Node, v1beta1.AnnotationRetryMigration, e.Value, e.By, e.Why)
	case (e.Kind == vmledger.StoppedEvent || e.Kind == vmledger.Deleted) && e.Cause == vmledger.CauseOwner:
		r.Recorder.Eventf(plan, corev1.EventTypeNormal, v1beta1.EventVMStoppedByOwner,
			"VM %s was %s by someone other than the upgrade (%s) on node %s; the upgrade leaves it so", e.vm, e.Kind, orUnknown(e.By), e.Node)
	case e.Kind == vmledger.Ended:
		r.Recorder.Eventf(plan, corev1.EventTypeWarning, v1beta1.EventVMUnexpectedlyOff,
			"VM %s: %s on node %s, stopped by neither the upgrade nor its owner (was its virt-launcher pod deleted?); %s",
			e.vm, e.Why, e.Node, vmledger.Do(e.vm))
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "who, the cluster does not say"
	}
	return s
}

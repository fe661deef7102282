package sim

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
)

// KubeVirt's evacuation of a node tainted kubevirt.io/drain, and its live
// migrations: a migration goes Pending (and waits out KubeVirt's backoff
// after an evacuation of the same instance failed: 20 s, doubled after each
// further failure), Running once a target is chosen (the instance's and the
// migration's migrationState name source, target and start), then Succeeded
// (the instance moves) or Failed (failed and failureReason, and a
// FailedMigration warning on the migration); the evacuation controller makes
// a new one for an instance still on the node whose last one ended. KubeVirt
// keeps the last five finished migrations of an instance and deletes older
// ones. The world's faults make some VMs' migrations fail, never converge,
// or make someone force-drain or stop them while their node drains.

// Failure reasons as KubeVirt's virt-handler reports them.
const (
	// migrationFailedReason is what a migration that failed in libvirt
	// reports (the default of MigrationFault.Reason).
	migrationFailedReason = "Live migration failed error encountered during MigrateToURI3 libvirt api call: virError(Code=1, Domain=7, Message='internal error: qemu unexpectedly closed the monitor')"
	// migrationAbortedReason is what a migration aborted at its completion
	// timeout reports.
	migrationAbortedReason = "Live migration has been aborted"
	// migrationVMIGoneReason: the instance went away while it migrated.
	migrationVMIGoneReason = "Migration failed because vmi does not exist."
	// finishedMigrationsKept is how many finished migrations KubeVirt keeps
	// per instance.
	finishedMigrationsKept = 5
	// ownerFieldManager writes the owner's stop (OwnerStops): Harvester's
	// API server, which the UI's Stop asks to set spec.runStrategy Halted.
	ownerFieldManager = "harvester"
)

// vmWorld is what happens to the VMs that the world remembers: how many
// migrations of each VM ended (a fault counts its failures), and which
// VMs it force-drained or stopped as their owner (once each).
type vmWorld struct {
	mu    sync.Mutex
	tried map[string]int
	// ordinal numbers each migration that ended among its VM's: a pass
	// that ends a migration and fails to write it ends it again, and must
	// not count it twice.
	ordinal      map[types.UID]int
	forceDrained map[string]bool
	ownerStopped map[string]bool
}

// attempt counts migration as one more of vm, once, and returns its number.
func (w *vmWorld) attempt(vm string, migration types.UID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tried == nil {
		w.tried, w.ordinal = map[string]int{}, map[types.UID]int{}
	}
	if n, ok := w.ordinal[migration]; ok {
		return n
	}
	w.tried[vm]++
	w.ordinal[migration] = w.tried[vm]
	return w.tried[vm]
}

// done reports whether vm is marked in set.
func (w *vmWorld) done(set map[string]bool, vm string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return set[vm]
}

// mark marks vm in set once the world acted on it.
func (w *vmWorld) mark(set *map[string]bool, vm string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if *set == nil {
		*set = map[string]bool{}
	}
	(*set)[vm] = true
}

// StoppedByOwner reports whether the world stopped the VM (namespace/name)
// as its owner (FaultSet.OwnerStops).
func (s *Sim) StoppedByOwner(vm string) bool {
	s.vms.mu.Lock()
	defer s.vms.mu.Unlock()
	return s.vms.ownerStopped[vm]
}

func hasDrainTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == cluster.TaintKubeVirtDrain && t.Effect == corev1.TaintEffectNoSchedule
	})
}

func evictionMigrates(vmi *kubevirtv1.VirtualMachineInstance) bool {
	es := ptr.Deref(vmi.Spec.EvictionStrategy, "")
	return (es == evictionLiveMigrate || es == evictionLiveMigrateIfPossible) && kubeVirtCanMigrate(&vmi.Spec) &&
		kubevirtv1.ConditionStatus(vmi.Status.Conditions, "LiveMigratable") != "False"
}

func migrationFinished(m *kubevirtv1.VirtualMachineInstanceMigration) bool {
	return m.Status.Phase == migrationSucceeded || m.Status.Phase == migrationFailed
}

// reconcileEvacuation is KubeVirt's evacuation controller: on a node tainted
// kubevirt.io/drain it creates a migration for each instance that may and
// can move, at most two at a time. The world's owners and force-drains act
// on their VMs here first, as the node starts to drain.
func (s *Sim) reconcileEvacuation(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := &corev1.Node{}
	if err := s.c.Get(ctx, req.NamespacedName, node); err != nil || !hasDrainTaint(node) {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// Read from the API server, migrations first: a migration created or
	// finished a moment ago may not be in the cache yet, and an instance must
	// not get two. A migration seen finished moved its instance before.
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := s.reader.List(ctx, &migs); err != nil {
		return reconcile.Result{}, err
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := s.reader.List(ctx, &vmis, client.MatchingLabels{cluster.LabelVMINodeName: node.Name}); err != nil {
		return reconcile.Result{}, err
	}
	active := map[string]bool{}
	outbound := 0
	for i := range migs.Items {
		m := &migs.Items[i]
		if migrationFinished(m) {
			continue
		}
		active[m.Namespace+"/"+m.Spec.VMIName] = true
		if m.Annotations[annotationEvacuationMigration] == node.Name {
			outbound++
		}
	}
	for i := range vmis.Items {
		vmi := &vmis.Items[i]
		if acted, err := s.actOnDrain(ctx, vmi); err != nil || acted {
			return reconcile.Result{}, err
		}
	}
	for i := range vmis.Items {
		vmi := &vmis.Items[i]
		if outbound >= parallelOutboundMigrationsPerNode {
			break
		}
		if vmi.DeletionTimestamp != nil || !evictionMigrates(vmi) || active[vmi.Namespace+"/"+vmi.Name] ||
			vmi.Status.Phase != vmiPhaseRunning {
			continue
		}
		m := &kubevirtv1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: vmi.Namespace, GenerateName: evacuationPrefix,
				Annotations: map[string]string{annotationEvacuationMigration: node.Name},
				Labels:      map[string]string{labelMigrationVMIName: vmi.Name},
			},
			Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
		}
		if err := s.c.Create(ctx, m); err != nil {
			return reconcile.Result{}, err
		}
		outbound++
	}
	return reconcile.Result{}, nil
}

// actOnDrain plays the people who act on a VM as its node drains
// (FaultSet.ForcedDrain, OwnerStops), once each; it reports whether it did.
func (s *Sim) actOnDrain(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (bool, error) {
	key := vmKey(vmi.Namespace, vmi.Name)
	f := s.faults.snapshot()
	switch {
	case vmi.DeletionTimestamp != nil || vmi.Status.Phase != vmiPhaseRunning:
		return false, nil
	case slices.Contains(f.ForcedDrain, key) && !s.vms.done(s.vms.forceDrained, key):
		// kubectl drain --disable-eviction deletes the virt-launcher pod:
		// the pod's SIGTERM shuts the guest down and virt-handler reports
		// the instance Succeeded.
		s.log.Info("force-drained: the virt-launcher pod of the VM was deleted", "vm", key, "node", vmi.Status.NodeName)
		err := s.mutate(ctx, vmi, true, func() bool {
			vmi.Status.Phase = cluster.VMIPhaseSucceeded
			vmi.Status.Conditions = []kubevirtv1.Condition{{Type: "Ready", Status: "False", Reason: "PodTerminating", Message: "virt-launcher pod is terminating"}}
			return true
		})
		if err == nil {
			s.vms.mark(&s.vms.forceDrained, key)
		}
		return true, err
	case slices.Contains(f.OwnerStops, key) && !s.vms.done(s.vms.ownerStopped, key):
		s.log.Info("the VM's owner stops it", "vm", key, "node", vmi.Status.NodeName)
		vm := &kubevirtv1.VirtualMachine{}
		if err := s.reader.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: vmi.Name}, vm); err != nil {
			return true, client.IgnoreNotFound(err)
		}
		before := vm.DeepCopy()
		vm.Spec.Running, vm.Spec.RunStrategy = nil, ptr.To(runStrategyHalted)
		err := s.c.Patch(ctx, vm, client.MergeFrom(before), client.FieldOwner(ownerFieldManager))
		if err == nil {
			s.vms.mark(&s.vms.ownerStopped, key)
		}
		return true, err
	}
	return false, nil
}

// pendingMigrations maps a node change to the migrations still waiting, so
// that a migration with no target yet retries when a node frees up.
func (s *Sim) pendingMigrations(ctx context.Context, _ client.Object) []reconcile.Request {
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := s.c.List(ctx, &migs); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range migs.Items {
		if !migrationFinished(&migs.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&migs.Items[i])})
		}
	}
	return reqs
}

// reconcileMigration runs a migration: Pending until KubeVirt's backoff is
// over and a target exists, Running for Timing.Migration, then Succeeded,
// unless a fault fails it or keeps it running.
func (s *Sim) reconcileMigration(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	m := &kubevirtv1.VirtualMachineInstanceMigration{}
	if err := s.c.Get(ctx, req.NamespacedName, m); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if migrationFinished(m) {
		return reconcile.Result{}, s.collectMigrations(ctx, m.Namespace, m.Spec.VMIName)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.reader.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName}, vmi); err != nil || vmi.DeletionTimestamp != nil {
		if client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, s.endMigration(ctx, m, nil, migrationVMIGoneReason)
	}
	switch m.Status.Phase {
	case "":
		setMigrationPhase(m, migrationPending)
		return reconcile.Result{}, s.c.Status().Update(ctx, m)
	case migrationPending:
		return s.startMigration(ctx, m, vmi)
	}
	key := vmKey(vmi.Namespace, vmi.Name)
	fault := s.faults.migration(key)
	step := "migration/" + string(m.UID)
	if fault != nil && fault.NeverConverges {
		// It copies memory the guest dirties faster than it is sent:
		// KubeVirt aborts it at its completion timeout.
		if wait := s.steps.remaining(step, s.cfg.Timing.MigrationAbort); wait > 0 || s.cfg.Timing.MigrationAbort <= 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		s.steps.forget(step)
		s.vms.attempt(key, m.UID)
		return reconcile.Result{}, s.endMigration(ctx, m, vmi, migrationAbortedReason)
	}
	if wait := s.steps.remaining(step, s.cfg.Timing.Migration); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	s.steps.forget(step)
	if n := s.vms.attempt(key, m.UID); fault != nil && (fault.Failures < 0 || n <= fault.Failures) {
		return reconcile.Result{}, s.endMigration(ctx, m, vmi, orDefault(fault.Reason, migrationFailedReason))
	}
	target := m.Status.MigrationState.TargetNode
	if st := vmi.Status.MigrationState; st != nil && st.MigrationUID == m.UID {
		// virt-handler reports the instance on its new node and the
		// migration completed in one update.
		now := metav1.Now()
		st.EndTimestamp, st.Completed = &now, true
	}
	if err := s.placeVMI(ctx, vmi, target); err != nil {
		return reconcile.Result{}, err
	}
	s.log.V(1).Info("live-migrated", "vmi", client.ObjectKeyFromObject(vmi), "to", target)
	return reconcile.Result{}, s.endMigration(ctx, m, vmi, "")
}

// startMigration moves a pending migration to Running once KubeVirt's
// backoff after a failed evacuation is over and a target node exists.
func (s *Sim) startMigration(ctx context.Context, m *kubevirtv1.VirtualMachineInstanceMigration, vmi *kubevirtv1.VirtualMachineInstance) (reconcile.Result, error) {
	if wait, err := s.migrationBackoff(ctx, m); err != nil || wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, err
	}
	source := vmi.Status.NodeName
	target := s.pickNode(ctx, vmi.Spec, source)
	if target == "" {
		// No node to go to: KubeVirt's target pod would stay Pending.
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	now := metav1.Now()
	state := &kubevirtv1.MigrationState{StartTimestamp: &now, SourceNode: source, TargetNode: target, MigrationUID: m.UID}
	setMigrationPhase(m, migrationRunning)
	m.Status.MigrationState = state.DeepCopy()
	if err := s.c.Status().Update(ctx, m); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, s.mutate(ctx, vmi, true, func() bool {
		vmi.Status.MigrationState = state.DeepCopy()
		return true
	})
}

// endMigration ends a migration: Succeeded for an empty reason, else Failed
// with it, on the migration and on its instance (nil when gone).
func (s *Sim) endMigration(ctx context.Context, m *kubevirtv1.VirtualMachineInstanceMigration, vmi *kubevirtv1.VirtualMachineInstance, reason string) error {
	now := metav1.Now()
	state := m.Status.MigrationState
	if state == nil {
		state = &kubevirtv1.MigrationState{MigrationUID: m.UID}
	}
	state.EndTimestamp = &now
	state.Completed, state.Failed, state.FailureReason = reason == "", reason != "", reason
	m.Status.MigrationState = state
	setMigrationPhase(m, migrationSucceeded)
	if reason != "" {
		setMigrationPhase(m, migrationFailed)
		if err := s.event(ctx, m, corev1.EventTypeWarning, cluster.EventFailedMigration, reason); err != nil {
			return err
		}
	}
	if err := s.c.Status().Update(ctx, m); err != nil {
		return err
	}
	if vmi == nil {
		return nil
	}
	return s.mutate(ctx, vmi, true, func() bool {
		if vmi.Status.MigrationState == nil || vmi.Status.MigrationState.MigrationUID != m.UID {
			return false
		}
		vmi.Status.MigrationState = state.DeepCopy()
		return true
	})
}

// migrationBackoff is how long an evacuation migration still waits after
// the instance's last failed evacuation: 20 s (Timing.MigrationBackoff)
// after one failure since its last success, doubled after each further one.
func (s *Sim) migrationBackoff(ctx context.Context, m *kubevirtv1.VirtualMachineInstanceMigration) (time.Duration, error) {
	base := s.cfg.Timing.MigrationBackoff
	if base <= 0 || m.Annotations[annotationEvacuationMigration] == "" {
		return 0, nil
	}
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := s.reader.List(ctx, &migs, client.InNamespace(m.Namespace), client.MatchingLabels{labelMigrationVMIName: m.Spec.VMIName}); err != nil {
		return 0, err
	}
	sortByCreation(migs.Items)
	backoff, lastFailed := time.Duration(0), time.Time{}
	for i := len(migs.Items) - 1; i >= 0; i-- {
		o := &migs.Items[i]
		if o.UID == m.UID || o.Annotations[annotationEvacuationMigration] == "" || o.DeletionTimestamp != nil {
			continue
		}
		if o.Status.Phase == migrationSucceeded {
			break
		}
		if o.Status.Phase != migrationFailed {
			continue
		}
		if backoff == 0 {
			backoff = base
		} else {
			backoff *= 2
		}
		// The latest failure, not the last in creation order: two
		// migrations created within the same second sort either way.
		if at := phaseEntered(o, migrationFailed); at.After(lastFailed) {
			lastFailed = at
		}
	}
	if backoff == 0 {
		return 0, nil
	}
	return max(time.Until(lastFailed.Add(backoff)), 0), nil
}

// collectMigrations deletes the instance's finished migrations beyond the
// last finishedMigrationsKept, as KubeVirt's migration controller does.
func (s *Sim) collectMigrations(ctx context.Context, namespace, vmi string) error {
	var migs kubevirtv1.VirtualMachineInstanceMigrationList
	if err := s.c.List(ctx, &migs, client.InNamespace(namespace), client.MatchingLabels{labelMigrationVMIName: vmi}); err != nil {
		return err
	}
	var finished []kubevirtv1.VirtualMachineInstanceMigration
	for _, m := range migs.Items {
		if migrationFinished(&m) && m.DeletionTimestamp == nil {
			finished = append(finished, m)
		}
	}
	sortByCreation(finished)
	for i := 0; i < len(finished)-finishedMigrationsKept; i++ {
		if err := s.c.Delete(ctx, &finished[i]); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// sortByCreation sorts migrations oldest first, as KubeVirt does; within
// the second the API stores, an unfinished one after the finished ones.
func sortByCreation(migs []kubevirtv1.VirtualMachineInstanceMigration) {
	sort.SliceStable(migs, func(i, j int) bool {
		a, b := migs[i].CreationTimestamp, migs[j].CreationTimestamp
		if !a.Equal(&b) {
			return a.Before(&b)
		}
		return migrationFinished(&migs[i]) && !migrationFinished(&migs[j])
	})
}

// setMigrationPhase moves a migration to a phase and records when.
func setMigrationPhase(m *kubevirtv1.VirtualMachineInstanceMigration, phase string) {
	m.Status.Phase = phase
	m.Status.PhaseTransitionTimestamps = append(m.Status.PhaseTransitionTimestamps,
		kubevirtv1.MigrationPhaseTransition{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
}

// phaseEntered is when the migration entered a phase, zero if it did not.
func phaseEntered(m *kubevirtv1.VirtualMachineInstanceMigration, phase string) time.Time {
	for _, t := range m.Status.PhaseTransitionTimestamps {
		if t.Phase == phase {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return time.Time{}
}

// event records an event as KubeVirt's controllers do.
func (s *Sim) event(ctx context.Context, obj client.Object, eventType, reason, message string) error {
	now := metav1.Now()
	gvk, err := s.c.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), GenerateName: obj.GetName() + "."},
		InvolvedObject: corev1.ObjectReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()},
		Reason: reason, Message: message, Type: eventType,
		Source:         corev1.EventSource{Component: "virtualmachine-controller"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if err := s.c.Create(ctx, ev); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

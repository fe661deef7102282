package sim

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedulingcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
)

// The simulated KubeVirt runs VirtualMachines as instances on nodes according
// to their run strategy (stop and start are changes of spec.runStrategy,
// Halted and back, which is what KubeVirt's stop and start subresources do to
// Always VMs), and evacuates the instances of a node tainted kubevirt.io/drain
// by live migration when their eviction strategy allows it and they can move.
// Instances that cannot migrate stay until their VM is stopped.

// parallelOutboundMigrationsPerNode is KubeVirt's default.
const parallelOutboundMigrationsPerNode = 2

func (s *Sim) setupKubeVirt(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-kubevirt-vm").
		For(&kubevirtv1.VirtualMachine{}).
		Owns(&kubevirtv1.VirtualMachineInstance{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(s.unscheduledVMs)).
		Complete(reconcile.Func(s.reconcileVM)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-kubevirt-evacuation").
		For(&corev1.Node{}).
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return nodeRequest(o.GetLabels()[cluster.LabelVMINodeName])
		})).
		Watches(&kubevirtv1.VirtualMachineInstanceMigration{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return nodeRequest(o.GetAnnotations()[annotationEvacuationMigration])
		})).
		Complete(reconcile.Func(s.reconcileEvacuation)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-kubevirt-migration").
		For(&kubevirtv1.VirtualMachineInstanceMigration{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(s.pendingMigrations)).
		Complete(reconcile.Func(s.reconcileMigration))
}

func nodeRequest(node string) []reconcile.Request {
	if node == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: node}}}
}

// wantsRunning says whether the VM's run strategy asks for an instance: true
// or false, or nil when KubeVirt leaves it to the user (Manual, Once).
func wantsRunning(vm *kubevirtv1.VirtualMachine) *bool {
	if vm.Spec.RunStrategy == nil {
		if vm.Spec.Running == nil {
			return ptr.To(false)
		}
		return ptr.To(*vm.Spec.Running)
	}
	switch *vm.Spec.RunStrategy {
	case runStrategyAlways, runStrategyRerunOnFailure:
		return ptr.To(true)
	case runStrategyHalted:
		return ptr.To(false)
	}
	return nil
}

func (s *Sim) reconcileVM(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vm := &kubevirtv1.VirtualMachine{}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	vmiErr := s.c.Get(ctx, req.NamespacedName, vmi)
	if vmiErr != nil && !apierrors.IsNotFound(vmiErr) {
		return reconcile.Result{}, vmiErr
	}
	hasVMI := vmiErr == nil && vmi.DeletionTimestamp == nil
	if err := s.c.Get(ctx, req.NamespacedName, vm); err != nil {
		// The VM is gone: its instance goes too.
		if apierrors.IsNotFound(err) && hasVMI && ownerUID(vmi, "VirtualMachine") != "" {
			return reconcile.Result{}, client.IgnoreNotFound(s.c.Delete(ctx, vmi))
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	want := wantsRunning(vm)
	switch {
	case want != nil && !*want && hasVMI:
		if err := s.c.Delete(ctx, vmi); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		hasVMI = false
	case want != nil && *want && !hasVMI && vmiErr != nil:
		node := s.pickNode(ctx, vm.Spec.Template.Spec, "")
		created := newVMI(vm, node)
		if err := s.c.Create(ctx, created); err != nil {
			return reconcile.Result{}, client.IgnoreAlreadyExists(err)
		}
		created.Status = vmiStatus(node, &created.Spec)
		if err := cluster.UpdateStatus(ctx, s.c, created); err != nil {
			return reconcile.Result{}, err
		}
		vmi, hasVMI = created, true
	case hasVMI && vmi.Status.NodeName == "":
		if node := s.pickNode(ctx, vmi.Spec, ""); node != "" {
			if err := s.placeVMI(ctx, vmi, node); err != nil {
				return reconcile.Result{}, err
			}
		}
	case hasVMI && want != nil && *want && (vmi.Status.Phase == cluster.VMIPhaseFailed || vmi.Status.Phase == cluster.VMIPhaseSucceeded):
		// Restart a finished instance: delete it, the next pass creates it again.
		return reconcile.Result{}, client.IgnoreNotFound(s.c.Delete(ctx, vmi))
	}
	status := vmStatus(false, false)
	if hasVMI {
		status = vmStatus(true, vmi.Status.Phase == vmiPhaseRunning)
	}
	if vm.Status == status {
		return reconcile.Result{}, nil
	}
	vm.Status = status
	return reconcile.Result{}, s.c.Status().Update(ctx, vm)
}

func ownerUID(obj client.Object, kind string) types.UID {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind == kind && ref.Controller != nil && *ref.Controller {
			return ref.UID
		}
	}
	return ""
}

// placeVMI schedules an instance onto a node.
func (s *Sim) placeVMI(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, node string) error {
	if vmi.Labels == nil {
		vmi.Labels = map[string]string{}
	}
	vmi.Labels[cluster.LabelVMINodeName] = node
	if err := s.c.Update(ctx, vmi); err != nil {
		return err
	}
	paused := kubevirtv1.ConditionStatus(vmi.Status.Conditions, cluster.ConditionPaused) == "True"
	vmi.Status = vmiStatus(node, &vmi.Spec)
	if paused {
		// A paused instance stays paused where it lands.
		vmi.Status.Conditions = append(vmi.Status.Conditions, pausedCondition)
	}
	return cluster.UpdateStatus(ctx, s.c, vmi)
}

// pausedCondition is what virt-handler reports of an instance paused by
// virtctl pause.
var pausedCondition = kubevirtv1.Condition{Type: cluster.ConditionPaused, Status: "True", Reason: "PausedByUser"}

// unscheduledVMs maps a node change to the VMs whose instance waits for a
// node.
func (s *Sim) unscheduledVMs(ctx context.Context, _ client.Object) []reconcile.Request {
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := s.c.List(ctx, &vmis); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, vmi := range vmis.Items {
		if vmi.Status.NodeName == "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vmi)})
		}
	}
	return reqs
}

func vmStatus(created, ready bool) kubevirtv1.VirtualMachineStatus {
	switch {
	case created && ready:
		return kubevirtv1.VirtualMachineStatus{PrintableStatus: "Running", Ready: true, Created: true}
	case created:
		return kubevirtv1.VirtualMachineStatus{PrintableStatus: "Starting", Created: true}
	}
	return kubevirtv1.VirtualMachineStatus{PrintableStatus: "Stopped"}
}

// newVMI is the instance of a VM on a node ("" while it waits for one).
func newVMI(vm *kubevirtv1.VirtualMachine, node string) *kubevirtv1.VirtualMachineInstance {
	labels := map[string]string{}
	var spec kubevirtv1.VirtualMachineInstanceSpec
	if vm.Spec.Template != nil {
		for k, v := range vm.Spec.Template.ObjectMeta.Labels {
			labels[k] = v
		}
		spec = *vm.Spec.Template.Spec.DeepCopy()
	}
	if node != "" {
		labels[cluster.LabelVMINodeName] = node
	}
	return &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: vm.Namespace, Name: vm.Name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: kubevirtv1.GroupVersion.String(), Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: spec,
	}
}

func vmiStatus(node string, spec *kubevirtv1.VirtualMachineInstanceSpec) kubevirtv1.VirtualMachineInstanceStatus {
	if node == "" {
		return kubevirtv1.VirtualMachineInstanceStatus{Phase: vmiPhaseScheduling, Conditions: []kubevirtv1.Condition{
			{Type: "Ready", Status: "False", Reason: "PodNotExists", Message: "0/0 nodes are available to run the virtual machine"},
		}}
	}
	migratable := kubevirtv1.Condition{Type: "LiveMigratable", Status: "True"}
	if !kubeVirtCanMigrate(spec) {
		migratable = kubevirtv1.Condition{Type: "LiveMigratable", Status: "False", Reason: "HostDeviceNotLiveMigratable", Message: "VMI uses a PCI host devices"}
	}
	return kubevirtv1.VirtualMachineInstanceStatus{NodeName: node, Phase: vmiPhaseRunning, Conditions: []kubevirtv1.Condition{
		{Type: "Ready", Status: "True"}, migratable,
	}}
}

// kubeVirtCanMigrate is KubeVirt's own view: passthrough devices pin an
// instance to its node.
func kubeVirtCanMigrate(spec *kubevirtv1.VirtualMachineInstanceSpec) bool {
	return len(spec.Domain.Devices.HostDevices) == 0 && len(spec.Domain.Devices.GPUs) == 0
}

// vmTarget reports whether KubeVirt may place an instance on the node.
func vmTarget(n *corev1.Node) bool {
	if n.Spec.Unschedulable || !cluster.NodeReady(n) || cluster.IsWitness(n) {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	return true
}

// fits reports whether the instance's node selector and required node
// affinity admit the node.
func fits(n *corev1.Node, spec kubevirtv1.VirtualMachineInstanceSpec) bool {
	for k, v := range spec.NodeSelector {
		if n.Labels[k] != v {
			return false
		}
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		ok, err := schedulingcorev1.MatchNodeSelectorTerms(n, a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		return ok && err == nil
	}
	return true
}

// pickNode chooses the node for an instance: among the nodes it may run on,
// other than exclude, the one running the fewest instances (then by name).
// It returns "" when there is none.
func (s *Sim) pickNode(ctx context.Context, spec kubevirtv1.VirtualMachineInstanceSpec, exclude string) string {
	var nodes corev1.NodeList
	var vmis kubevirtv1.VirtualMachineInstanceList
	if s.c.List(ctx, &nodes) != nil || s.c.List(ctx, &vmis) != nil {
		return ""
	}
	load := map[string]int{}
	for _, vmi := range vmis.Items {
		load[vmi.Status.NodeName]++
	}
	best := ""
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Name == exclude || !vmTarget(n) || !fits(n, spec) {
			continue
		}
		if best == "" || load[n.Name] < load[best] || (load[n.Name] == load[best] && n.Name < best) {
			best = n.Name
		}
	}
	return best
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
	return m.Status.Phase == migrationSucceeded || m.Status.Phase == "Failed"
}

// reconcileEvacuation is KubeVirt's evacuation controller: on a node tainted
// kubevirt.io/drain it creates a migration for each instance that may and
// can move, at most two at a time.
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
		if outbound >= parallelOutboundMigrationsPerNode {
			break
		}
		if vmi.DeletionTimestamp != nil || !evictionMigrates(vmi) || active[vmi.Namespace+"/"+vmi.Name] {
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

// reconcileMigration moves an instance to another node once the migration's
// time has passed and a target exists; without a target it stays Pending.
func (s *Sim) reconcileMigration(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	m := &kubevirtv1.VirtualMachineInstanceMigration{}
	if err := s.c.Get(ctx, req.NamespacedName, m); err != nil || migrationFinished(m) {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := s.reader.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName}, vmi); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		m.Status.Phase = "Failed"
		return reconcile.Result{}, s.c.Status().Update(ctx, m)
	}
	if m.Status.Phase == "" {
		m.Status.Phase = migrationPending
		return reconcile.Result{}, s.c.Status().Update(ctx, m)
	}
	step := "migration/" + string(m.UID)
	if wait := s.steps.remaining(step, s.cfg.Timing.Migration); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	source := vmi.Status.NodeName
	target := s.pickNode(ctx, vmi.Spec, source)
	if target == "" {
		// No node to go to: KubeVirt's target pod would stay Pending.
		return reconcile.Result{RequeueAfter: 2 * time.Second}, nil
	}
	if err := s.placeVMI(ctx, vmi, target); err != nil {
		return reconcile.Result{}, err
	}
	s.steps.forget(step)
	s.log.V(1).Info("live-migrated", "vmi", client.ObjectKeyFromObject(vmi), "from", source, "to", target)
	m.Status.Phase = migrationSucceeded
	return reconcile.Result{}, s.c.Status().Update(ctx, m)
}

// vmKey is "namespace/name".
func vmKey(namespace, name string) string { return namespace + "/" + name }

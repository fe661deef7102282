package sim

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
	switch runStrategyOf(vm) {
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
	strategy := runStrategyOf(vm)
	requests := vm.Status.StateChangeRequests
	finished := hasVMI && (vmi.Status.Phase == cluster.VMIPhaseFailed || vmi.Status.Phase == cluster.VMIPhaseSucceeded)
	stop, start := false, false
	switch {
	case hasRequest(requests, actionStop):
		// virtctl stop of a RerunOnFailure or Manual VM: the instance goes,
		// the run strategy stays; the request is done once it is gone.
		if hasVMI {
			stop = true
		} else if vmiErr != nil {
			requests = withoutRequest(requests, actionStop)
		}
	case strategy == runStrategyHalted:
		stop = hasVMI
	case finished && (strategy == runStrategyAlways || (strategy == runStrategyRerunOnFailure && vmi.Status.Phase == cluster.VMIPhaseFailed)):
		// Restart a finished instance: delete it, the next pass creates it
		// again. KubeVirt asks itself to start a RerunOnFailure VM whose
		// instance failed.
		stop = true
		if strategy == runStrategyRerunOnFailure {
			requests = withRequest(requests, actionStart)
		}
	case finished && strategy == runStrategyRerunOnFailure:
		// An instance that succeeded (its guest shut down) is not started
		// again: the VM is off until someone starts it.
		stop = true
	case hasVMI || vmiErr == nil:
		// It has an instance, or one being deleted: nothing to start.
	case strategy == runStrategyAlways:
		start = true
	case strategy == runStrategyRerunOnFailure:
		// Started when asked, or when its run strategy changed to it.
		start = hasRequest(requests, actionStart) || vm.Status.RunStrategy != strategy
	case strategy == runStrategyManual:
		start = hasRequest(requests, actionStart)
	}
	switch {
	case stop && hasVMI:
		if err := s.c.Delete(ctx, vmi); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		hasVMI = false
	case start:
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
		requests = withoutRequest(requests, actionStart)
	case hasVMI && vmi.Status.NodeName == "":
		if node := s.pickNode(ctx, vmi.Spec, ""); node != "" {
			if err := s.placeVMI(ctx, vmi, node); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	status := vmStatus(false, false, strategy)
	if hasVMI {
		status = vmStatus(true, vmi.Status.Phase == vmiPhaseRunning, strategy)
	}
	status.StateChangeRequests = requests
	if equality.Semantic.DeepEqual(vm.Status, status) {
		return reconcile.Result{}, nil
	}
	vm.Status = status
	return reconcile.Result{}, s.c.Status().Update(ctx, vm)
}

// runStrategyOf is the VM's run strategy: spec.runStrategy, else the
// deprecated spec.running (true is Always), else Halted.
func runStrategyOf(vm *kubevirtv1.VirtualMachine) string {
	switch {
	case vm.Spec.RunStrategy != nil:
		return *vm.Spec.RunStrategy
	case ptr.Deref(vm.Spec.Running, false):
		return runStrategyAlways
	}
	return runStrategyHalted
}

// The actions of start and stop requests (virtctl start and stop, through
// virt-api, and virt-controller's own restart of a failed instance).
const (
	actionStart = "Start"
	actionStop  = "Stop"
)

func hasRequest(rs []kubevirtv1.StateChangeRequest, action string) bool {
	return slices.ContainsFunc(rs, func(r kubevirtv1.StateChangeRequest) bool { return r.Action == action })
}

func withRequest(rs []kubevirtv1.StateChangeRequest, action string) []kubevirtv1.StateChangeRequest {
	if hasRequest(rs, action) {
		return rs
	}
	return append(slices.Clone(rs), kubevirtv1.StateChangeRequest{Action: action})
}

func withoutRequest(rs []kubevirtv1.StateChangeRequest, action string) []kubevirtv1.StateChangeRequest {
	out := slices.DeleteFunc(slices.Clone(rs), func(r kubevirtv1.StateChangeRequest) bool { return r.Action == action })
	if len(out) == 0 {
		return nil
	}
	return out
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
	migration := vmi.Status.MigrationState
	vmi.Status = vmiStatus(node, &vmi.Spec)
	vmi.Status.MigrationState = migration
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

// vmStatus is what KubeVirt reports of a VM: whether it has an instance,
// whether that runs, and the run strategy it acted on.
func vmStatus(created, ready bool, runStrategy string) kubevirtv1.VirtualMachineStatus {
	switch {
	case created && ready:
		return kubevirtv1.VirtualMachineStatus{PrintableStatus: "Running", Ready: true, Created: true, RunStrategy: runStrategy}
	case created:
		return kubevirtv1.VirtualMachineStatus{PrintableStatus: "Starting", Created: true, RunStrategy: runStrategy}
	}
	return kubevirtv1.VirtualMachineStatus{PrintableStatus: "Stopped", RunStrategy: runStrategy}
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

// vmKey is "namespace/name".
func vmKey(namespace, name string) string { return namespace + "/" + name }

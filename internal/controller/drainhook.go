package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
)

// DrainHookReconciler answers Rancher's drain hooks. Rancher asks, on a
// machine's plan Secret, before it drains a node (rke.cattle.io/pre-drain)
// and before it uncordons it (rke.cattle.io/post-drain); it goes on once the
// toolkit copies the value into management.harvesterhci.io/pre-hook or
// post-hook. The plan reconciler runs the node's Jobs and records its state;
// this reconciler acknowledges once that state says the work is done.
type DrainHookReconciler struct {
	Client client.Client
}

// The drain-hook reconciler acknowledges by patching the machine-plan Secret.
//
// +kubebuilder:rbac:groups="",namespace=fleet-local,resources=secrets,verbs=patch

// DrainHookControllerName names the drain-hook controller.
const DrainHookControllerName = "drainhook"

// Reconcile implements reconcile.Reconciler.
func (r *DrainHookReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sec := cluster.MachinePlan()
	if err := r.Client.Get(ctx, req.NamespacedName, sec); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cluster.IsMachinePlan(sec) {
		return ctrl.Result{}, nil
	}
	plan, err := r.nodeUpgradingPlan(ctx)
	if err != nil || plan == nil {
		return ctrl.Result{}, err
	}
	node, err := cluster.NodeOfMachine(ctx, r.Client, sec.Labels[cluster.LabelMachineName])
	if err != nil || node == "" {
		return ctrl.Result{}, err
	}
	pre, post := nodestate.Acknowledged(plan.Status.NodeUpgradeStatuses[node].State)
	before := sec.DeepCopy()
	changed := false
	ack := func(ok bool, request, ackKey string) {
		if v := sec.Annotations[request]; ok && v != "" && sec.Annotations[ackKey] != v {
			sec.Annotations[ackKey] = v
			changed = true
		}
	}
	ack(pre, cluster.AnnotationRancherPreDrain, v1beta1.AnnotationPreHook)
	ack(post, cluster.AnnotationRancherPostDrain, v1beta1.AnnotationPostHook)
	if !changed {
		return ctrl.Result{}, nil
	}
	// Optimistic locking: Rancher may have moved on and changed the request.
	if err := r.Client.Patch(ctx, sec, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return requeueOnConflict(fmt.Errorf("acknowledging the drain hook of node %s on Secret %s/%s: %w", node, sec.Namespace, sec.Name, err))
	}
	return ctrl.Result{}, nil
}

// nodeUpgradingPlan returns the multi-node plan whose nodes are being
// upgraded, if any.
func (r *DrainHookReconciler) nodeUpgradingPlan(ctx context.Context) (*v1beta1.UpgradePlan, error) {
	var plans v1beta1.UpgradePlanList
	// Read-only: the plan is the cache's own.
	if err := r.Client.List(ctx, &plans, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range plans.Items {
		p := &plans.Items[i]
		if p.Status.CurrentPhase == v1beta1.PhaseNodeUpgrading && p.Status.SingleNode == nil {
			return p, nil
		}
	}
	return nil, nil
}

// secretsToAcknowledge maps a plan's change to the machine-plan Secrets
// whose node's new state allows an acknowledgement Rancher still waits for:
// usually one, never every Secret of the cluster.
func (r *DrainHookReconciler) secretsToAcknowledge(ctx context.Context, obj client.Object) []reconcile.Request {
	plan, ok := obj.(*v1beta1.UpgradePlan)
	if !ok || plan.Status.CurrentPhase != v1beta1.PhaseNodeUpgrading {
		return nil
	}
	secrets, err := cluster.MachinePlans(ctx, r.Client)
	if err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range secrets {
		sec := &secrets[i]
		if !cluster.IsMachinePlan(sec) || !awaitsAck(sec) {
			continue
		}
		node, err := cluster.NodeOfMachine(ctx, r.Client, sec.Labels[cluster.LabelMachineName])
		if err != nil || node == "" {
			continue
		}
		if pre, post := nodestate.Acknowledged(plan.Status.NodeUpgradeStatuses[node].State); pre || post {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(sec)})
		}
	}
	return reqs
}

// awaitsAck reports whether Rancher asks for a hook the toolkit has not
// acknowledged yet.
func awaitsAck(sec client.Object) bool {
	a := sec.GetAnnotations()
	pre, post := a[cluster.AnnotationRancherPreDrain], a[cluster.AnnotationRancherPostDrain]
	return (pre != "" && a[v1beta1.AnnotationPreHook] != pre) || (post != "" && a[v1beta1.AnnotationPostHook] != post)
}

// secretOfMachine maps a Machine to its machine-plan Secrets.
func (r *DrainHookReconciler) secretOfMachine(ctx context.Context, obj client.Object) []reconcile.Request {
	secrets, err := cluster.MachinePlans(ctx, r.Client, client.MatchingLabels{cluster.LabelMachineName: obj.GetName()})
	if err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(secrets))
	for i := range secrets {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&secrets[i])})
	}
	return reqs
}

// SetupDrainHook registers the drain-hook reconciler.
func SetupDrainHook(mgr ctrl.Manager) error {
	r := &DrainHookReconciler{Client: mgr.GetClient()}
	return ctrl.NewControllerManagedBy(mgr).
		Named(DrainHookControllerName).
		For(&corev1.Secret{}, builder.OnlyMetadata, builder.WithPredicates(predicate.NewPredicateFuncs(cluster.IsMachinePlan))).
		Watches(&v1beta1.UpgradePlan{}, handler.EnqueueRequestsFromMapFunc(r.secretsToAcknowledge),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: nodeReachedAck})).
		Watches(&capiv1beta1.Machine{}, handler.EnqueueRequestsFromMapFunc(r.secretOfMachine)).
		Complete(r)
}

// nodeReachedAck keeps the plan updates that move a node into a state whose
// drain hook is acknowledged, or change the phase: the other writes of the
// plan (most of them) allow no new acknowledgement, and each would be a look
// at every machine-plan Secret.
func nodeReachedAck(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*v1beta1.UpgradePlan)
	n, okNew := e.ObjectNew.(*v1beta1.UpgradePlan)
	if !okOld || !okNew || o.Status.CurrentPhase != n.Status.CurrentPhase {
		return true
	}
	for name, st := range n.Status.NodeUpgradeStatuses {
		if pre, post := nodestate.Acknowledged(st.State); (pre || post) && o.Status.NodeUpgradeStatuses[name].State != st.State {
			return true
		}
	}
	return false
}

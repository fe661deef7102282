package controller

import (
	"context"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/kept"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/planstatus"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// ControllerName names the plan controller; its events come from
// "upgradeplan-controller".
const ControllerName = "upgradeplan"

// Setup registers the toolkit's reconcilers with a manager.
// plans writes the plans' statuses and feeds the cache's watch of plans.
func Setup(mgr ctrl.Manager, cfg *phase.Config, clk clock.PassiveClock, plans *planstatus.Store) error {
	kube, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	if cfg.Kubelet == nil {
		cfg.Kubelet = preflight.ProxyKubelet{Kube: kube}
	}
	ledgers := &vmledger.Cache{}
	r := &PlanReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Kube:         kube,
		Recorder:     mgr.GetEventRecorderFor(ControllerName + "-controller"),
		Clock:        clk,
		Config:       cfg,
		Phases:       phase.Pipeline(),
		PlanProgress: &cluster.PlanProgressReader{Reader: mgr.GetAPIReader()},
		Plans:        plans,
		Kept:         kept.New(),
		Ledgers:      ledgers,
	}
	byPlanLabel := handler.EnqueueRequestsFromMapFunc(planOfLabel)
	if err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1beta1.UpgradePlan{}).
		// A plan that finishes frees the upgrade slot for the plans waiting.
		Watches(&v1beta1.UpgradePlan{}, handler.EnqueueRequestsFromMapFunc(r.waitingPlans)).
		Watches(&batchv1.Job{}, r.Kept.MarkingKept(kept.KindJobs, byPlanLabel, kept.JobUpdates)).
		Watches(&appsv1.Deployment{}, byPlanLabel).
		Watches(&corev1.Service{}, byPlanLabel).
		Watches(&corev1.Pod{}, byPlanLabel, builder.WithPredicates(predicate.Funcs{CreateFunc: podCreated, UpdateFunc: podChangeMatters, DeleteFunc: podGoneMatters})).
		Watches(&upgradev1.Plan{}, byPlanLabel).
		Watches(&harvesterv1beta1.VirtualMachineImage{}, handler.EnqueueRequestsFromMapFunc(r.plansOfImage)).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.plansOfEndpointSlice)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(planOfOwner)).
		Watches(&corev1.Node{}, r.Kept.MarkingKept(kept.KindNodes, handler.EnqueueRequestsFromMapFunc(r.runningPlans), kept.NodeUpdates)).
		Watches(&corev1.Secret{}, r.Kept.Marking(kept.KindMachinePlans, handler.EnqueueRequestsFromMapFunc(r.runningPlans),
			predicate.NewPredicateFuncs(cluster.IsMachinePlan), predicate.Funcs{UpdateFunc: drainStateChanged}), builder.OnlyMetadata).
		Watches(&capiv1beta1.Machine{}, r.Kept.Marking(kept.KindMachines, handler.EnqueueRequestsFromMapFunc(r.runningPlans))).
		Watches(&provisioningv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.runningPlans)).
		// What the verified gates read: the versions the components report,
		// the ManagedCharts Fleet deploys, the add-ons.
		Watches(&harvesterv1beta1.Setting{}, handler.EnqueueRequestsFromMapFunc(r.runningPlans)).
		Watches(&managementv3.Setting{}, handler.EnqueueRequestsFromMapFunc(r.runningPlans)).
		Watches(&managementv3.ManagedChart{}, handler.EnqueueRequestsFromMapFunc(r.runningPlans)).
		Watches(&harvesterv1beta1.Addon{}, handler.EnqueueRequestsFromMapFunc(r.runningPlans)).
		// The health gate: a volume's robustness.
		Watches(&longhornv1beta2.Volume{}, handler.EnqueueRequestsFromMapFunc(r.runningPlans),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: robustnessChanged})).
		// The nodes' counts of replicas being rebuilt.
		Watches(&longhornv1beta2.Engine{}, handler.EnqueueRequestsFromMapFunc(r.runningPlans),
			builder.WithPredicates(rebuildingChanged)).
		Complete(r); err != nil {
		return err
	}
	if err := SetupLedger(mgr, cfg, clk, ledgers); err != nil {
		return err
	}
	return SetupDrainHook(mgr)
}

// robustnessChanged keeps the Longhorn volume updates the health gate
// decides on.
func robustnessChanged(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*longhornv1beta2.Volume)
	n, okN := e.ObjectNew.(*longhornv1beta2.Volume)
	return !okO || !okN || o.Status.Robustness != n.Status.Robustness
}

// rebuildingChanged keeps the Longhorn engines that begin or end a
// replica's rebuild (mode WO): an engine that comes or goes with one, an
// update that changes which replicas it rebuilds.
var rebuildingChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return len(rebuilding(e.Object)) > 0 },
	DeleteFunc: func(e event.DeleteEvent) bool { return len(rebuilding(e.Object)) > 0 },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !maps.Equal(rebuilding(e.ObjectOld), rebuilding(e.ObjectNew))
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// rebuilding names the replicas an engine rebuilds.
func rebuilding(obj client.Object) map[string]bool {
	if e, ok := obj.(*longhornv1beta2.Engine); ok {
		return cluster.RebuildingReplicas(e)
	}
	return nil
}

// podCreated: a new pod asks for no pass. Its Job's status counts it, and
// what a plan reads of the pod itself comes later (podChangeMatters).
func podCreated(event.CreateEvent) bool { return false }

// podGoneMatters drops the pods that leave the cache because the log
// capture let them go (v1beta1.LabelLogCaptureDone): the API server tells
// the watch with the pod as it was, still held and not being deleted, which
// no pod deleted for good can be. They ran to their end, and nothing a plan
// decides changes; a pod deleted, or let go while being deleted, is kept:
// the cleanup waits for it.
func podGoneMatters(e event.DeleteEvent) bool {
	return e.Object.GetDeletionTimestamp() != nil || !controllerutil.ContainsFinalizer(e.Object, v1beta1.FinalizerLogCapture)
}

// podChangeMatters keeps the pod updates a plan decides on: the scheduler's
// verdict (a pod it cannot place is named in the plan's progress), how its
// containers ended (a repo that can never serve) and deletion (the cleanup
// waits for the plan's pods). Where it runs, its phase and readiness do not:
// the Job's status and the repo's EndpointSlices carry them, and each such
// update would be a pass over every node.
func podChangeMatters(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*corev1.Pod)
	n, okNew := e.ObjectNew.(*corev1.Pod)
	if !okOld || !okNew {
		return true
	}
	return deletionChanged(o, n) || !sameScheduled(o, n) ||
		!slices.EqualFunc(o.Status.ContainerStatuses, n.Status.ContainerStatuses, sameContainerEnd)
}

// sameScheduled compares what the scheduler says of the pods.
func sameScheduled(a, b *corev1.Pod) bool {
	find := func(p *corev1.Pod) corev1.PodCondition {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				return c
			}
		}
		return corev1.PodCondition{}
	}
	x, y := find(a), find(b)
	return x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message
}

// sameContainerEnd compares what a container's status says of how it ended,
// or why it waits to start (an image it cannot pull).
func sameContainerEnd(a, b corev1.ContainerStatus) bool {
	code := func(t *corev1.ContainerStateTerminated) int32 {
		if t == nil {
			return -1
		}
		return t.ExitCode
	}
	waiting := func(w *corev1.ContainerStateWaiting) string {
		if w == nil {
			return ""
		}
		return w.Reason
	}
	return a.Name == b.Name && a.RestartCount == b.RestartCount && waiting(a.State.Waiting) == waiting(b.State.Waiting) &&
		code(a.State.Terminated) == code(b.State.Terminated) && code(a.LastTerminationState.Terminated) == code(b.LastTerminationState.Terminated)
}

// deletionChanged reports whether an object began to be deleted.
func deletionChanged(o, n client.Object) bool {
	return o.GetDeletionTimestamp().IsZero() != n.GetDeletionTimestamp().IsZero()
}

// drainStateChanged keeps the machine-plan Secret updates that change
// Rancher's drain-hook requests or how far its drain went (which the plan
// reports while it waits for Rancher); acknowledgements are the drain-hook
// reconciler's business.
func drainStateChanged(e event.UpdateEvent) bool {
	o, n := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
	for _, k := range []string{
		cluster.AnnotationRancherPreDrain, cluster.AnnotationRancherPostDrain, cluster.AnnotationRancherDrainOptions,
		cluster.AnnotationRancherDrainDone, cluster.AnnotationRancherDrainError,
	} {
		if o[k] != n[k] {
			return true
		}
	}
	return false
}

// planOfLabel maps an object the plan created to the plan.
func planOfLabel(_ context.Context, obj client.Object) []reconcile.Request {
	if p := obj.GetLabels()[v1beta1.LabelUpgradePlan]; p != "" {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: p}}}
	}
	return nil
}

// planOfOwner maps an object owned by a plan (the restore-vm ConfigMap) to
// the plan.
func planOfOwner(_ context.Context, obj client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, o := range obj.GetOwnerReferences() {
		if o.Kind == "UpgradePlan" && o.APIVersion == v1beta1.GroupVersion.String() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: o.Name}})
		}
	}
	return reqs
}

// listPlans lists plans from the cache and keeps those f selects.
func (r *PlanReconciler) listPlans(ctx context.Context, f func(*v1beta1.UpgradePlan) bool) []reconcile.Request {
	return plansWhere(ctx, r.Client, f)
}

// plansWhere lists plans from the cache and keeps those f selects, as
// requests.
func plansWhere(ctx context.Context, c client.Reader, f func(*v1beta1.UpgradePlan) bool) []reconcile.Request {
	var plans v1beta1.UpgradePlanList
	// Read-only: a plan of a large cluster is big to copy on every event.
	if err := c.List(ctx, &plans, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range plans.Items {
		if f(&plans.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: plans.Items[i].Name}})
		}
	}
	return reqs
}

// waitingPlans maps a plan that freed the upgrade slot (it finished and
// cleaned up, or it is being deleted) to the plans queued behind it.
func (r *PlanReconciler) waitingPlans(ctx context.Context, obj client.Object) []reconcile.Request {
	if p, ok := obj.(*v1beta1.UpgradePlan); ok && pipeline.NeedsSlot(p) && p.DeletionTimestamp.IsZero() {
		return nil
	}
	return r.listPlans(ctx, func(p *v1beta1.UpgradePlan) bool {
		return p.Name != obj.GetName() && !p.IsStarted() && p.DeletionTimestamp.IsZero()
	})
}

// runningPlans maps a cluster-wide object (a Node) to the plans at work.
func (r *PlanReconciler) runningPlans(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.listPlans(ctx, func(p *v1beta1.UpgradePlan) bool { return p.IsStarted() && !p.IsFinished() })
}

// plansOfImage maps a VirtualMachineImage to the plan that created it or
// names it in spec.image (a user's image carries no label of ours).
func (r *PlanReconciler) plansOfImage(ctx context.Context, obj client.Object) []reconcile.Request {
	if reqs := planOfLabel(ctx, obj); reqs != nil {
		return reqs
	}
	return r.listPlans(ctx, func(p *v1beta1.UpgradePlan) bool {
		return p.Spec.Image != nil && *p.Spec.Image == obj.GetName() && !p.IsFinished()
	})
}

// plansOfEndpointSlice maps the repo Service's EndpointSlices to their plan.
func (r *PlanReconciler) plansOfEndpointSlice(ctx context.Context, obj client.Object) []reconcile.Request {
	svc := obj.GetLabels()[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	return r.listPlans(ctx, func(p *v1beta1.UpgradePlan) bool { return names.Repo(p.Name) == svc })
}

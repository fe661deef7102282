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
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/planstatus"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
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
		Reuse:        phase.NewReuse(),
	}
	byPlanLabel := handler.EnqueueRequestsFromMapFunc(planOfLabel)
	if err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1beta1.UpgradePlan{}).
		// A plan that finishes frees the upgrade slot for the plans waiting.
		Watches(&v1beta1.UpgradePlan{}, handler.EnqueueRequestsFromMapFunc(r.waitingPlans)).
		Watches(&batchv1.Job{}, changing(r.Reuse, phase.KindJobs, byPlanLabel, predicate.Funcs{UpdateFunc: jobChangeMatters})).
		Watches(&appsv1.Deployment{}, byPlanLabel).
		Watches(&corev1.Service{}, byPlanLabel).
		Watches(&corev1.Pod{}, byPlanLabel, builder.WithPredicates(predicate.Funcs{UpdateFunc: podChangeMatters})).
		Watches(&upgradev1.Plan{}, byPlanLabel).
		Watches(&harvesterv1beta1.VirtualMachineImage{}, handler.EnqueueRequestsFromMapFunc(r.plansOfImage)).
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(r.plansOfEndpointSlice)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(planOfOwner)).
		Watches(&corev1.Node{}, changing(r.Reuse, phase.KindNodes, handler.EnqueueRequestsFromMapFunc(r.runningPlans),
			predicate.Funcs{UpdateFunc: nodeChangeMatters})).
		Watches(&corev1.Secret{}, changing(r.Reuse, phase.KindMachinePlans, handler.EnqueueRequestsFromMapFunc(r.runningPlans),
			predicate.NewPredicateFuncs(cluster.IsMachinePlan), predicate.Funcs{UpdateFunc: drainStateChanged}), builder.OnlyMetadata).
		Watches(&capiv1beta1.Machine{}, changing(r.Reuse, phase.KindMachines, handler.EnqueueRequestsFromMapFunc(r.runningPlans))).
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
		Complete(r); err != nil {
		return err
	}
	return SetupDrainHook(mgr)
}

// changing marks kind k changed for the passes' reuse of lists on every
// event of it, then hands the events that preds keep to h. Marking first, in
// the same handler, makes the pass an event asks for list the kind afresh;
// the events preds drop (an acknowledgement, a heartbeat) change what the
// next pass lists without asking for a pass.
func changing(reuse *phase.Reuse, k phase.Kind, h handler.EventHandler, preds ...predicate.Predicate) handler.EventHandler {
	return handler.Funcs{
		CreateFunc:  markThen(reuse, k, preds, predicate.Predicate.Create, h.Create),
		UpdateFunc:  markThen(reuse, k, preds, predicate.Predicate.Update, h.Update),
		DeleteFunc:  markThen(reuse, k, preds, predicate.Predicate.Delete, h.Delete),
		GenericFunc: markThen(reuse, k, preds, predicate.Predicate.Generic, h.Generic),
	}
}

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// markThen is changing's handling of one type of event E.
func markThen[E any](reuse *phase.Reuse, k phase.Kind, preds []predicate.Predicate, keeps func(predicate.Predicate, E) bool,
	h func(context.Context, E, requestQueue)) func(context.Context, E, requestQueue) {
	return func(ctx context.Context, e E, q requestQueue) {
		reuse.Changed(k)
		for _, p := range preds {
			if !keeps(p, e) {
				return
			}
		}
		h(ctx, e, q)
	}
}

// robustnessChanged keeps the Longhorn volume updates the health gate
// decides on.
func robustnessChanged(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*longhornv1beta2.Volume)
	n, okN := e.ObjectNew.(*longhornv1beta2.Volume)
	return !okO || !okN || o.Status.Robustness != n.Status.Robustness
}

// nodeChangeMatters keeps the Node updates a plan decides on: readiness, the
// OS image, boot ID and kubelet version (a reboot, RKE2's upgrade), and
// labels (managed, witness, system-upgrade-controller's completion label).
// Cordons, taints and heartbeats do not.
func nodeChangeMatters(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*corev1.Node)
	n, okNew := e.ObjectNew.(*corev1.Node)
	if !okOld || !okNew {
		return true
	}
	oi, ni := o.Status.NodeInfo, n.Status.NodeInfo
	return cluster.NodeReady(o) != cluster.NodeReady(n) || oi.OSImage != ni.OSImage || oi.BootID != ni.BootID ||
		oi.KubeletVersion != ni.KubeletVersion || !maps.Equal(o.Labels, n.Labels)
}

// jobChangeMatters keeps the Job updates a plan decides on: its outcome
// (conditions, counts, start and completion), suspension, deletion and
// labels. The Job controller's bookkeeping (pods not yet counted, pods
// terminating, finalizers) does not: with four Jobs per node, each such
// update would be a pass over every node.
func jobChangeMatters(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*batchv1.Job)
	n, okNew := e.ObjectNew.(*batchv1.Job)
	if !okOld || !okNew {
		return true
	}
	was, is := o.Status, n.Status
	return was.Active != is.Active || !ptr.Equal(was.Ready, is.Ready) || was.Succeeded != is.Succeeded || was.Failed != is.Failed ||
		(was.StartTime == nil) != (is.StartTime == nil) || !was.CompletionTime.Equal(is.CompletionTime) ||
		!ptr.Equal(o.Spec.Suspend, n.Spec.Suspend) || deletionChanged(o, n) || !maps.Equal(o.Labels, n.Labels) ||
		!slices.EqualFunc(was.Conditions, is.Conditions, func(a, b batchv1.JobCondition) bool {
			return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason
		})
}

// podChangeMatters keeps the pod updates a plan decides on: where it runs,
// its phase, conditions (unschedulable, ready), how its containers ended,
// and deletion. Finalizers (the Job controller's, the log capture's) and the
// kubelet's other reports do not.
func podChangeMatters(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*corev1.Pod)
	n, okNew := e.ObjectNew.(*corev1.Pod)
	if !okOld || !okNew {
		return true
	}
	return o.Spec.NodeName != n.Spec.NodeName || o.Status.Phase != n.Status.Phase || deletionChanged(o, n) ||
		!slices.EqualFunc(o.Status.Conditions, n.Status.Conditions, func(a, b corev1.PodCondition) bool {
			return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
		}) ||
		!slices.EqualFunc(o.Status.ContainerStatuses, n.Status.ContainerStatuses, sameContainerEnd)
}

// sameContainerEnd compares what a container's status says of how it ended.
func sameContainerEnd(a, b corev1.ContainerStatus) bool {
	code := func(t *corev1.ContainerStateTerminated) int32 {
		if t == nil {
			return -1
		}
		return t.ExitCode
	}
	return a.Name == b.Name && a.RestartCount == b.RestartCount &&
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
	var plans v1beta1.UpgradePlanList
	// Read-only: a plan of a large cluster is big to copy on every event.
	if err := r.Client.List(ctx, &plans, client.UnsafeDisableDeepCopy); err != nil {
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

package sim

import (
	"context"
	"fmt"
	"reflect"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// What kube-controller-manager would do for workloads, which envtest lacks:
// a Deployment becomes available (with no pods, after Timing.DeploymentReady)
// and reports it in its status; a Service gets an EndpointSlice with one
// ready endpoint per available replica of the Deployments it selects.

func (s *Sim) setupWorkloads(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-deployment").
		For(&appsv1.Deployment{}).
		Complete(reconcile.Func(s.reconcileDeployment)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-endpointslice").
		For(&corev1.Service{}).
		Owns(&discoveryv1.EndpointSlice{}).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(s.servicesOfDeployment)).
		Complete(reconcile.Func(s.reconcileEndpoints))
}

func (s *Sim) reconcileDeployment(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	d := &appsv1.Deployment{}
	if err := s.c.Get(ctx, req.NamespacedName, d); err != nil || d.DeletionTimestamp != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	replicas := ptr.Deref(d.Spec.Replicas, 1)
	wait := s.steps.remaining("deployment/"+string(d.UID)+"/"+fmt.Sprint(d.Generation), s.cfg.Timing.DeploymentReady)
	want := deploymentStatus(d, replicas, wait == 0)
	if deploymentStatusEqual(d.Status, want) {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	d.Status = want
	return reconcile.Result{RequeueAfter: wait}, s.c.Status().Update(ctx, d)
}

// deploymentStatus is the status the Deployment controller reports for a
// rollout that is under way or complete.
func deploymentStatus(d *appsv1.Deployment, replicas int32, available bool) appsv1.DeploymentStatus {
	now := metav1.Now()
	rs := fmt.Sprintf("%s-%s", d.Name, string(d.UID)[:8])
	st := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: replicas, UpdatedReplicas: replicas}
	cond := func(t appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason, message string) appsv1.DeploymentCondition {
		c := appsv1.DeploymentCondition{Type: t, Status: status, Reason: reason, Message: message, LastUpdateTime: now, LastTransitionTime: now}
		for _, old := range d.Status.Conditions {
			if old.Type == t && old.Status == status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	if !available {
		st.UnavailableReplicas = replicas
		st.Conditions = []appsv1.DeploymentCondition{
			cond(appsv1.DeploymentAvailable, corev1.ConditionFalse, "MinimumReplicasUnavailable", "Deployment does not have minimum availability."),
			cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "ReplicaSetUpdated", fmt.Sprintf("ReplicaSet %q is progressing.", rs)),
		}
		return st
	}
	st.ReadyReplicas, st.AvailableReplicas = replicas, replicas
	st.Conditions = []appsv1.DeploymentCondition{
		cond(appsv1.DeploymentAvailable, corev1.ConditionTrue, "MinimumReplicasAvailable", "Deployment has minimum availability."),
		cond(appsv1.DeploymentProgressing, corev1.ConditionTrue, "NewReplicaSetAvailable", fmt.Sprintf("ReplicaSet %q has successfully progressed.", rs)),
	}
	return st
}

// deploymentStatusEqual compares statuses ignoring condition timestamps.
func deploymentStatusEqual(a, b appsv1.DeploymentStatus) bool {
	strip := func(st appsv1.DeploymentStatus) appsv1.DeploymentStatus {
		st = *st.DeepCopy()
		for i := range st.Conditions {
			st.Conditions[i].LastUpdateTime, st.Conditions[i].LastTransitionTime = metav1.Time{}, metav1.Time{}
		}
		return st
	}
	return reflect.DeepEqual(strip(a), strip(b))
}

// servicesOfDeployment maps a Deployment to the Services selecting its pods.
func (s *Sim) servicesOfDeployment(ctx context.Context, o client.Object) []reconcile.Request {
	d := o.(*appsv1.Deployment)
	var svcs corev1.ServiceList
	if err := s.c.List(ctx, &svcs, client.InNamespace(d.Namespace)); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range svcs.Items {
		sel := svcs.Items[i].Spec.Selector
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&svcs.Items[i])})
		}
	}
	return reqs
}

func (s *Sim) reconcileEndpoints(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	svc := &corev1.Service{}
	err := s.c.Get(ctx, req.NamespacedName, svc)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	existing, lerr := s.serviceSlices(ctx, req.NamespacedName)
	if lerr != nil {
		return reconcile.Result{}, lerr
	}
	if apierrors.IsNotFound(err) || svc.DeletionTimestamp != nil {
		// The garbage collector would delete the Service's slices.
		for i := range existing {
			if err := s.c.Delete(ctx, &existing[i]); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{}, nil
	}
	if len(svc.Spec.Selector) == 0 || (svc.Namespace == "default" && svc.Name == "kubernetes") {
		return reconcile.Result{}, nil
	}
	var deps appsv1.DeploymentList
	if err := s.c.List(ctx, &deps, client.InNamespace(svc.Namespace)); err != nil {
		return reconcile.Result{}, err
	}
	ready := 0
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	for _, d := range deps.Items {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			ready += int(d.Status.AvailableReplicas)
		}
	}
	want := endpointSlice(svc, ready)
	if len(existing) == 0 {
		return reconcile.Result{}, client.IgnoreAlreadyExists(s.c.Create(ctx, want))
	}
	have := &existing[0]
	if reflect.DeepEqual(have.Endpoints, want.Endpoints) && reflect.DeepEqual(have.Ports, want.Ports) {
		return reconcile.Result{}, nil
	}
	have.Endpoints, have.Ports = want.Endpoints, want.Ports
	return reconcile.Result{}, s.c.Update(ctx, have)
}

func (s *Sim) serviceSlices(ctx context.Context, svc types.NamespacedName) ([]discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	err := s.c.List(ctx, &list, client.InNamespace(svc.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: svc.Name, labelEndpointSliceManagedBy: endpointSliceController,
	})
	return list.Items, err
}

// endpointSlice is the slice the EndpointSlice controller keeps for a
// Service with n ready pods (addresses are stand-ins, never dialled).
func endpointSlice(svc *corev1.Service, n int) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			// Named after the Service's UID rather than generated, so that a
			// stale cache cannot make a second slice.
			Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%s", svc.Name, string(svc.UID)[:5]),
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, labelEndpointSliceManagedBy: endpointSliceController},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, p := range svc.Spec.Ports {
		port := p.Port
		if p.TargetPort.IntVal != 0 {
			port = p.TargetPort.IntVal
		}
		es.Ports = append(es.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Port: ptr.To(port), Protocol: ptr.To(p.Protocol)})
	}
	for i := 0; i < n; i++ {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.52.%d.%d", i/250, i%250+2)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		})
	}
	return es
}

// serviceReady reports whether the Service exists and has a ready endpoint.
func (s *Sim) serviceReady(ctx context.Context, svc types.NamespacedName) bool {
	if err := s.c.Get(ctx, svc, &corev1.Service{}); err != nil {
		return false
	}
	existing, err := s.serviceSlices(ctx, svc)
	if err != nil {
		return false
	}
	for _, es := range existing {
		for _, ep := range es.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, false) {
				return true
			}
		}
	}
	return false
}

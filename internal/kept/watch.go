package kept

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Marking marks kind k changed for the kept lists on every event of it,
// then hands the events that preds keep to h. Marking first, in the same
// handler, makes the pass an event asks for read the kind's changes; the
// events preds drop (an acknowledgement, a heartbeat) change what the next
// pass reads without asking for a pass.
func (r *Lists) Marking(k Kind, h handler.EventHandler, preds ...predicate.Predicate) handler.EventHandler {
	return r.marking(k, false, h, preds)
}

// MarkingKept is Marking for a kind whose passes read only what preds
// compare (NodeUpdates, JobUpdates): the events they drop (a node's
// heartbeat, the Job controller's bookkeeping) neither ask for a pass nor
// make the next one read the kind again.
func (r *Lists) MarkingKept(k Kind, h handler.EventHandler, preds ...predicate.Predicate) handler.EventHandler {
	return r.marking(k, true, h, preds)
}

// NodeUpdates keeps the Node updates a plan decides on (NodeChangeMatters).
var NodeUpdates = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*corev1.Node)
	n, okNew := e.ObjectNew.(*corev1.Node)
	return !okOld || !okNew || NodeChangeMatters(o, n)
}}

// JobUpdates keeps the Job updates a plan decides on (JobChangeMatters).
var JobUpdates = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*batchv1.Job)
	n, okNew := e.ObjectNew.(*batchv1.Job)
	return !okOld || !okNew || JobChangeMatters(o, n)
}}

func (r *Lists) marking(k Kind, keptOnly bool, h handler.EventHandler, preds []predicate.Predicate) handler.EventHandler {
	return handler.Funcs{
		CreateFunc:  markThen(r, k, keptOnly, preds, predicate.Predicate.Create, func(e event.CreateEvent) client.Object { return e.Object }, h.Create),
		UpdateFunc:  markThen(r, k, keptOnly, preds, predicate.Predicate.Update, func(e event.UpdateEvent) client.Object { return e.ObjectNew }, h.Update),
		DeleteFunc:  markThen(r, k, keptOnly, preds, predicate.Predicate.Delete, func(e event.DeleteEvent) client.Object { return e.Object }, h.Delete),
		GenericFunc: markThen(r, k, keptOnly, preds, predicate.Predicate.Generic, func(e event.GenericEvent) client.Object { return e.Object }, h.Generic),
	}
}

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// markThen is marking's handling of one type of event E, whose object
// objectOf names.
func markThen[E any](r *Lists, k Kind, keptOnly bool, preds []predicate.Predicate, keeps func(predicate.Predicate, E) bool,
	objectOf func(E) client.Object, h func(context.Context, E, requestQueue)) func(context.Context, E, requestQueue) {
	return func(ctx context.Context, e E, q requestQueue) {
		if !keptOnly {
			r.Changed(k, client.ObjectKeyFromObject(objectOf(e)))
		}
		for _, p := range preds {
			if !keeps(p, e) {
				return
			}
		}
		if keptOnly {
			r.Changed(k, client.ObjectKeyFromObject(objectOf(e)))
		}
		h(ctx, e, q)
	}
}

package sim

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
)

// The simulated Longhorn degrades a volume while the node of one of its
// replicas is down, and heals it once every replica node has been back for
// Timing.ReplicaRebuild (the replica on the returning node is rebuilt).

func (s *Sim) setupLonghorn(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-longhorn").
		For(&longhornv1beta2.Volume{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(s.volumesOnNode)).
		Complete(reconcile.Func(s.reconcileVolume))
}

func replicaNodes(v *longhornv1beta2.Volume) []string {
	if v.Annotations[annotationReplicaNodes] == "" {
		return nil
	}
	return strings.Split(v.Annotations[annotationReplicaNodes], ",")
}

func (s *Sim) volumesOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var vols longhornv1beta2.VolumeList
	if err := s.c.List(ctx, &vols); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range vols.Items {
		if slices.Contains(replicaNodes(&vols.Items[i]), o.GetName()) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vols.Items[i])})
		}
	}
	return reqs
}

func (s *Sim) reconcileVolume(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	v := &longhornv1beta2.Volume{}
	if err := s.c.Get(ctx, req.NamespacedName, v); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	want, wait := robustnessHealthy, time.Duration(0)
	for _, name := range replicaNodes(v) {
		n := &corev1.Node{}
		if err := s.c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil || !cluster.NodeReady(n) {
			want, wait = robustnessDegraded, 0
			break
		}
		if v.Status.Robustness != robustnessDegraded {
			continue
		}
		// A degraded volume heals once its replicas are rebuilt.
		if left := time.Until(readySince(n).Add(s.cfg.Timing.ReplicaRebuild)); left > 0 {
			want, wait = robustnessDegraded, max(wait, left)
		}
	}
	if v.Status.Robustness == want {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	v.Status.Robustness = want
	return reconcile.Result{RequeueAfter: wait}, s.c.Status().Update(ctx, v)
}

func readySince(n *corev1.Node) time.Time {
	if c := cluster.ReadyCondition(n); c != nil {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

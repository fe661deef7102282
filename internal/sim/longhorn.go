package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
)

// The simulated Longhorn keeps each volume's Replicas, one per node it is
// placed on, and its Engine on the volume's node, which reports each
// replica's mode as Longhorn's engine does (status.replicaModeMap, with the
// time of each change in status.replicaTransitionTimeMap): a replica whose
// node is down is ERR (the replica's state unknown); back on a Ready node it
// is rebuilt, WO for Timing.ReplicaRebuild, then RW. The volume is degraded
// while any of its replicas is not RW.

func (s *Sim) setupLonghorn(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-longhorn").
		For(&longhornv1beta2.Volume{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(s.volumesOnNode), builder.WithPredicates(readinessChanged)).
		Complete(reconcile.Func(s.reconcileVolume))
}

// readinessChanged keeps the node updates the replicas follow: a node going
// down or coming back. Its status reports and labels change nothing here.
var readinessChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*corev1.Node)
	n, okN := e.ObjectNew.(*corev1.Node)
	return !okO || !okN || cluster.NodeReady(o) != cluster.NodeReady(n) || !readySince(o).Equal(readySince(n))
}}

// replicaName names a volume's replica on a node as Longhorn does
// (<volume>-r-<8 hex digits>), the digits derived from the node so that
// the name is the same whenever it is computed.
func replicaName(volume, node string) string {
	sum := sha256.Sum256([]byte(volume + "/" + node))
	return volume + "-r-" + hex.EncodeToString(sum[:4])
}

// engineName names a volume's first engine as Longhorn does.
func engineName(volume string) string { return volume + "-e-0" }

func (s *Sim) volumesOnNode(ctx context.Context, o client.Object) []reconcile.Request {
	var replicas longhornv1beta2.ReplicaList
	if err := s.c.List(ctx, &replicas, client.InNamespace(cluster.LonghornNamespace), client.MatchingLabels{labelLonghornNode: o.GetName()}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	seen := map[string]bool{}
	for _, r := range replicas.Items {
		if !seen[r.Spec.VolumeName] {
			seen[r.Spec.VolumeName] = true
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: r.Namespace, Name: r.Spec.VolumeName}})
		}
	}
	return reqs
}

// reconcileVolume brings a volume's replicas, its engine's replica modes and
// its robustness up to date with its replicas' nodes, writing only what
// changed, and comes back when a rebuild ends.
func (s *Sim) reconcileVolume(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	v := &longhornv1beta2.Volume{}
	e := &longhornv1beta2.Engine{}
	if err := s.c.Get(ctx, req.NamespacedName, v); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: engineName(v.Name)}, e); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var replicas longhornv1beta2.ReplicaList
	if err := s.c.List(ctx, &replicas, client.InNamespace(v.Namespace), client.MatchingLabels{labelLonghornVolume: v.Name}); err != nil {
		return reconcile.Result{}, err
	}
	now := time.Now()
	modes, since := map[string]string{}, map[string]string{}
	robustness, wait := robustnessHealthy, time.Duration(0)
	for i := range replicas.Items {
		r := &replicas.Items[i]
		n := &corev1.Node{}
		ready := s.c.Get(ctx, client.ObjectKey{Name: r.Spec.NodeID}, n) == nil && cluster.NodeReady(n)
		prev, changed := e.Status.ReplicaModeMap[r.Name], e.Status.ReplicaTransitionTimeMap[r.Name]
		mode, left := s.replicaMode(prev, changed, ready, now)
		modes[r.Name], since[r.Name] = mode, changed
		if mode != prev {
			since[r.Name] = now.UTC().Format(time.RFC3339)
		}
		if mode != replicaModeRW {
			robustness = robustnessDegraded
		}
		if left > 0 && (wait == 0 || left < wait) {
			wait = left
		}
		state := instanceRunning
		if !ready {
			state = instanceUnknown
		}
		if r.Status.CurrentState != state {
			r.Status.CurrentState = state
			if err := s.c.Status().Update(ctx, r); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	if !maps.Equal(modes, e.Status.ReplicaModeMap) {
		e.Status.ReplicaModeMap, e.Status.ReplicaTransitionTimeMap = modes, since
		if err := s.c.Status().Update(ctx, e); err != nil {
			return reconcile.Result{}, err
		}
	}
	if v.Status.Robustness != robustness {
		v.Status.Robustness = robustness
		if err := s.c.Status().Update(ctx, v); err != nil {
			return reconcile.Result{}, err
		}
	}
	return reconcile.Result{RequeueAfter: wait}, nil
}

// replicaMode is the mode a replica's engine reports now, given the mode it
// reported before and since when (RFC 3339), and how long until the replica's
// rebuild ends. A replica is rebuilt once its node is back (or when it was
// new to the engine); a rebuild that takes no time leaves no WO behind.
func (s *Sim) replicaMode(prev, since string, nodeReady bool, now time.Time) (string, time.Duration) {
	rebuild := s.cfg.Timing.ReplicaRebuild
	switch {
	case !nodeReady:
		return replicaModeERR, 0
	case prev == replicaModeRW:
		return replicaModeRW, 0
	case prev == replicaModeWO:
		began, err := time.Parse(time.RFC3339, since)
		if err != nil {
			began = now
		}
		if left := began.Add(rebuild).Sub(now); left > 0 {
			return replicaModeWO, left
		}
		return replicaModeRW, 0
	case rebuild > 0:
		return replicaModeWO, rebuild
	default:
		return replicaModeRW, 0
	}
}

func readySince(n *corev1.Node) time.Time {
	if c := cluster.ReadyCondition(n); c != nil {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

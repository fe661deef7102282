package sim

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// The node agent plays each node's reboot: the kubelet stops posting status
// (the node-lifecycle controller marks it Ready=Unknown and taints it
// unreachable), then the node comes back Ready with the new OS image and
// kubelet version.

const taintUnreachable = corev1.TaintNodeUnreachable

func (s *Sim) setupNodeAgent(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-node-agent").
		For(&corev1.Node{}).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return nodeRequest(o.GetLabels()[v1beta1.LabelNode])
		})).
		Complete(reconcile.Func(s.reconcileNodeAgent))
}

func (s *Sim) reconcileNodeAgent(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := &corev1.Node{}
	if err := s.c.Get(ctx, req.NamespacedName, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	raw := node.Annotations[annotationReboot]
	if raw == "" {
		return reconcile.Result{}, nil
	}
	var r reboot
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		s.log.Error(err, "dropping an unreadable reboot request", "node", node.Name)
		return reconcile.Result{}, s.setReboot(ctx, node.Name, nil)
	}
	if r.Since == nil {
		done, err := s.jobComplete(ctx, r.Job)
		if err != nil || !done {
			return reconcile.Result{}, err
		}
		if err := s.setNodeDown(ctx, node.Name); err != nil {
			return reconcile.Result{}, err
		}
		r.Since = ptr.To(metav1.Now())
		if err := s.setReboot(ctx, node.Name, &r); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: s.cfg.Timing.Reboot}, nil
	}
	if s.faults.neverReturns(node.Name) {
		// Look again later: a test may lift the fault.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	if left := time.Until(r.Since.Add(s.cfg.Timing.Reboot)); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	osImage := r.OSImage
	if s.faults.fallsBack(node.Name) {
		// The bootloader's fallback entry: the OS the node ran before.
		osImage = node.Status.NodeInfo.OSImage
	}
	if err := s.setNodeUp(ctx, node.Name, osImage, r.KubeletVersion); err != nil {
		return reconcile.Result{}, err
	}
	s.log.V(1).Info("node rebooted", "node", node.Name, "osImage", osImage)
	return reconcile.Result{}, s.setReboot(ctx, node.Name, nil)
}

// jobComplete reports whether the Job namespace/name has completed. A Job
// that is gone never will.
func (s *Sim) jobComplete(ctx context.Context, key string) (bool, error) {
	ns, name, _ := strings.Cut(key, "/")
	job := &batchv1.Job{}
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, job); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return jobCondition(job, batchv1.JobComplete), nil
}

func (s *Sim) setReboot(ctx context.Context, node string, r *reboot) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	err := s.mutate(ctx, n, false, func() bool {
		if r == nil {
			_, had := n.Annotations[annotationReboot]
			delete(n.Annotations, annotationReboot)
			return had
		}
		b, _ := json.Marshal(r)
		n.Annotations[annotationReboot] = string(b)
		return true
	})
	return client.IgnoreNotFound(err)
}

// setNodeDown is what the node-lifecycle controller does when a kubelet stops
// posting status.
func (s *Sim) setNodeDown(ctx context.Context, node string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := s.mutate(ctx, n, true, func() bool {
		return setReady(n, corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status.")
	}); err != nil {
		return err
	}
	return s.mutate(ctx, n, false, func() bool {
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taintUnreachable }) {
			return false
		}
		now := metav1.Now()
		n.Spec.Taints = append(n.Spec.Taints,
			corev1.Taint{Key: taintUnreachable, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now},
			corev1.Taint{Key: taintUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: &now})
		return true
	})
}

// setNodeUp is the kubelet of a rebooted node posting status again.
func (s *Sim) setNodeUp(ctx context.Context, node, osImage, kubelet string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := s.mutate(ctx, n, false, func() bool {
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == taintUnreachable || t.Key == corev1.TaintNodeNotReady
		})
		return len(n.Spec.Taints) != before
	}); err != nil {
		return err
	}
	return s.mutate(ctx, n, true, func() bool {
		setReady(n, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")
		n.Status.NodeInfo.OSImage = osImage
		n.Status.NodeInfo.KubeletVersion = kubelet
		n.Status.NodeInfo.BootID = newBootID()
		return true
	})
}

// setReady sets the node's Ready condition and reports whether it changed.
func setReady(n *corev1.Node, status corev1.ConditionStatus, reason, message string) bool {
	cond := readyCondition(status, reason, message)
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == status && c.Reason == reason {
			return false
		}
		*c = cond
		return true
	}
	n.Status.Conditions = append(n.Status.Conditions, cond)
	return true
}

package sim

import (
	"context"
	"encoding/json"
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
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// The node agent plays each node's reboot, the part of a node kwok cannot:
// the machine powers off (kwok stops running the node: no more Lease
// renewals, status reports or pods, so the real node-lifecycle controller
// marks it NotReady and taints it), and after the reboot time it powers on
// with the new OS image, kubelet version and boot ID, which kwok, running the
// node again, reports Ready with.
//
// LabelPower is how the world tells kwok which nodes run: kwok manages the
// nodes labelled KwokNodes (testenv.KwokOptions.ManageNodes).
const (
	LabelPower = "sim.upgrade-toolkit.harvesterhci.io/power"
	powerOn    = "on"
	powerOff   = "off"
	// KwokNodes selects the nodes that are powered on.
	KwokNodes = LabelPower + "=" + powerOn
)

// WorldOptions is what must run beside the API server of a simulated
// cluster: the real kube-controller-manager and kube-scheduler, and kwok for
// the powered-on nodes.
func WorldOptions() testenv.Options {
	return testenv.Options{Controllers: true, Kwok: &testenv.KwokOptions{ManageNodes: KwokNodes, PullImages: true}}
}

// nodeAgentName names the node agent's controller.
const nodeAgentName = "sim-node-agent"

func (s *Sim) setupNodeAgent(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(nodeAgentName).
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
	if since, down := node.Annotations[annotationOutage]; down && node.Annotations[annotationReboot] == "" {
		return s.endOutage(ctx, node, since)
	}
	if node.Annotations[annotationReboot] == "" {
		return reconcile.Result{}, nil
	}
	// A reboot is under way: what the node did last must be read from the
	// API server, since the cache may not show yet that it powered on and
	// cleared its request, and a node boots once per reboot.
	if err := s.reader.Get(ctx, req.NamespacedName, node); err != nil {
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
		ns, name, _ := cutKey(r.Job)
		done, err := s.jobComplete(ctx, types.NamespacedName{Namespace: ns, Name: name})
		if err != nil || !done {
			return reconcile.Result{}, err
		}
		if err := s.powerOff(ctx, node.Name); err != nil {
			return reconcile.Result{}, err
		}
		for _, other := range s.faults.outagesDuring(node.Name) {
			if err := s.startOutage(ctx, other); err != nil {
				return reconcile.Result{}, err
			}
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
	if err := s.powerOn(ctx, node.Name, osImage, r.KubeletVersion); err != nil {
		return reconcile.Result{}, err
	}
	s.log.V(1).Info("node rebooted", "node", node.Name, "osImage", osImage)
	return reconcile.Result{}, s.setReboot(ctx, node.Name, nil)
}

// annotationOutage marks a node down for an outage (FaultSet.Outages) with
// the time it went down.
const annotationOutage = "sim.upgrade-toolkit.harvesterhci.io/outage"

// startOutage powers a node off for an outage, once.
func (s *Sim) startOutage(ctx context.Context, node string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	err := s.mutate(ctx, n, false, func() bool {
		if _, down := n.Annotations[annotationOutage]; down {
			return false
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[annotationOutage] = time.Now().UTC().Format(time.RFC3339Nano)
		return true
	})
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	s.log.V(1).Info("node down for an outage", "node", node)
	return s.powerOff(ctx, node)
}

// endOutage boots a node whose outage is over on the OS it ran.
func (s *Sim) endOutage(ctx context.Context, node *corev1.Node, since string) (reconcile.Result, error) {
	at, err := time.Parse(time.RFC3339Nano, since)
	if err != nil {
		at = time.Now()
	}
	if left := s.faults.outageLeft(node.Name, at); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	if err := s.powerOn(ctx, node.Name, node.Status.NodeInfo.OSImage, node.Status.NodeInfo.KubeletVersion); err != nil {
		return reconcile.Result{}, err
	}
	s.log.V(1).Info("node back from an outage", "node", node.Name)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}
	return reconcile.Result{}, client.IgnoreNotFound(s.mutate(ctx, n, false, func() bool {
		_, had := n.Annotations[annotationOutage]
		delete(n.Annotations, annotationOutage)
		return had
	}))
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

// powerOff takes the node from kwok, and reports it NotReady as a kubelet
// does when the node shuts down (graceful node shutdown); the real
// node-lifecycle controller taints it.
func (s *Sim) powerOff(ctx context.Context, node string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := s.setPower(ctx, n, powerOff); err != nil {
		return err
	}
	return s.mutate(ctx, n, true, func() bool {
		return setReady(n, corev1.ConditionFalse, "KubeletNotReady", "node is shutting down")
	})
}

// powerOn boots the node into osImage and kubelet: it gets a new boot ID and
// kwok runs it again, which reports it Ready.
func (s *Sim) powerOn(ctx context.Context, node, osImage, kubelet string) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := s.mutate(ctx, n, true, func() bool {
		n.Status.NodeInfo.OSImage = osImage
		n.Status.NodeInfo.KubeletVersion = kubelet
		n.Status.NodeInfo.BootID = newBootID()
		return true
	}); err != nil {
		return err
	}
	return s.setPower(ctx, n, powerOn)
}

func (s *Sim) setPower(ctx context.Context, n *corev1.Node, power string) error {
	return s.mutate(ctx, n, false, func() bool {
		if n.Labels[LabelPower] == power {
			return false
		}
		n.Labels[LabelPower] = power
		return true
	})
}

// setReady sets the node's Ready condition and reports whether it changed.
func setReady(n *corev1.Node, status corev1.ConditionStatus, reason, message string) bool {
	cond := readyCondition(status, reason, message)
	c := cluster.ReadyCondition(n)
	switch {
	case c == nil:
		n.Status.Conditions = append(n.Status.Conditions, cond)
	case c.Status == status && c.Reason == reason:
		return false
	default:
		*c = cond
	}
	return true
}

package cluster

import corev1 "k8s.io/api/core/v1"

// ReadyCondition returns the node's Ready condition, or nil when its
// kubelet never reported one.
func ReadyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// NodeReady reports whether the node is Ready: its kubelet posts status and
// reports it healthy.
func NodeReady(n *corev1.Node) bool {
	c := ReadyCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue
}

// IsWitness reports whether the node is a witness node, which holds etcd
// but runs no workloads: it carries the witness label, whatever its value
// (the upgrade repo's node affinity, DoesNotExist, reads it the same way).
func IsWitness(n *corev1.Node) bool {
	_, witness := n.Labels[LabelWitnessNode]
	return witness
}

// HasDrainTaint reports whether the node has a kubevirt.io/drain NoSchedule
// taint, whatever its value: KubeVirt evacuates it.
func HasDrainTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == TaintKubeVirtDrain && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

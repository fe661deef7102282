package nodejob

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// drainTaint makes KubeVirt evacuate the node's VMs.
var drainTaint = corev1.Taint{Key: cluster.TaintKubeVirtDrain, Value: cluster.KubeVirtDrainTaintValue, Effect: corev1.TaintEffectNoSchedule}

func isDrainTaint(t corev1.Taint) bool {
	return t.Key == drainTaint.Key && t.Value == drainTaint.Value && t.Effect == drainTaint.Effect
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;patch

// updateNode changes the node with a merge patch guarded by its
// resourceVersion (taints are a list that other controllers write too).
func (j *Job) updateNode(ctx context.Context, change func(*corev1.Node) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := &corev1.Node{}
		if err := j.Client.Get(ctx, client.ObjectKey{Name: j.Node}, n); err != nil {
			return err
		}
		before := n.DeepCopy()
		if !change(n) {
			return nil
		}
		return j.Client.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
}

// taintNode taints the node kubevirt.io/drain=draining:NoSchedule, which
// makes KubeVirt live-migrate its VMs away. A node that has a
// kubevirt.io/drain:NoSchedule taint already (Harvester's maintenance mode
// uses the value "scheduling") is being evacuated anyway, and a node can
// have only one taint per key and effect: it keeps its taint.
func (j *Job) taintNode(ctx context.Context, _ *state) error {
	err := j.updateNode(ctx, func(n *corev1.Node) bool {
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == drainTaint.Key && t.Effect == drainTaint.Effect }) {
			return false
		}
		n.Spec.Taints = append(n.Spec.Taints, drainTaint)
		return true
	})
	if err != nil {
		return fmt.Errorf("tainting node %s %s=%s:%s: %w", j.Node, drainTaint.Key, drainTaint.Value, drainTaint.Effect, err)
	}
	return nil
}

// untaintNode removes the drain taint of the pre-drain job; other
// kubevirt.io/drain taints (Harvester's maintenance mode) stay.
func (j *Job) untaintNode(ctx context.Context, _ *state) error {
	err := j.updateNode(ctx, func(n *corev1.Node) bool {
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, isDrainTaint)
		return len(n.Spec.Taints) != before
	})
	if err != nil {
		return fmt.Errorf("removing the taint %s=%s from node %s: %w", drainTaint.Key, drainTaint.Value, j.Node, err)
	}
	return nil
}

// waitKubelet waits until the node's kubelet runs the release's RKE2.
func (j *Job) waitKubelet(ctx context.Context, s *state) error {
	want := s.release.KubeletVersion()
	w := waitfor.Wait{
		What:     fmt.Sprintf("node %s to run RKE2 %s", j.Node, want),
		Timeout:  j.Timeouts.Kubelet,
		Interval: j.Timeouts.Interval,
		Hint:     "check rancher-system-agent and rke2 on the node (journalctl -u rancher-system-agent -u rke2-server -u rke2-agent)",
	}
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		n := &corev1.Node{}
		if err := j.Client.Get(ctx, client.ObjectKey{Name: j.Node}, n); err != nil {
			return false, "", err
		}
		got := n.Status.NodeInfo.KubeletVersion
		return got == want, "the kubelet reports " + got, nil
	})
}

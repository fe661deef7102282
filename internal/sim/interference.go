package sim

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
)

// What others do to the cluster while it upgrades, as Harvester's users
// have reported it: another controller or a person cordons a node, removes
// the drain taint, starts Harvester's own upgrade, or guards a pod with a
// budget that allows no disruption. Each writes as the manager named, so
// that the objects' managed fields say who did it.

// Cordon marks the node unschedulable, writing as manager (e.g.
// "kubectl-cordon").
func (s *Sim) Cordon(ctx context.Context, node, manager string, cordoned bool) error {
	return s.patchNode(ctx, node, manager, func(n *corev1.Node) {
		n.Spec.Unschedulable = cordoned
		// The world's own mark, for the Checker: this cordon is not the
		// upgrade's.
		if cordoned {
			metav1.SetMetaDataAnnotation(&n.ObjectMeta, annotationCordonedByOther, manager)
		} else {
			delete(n.Annotations, annotationCordonedByOther)
		}
	})
}

// annotationCordonedByOther marks a node Cordon cordoned, for the
// Checker's RuleOneNodeCordoned, which counts only the upgrade's cordons.
const annotationCordonedByOther = "sim.upgrade-toolkit/cordoned-by"

// RemoveDrainTaint removes every kubevirt.io/drain taint of the node,
// writing as manager.
func (s *Sim) RemoveDrainTaint(ctx context.Context, node, manager string) error {
	return s.patchNode(ctx, node, manager, func(n *corev1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cluster.TaintKubeVirtDrain })
	})
}

func (s *Sim) patchNode(ctx context.Context, name, manager string, change func(*corev1.Node)) error {
	n := &corev1.Node{}
	if err := s.c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return err
	}
	before := n.DeepCopy()
	change(n)
	if err := s.c.Patch(ctx, n, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(manager)); err != nil {
		return fmt.Errorf("changing node %s as %s: %w", name, manager, err)
	}
	return nil
}

// StartV1Upgrade creates a Harvester Upgrade (the built-in V1 upgrade) to
// version, which has not finished.
func (s *Sim) StartV1Upgrade(ctx context.Context, name, version string) (*harvesterv1beta1.Upgrade, error) {
	u := &harvesterv1beta1.Upgrade{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: name},
		Spec:       harvesterv1beta1.UpgradeSpec{Version: version},
	}
	return u, s.c.Create(ctx, u, client.FieldOwner("harvester"))
}

// ProtectPod runs a pod on the node that no controller manages, guarded by
// a PodDisruptionBudget with minAvailable 1 that selects only it: the
// budget allows no disruption, so the API server refuses its eviction.
func (s *Sim) ProtectPod(ctx context.Context, namespace, name, node string) (*corev1.Pod, *policyv1.PodDisruptionBudget, error) {
	labels := map[string]string{"app": name}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: GuardedImage}}},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	for _, o := range []client.Object{pod, pdb} {
		if err := s.c.Create(ctx, o); err != nil {
			return nil, nil, fmt.Errorf("creating %s/%s: %w", namespace, o.GetName(), err)
		}
	}
	return pod, pdb, nil
}

// GuardedImage is the image of ProtectPod's pod; a scenario gives its
// nodes the image (Config.NodeImages), as a pod that ran before the upgrade
// pulled it.
const GuardedImage = "registry.suse.com/bci/bci-base:15.6"

package kept

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// ManagedNodes lists the nodes Harvester manages, sorted by name so that
// messages built from them do not change from one pass to the next. The
// nodes are the cache's own: read them, never change them. The slice is
// kept for the passes that follow and brought up to date with the Nodes
// that change in a way NodeChangeMatters keeps: nothing may change it or
// keep it beyond its pass, and nothing may read in it what
// NodeChangeMatters does not compare.
func (r *Lists) ManagedNodes(ctx context.Context, c client.Reader) ([]corev1.Node, error) {
	return updating(r, "managed-nodes", KindNodes,
		func() ([]corev1.Node, error) { return listManagedNodes(ctx, c) },
		func(nodes []corev1.Node, changed []client.ObjectKey) ([]corev1.Node, error) {
			return updateManagedNodes(ctx, c, nodes, changed)
		})
}

// updateManagedNodes reads again the nodes named in changed, keeping the
// slice sorted.
func updateManagedNodes(ctx context.Context, c client.Reader, nodes []corev1.Node, changed []client.ObjectKey) ([]corev1.Node, error) {
	for _, key := range changed {
		var n corev1.Node
		found, err := get(ctx, c, key, &n)
		if err != nil {
			return nil, fmt.Errorf("reading node %s: %w", key.Name, err)
		}
		i, listed := slices.BinarySearchFunc(nodes, key.Name, func(n corev1.Node, name string) int { return strings.Compare(n.Name, name) })
		switch managed := found && n.Labels[cluster.LabelManagedNode] == "true"; {
		case managed && listed:
			nodes[i] = n
		case managed:
			nodes = slices.Insert(nodes, i, n)
		case listed:
			nodes = slices.Delete(nodes, i, i+1)
		}
	}
	return nodes, nil
}

// NodeChangeMatters reports whether a Node's update changes what a plan
// reads of it in ManagedNodes: readiness, the OS image, boot ID and kubelet
// version (a reboot, RKE2's upgrade), and labels (managed, witness,
// system-upgrade-controller's completion label). Cordons, taints,
// annotations and heartbeats do not.
func NodeChangeMatters(o, n *corev1.Node) bool {
	oi, ni := o.Status.NodeInfo, n.Status.NodeInfo
	return cluster.NodeReady(o) != cluster.NodeReady(n) || oi.OSImage != ni.OSImage || oi.BootID != ni.BootID ||
		oi.KubeletVersion != ni.KubeletVersion || !maps.Equal(o.Labels, n.Labels)
}

func listManagedNodes(ctx context.Context, c client.Reader) ([]corev1.Node, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.MatchingLabels{cluster.LabelManagedNode: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing managed nodes: %w", err)
	}
	// Sorted by name through their indexes: a Node is a large struct, and
	// swapping them whole cost more than the list on a large cluster.
	order := make([]int, len(nodes.Items))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(nodes.Items[a].Name, nodes.Items[b].Name) })
	sorted := make([]corev1.Node, len(order))
	for i, j := range order {
		sorted[i] = nodes.Items[j]
	}
	return sorted, nil
}

// get reads an object as the cache holds it (read only); found is false when
// it does not exist.
func get(ctx context.Context, c client.Reader, key client.ObjectKey, obj client.Object) (found bool, err error) {
	err = c.Get(ctx, key, obj, client.UnsafeDisableDeepCopy)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

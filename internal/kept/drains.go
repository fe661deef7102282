package kept

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// DrainRequestsKey names what the passes keep of the machine-plan Secrets
// (for Forget).
const DrainRequestsKey = "drain-requests"

// DrainRequests is what Rancher's machine-plan Secrets say of the drains.
type DrainRequests struct {
	// secrets holds each node's machine-plan Secret.
	secrets map[string]client.Object
	// postDrainPending names machine-plan Secrets Rancher has not finished.
	postDrainPending []string
	// nodeOf names the node of each Machine, and nodeOfSecret the node of
	// each Secret in secrets.
	nodeOf, nodeOfSecret map[string]string
	// ambiguous: two Secrets claim one node, and which one a pass reads is
	// the list's to say.
	ambiguous bool
}

// ByNode returns the machine-plan Secret of each node, metadata only; none
// on a single-node cluster (nil d).
func (d *DrainRequests) ByNode() map[string]client.Object {
	if d == nil {
		return nil
	}
	return d.secrets
}

// PostDrainPending names, sorted, the machine-plan Secrets whose post-drain
// Rancher has not finished.
func (d *DrainRequests) PostDrainPending() []string {
	if d == nil {
		return nil
	}
	return d.postDrainPending
}

// DrainRequests keeps what the machine-plan Secrets say from one pass to
// the next, reading again only the Secrets that changed; a change of a
// Machine (which names its node) reads them all.
func (r *Lists) DrainRequests(ctx context.Context, c client.Reader) (*DrainRequests, error) {
	return updating(r, DrainRequestsKey, KindMachinePlans,
		func() (*DrainRequests, error) { return listDrainRequests(ctx, c) },
		func(d *DrainRequests, changed []client.ObjectKey) (*DrainRequests, error) {
			return d.update(ctx, c, changed)
		},
		KindMachines)
}

// listDrainRequests reads the machine-plan Secrets and the Machines that
// name their nodes.
func listDrainRequests(ctx context.Context, c client.Reader) (*DrainRequests, error) {
	secrets, err := cluster.MachinePlans(ctx, c)
	if err != nil {
		return nil, err
	}
	nodeOf, err := cluster.NodesOfMachines(ctx, c)
	if err != nil {
		return nil, err
	}
	d := &DrainRequests{secrets: map[string]client.Object{}, nodeOf: nodeOf, nodeOfSecret: map[string]string{}}
	for i := range secrets {
		d.put(&secrets[i])
	}
	slices.Sort(d.postDrainPending)
	return d, nil
}

// put records a machine-plan Secret; the caller sorts postDrainPending.
func (d *DrainRequests) put(sec *metav1.PartialObjectMetadata) {
	if !cluster.IsMachinePlan(sec) {
		return
	}
	if sec.Annotations[cluster.AnnotationRancherPostDrain] != "" {
		d.postDrainPending = append(d.postDrainPending, sec.Name)
	}
	if node := d.nodeOf[sec.Labels[cluster.LabelMachineName]]; node != "" {
		d.ambiguous = d.ambiguous || d.secrets[node] != nil
		d.secrets[node] = sec
		d.nodeOfSecret[sec.Name] = node
	} // else a Machine without a node has nothing for us to drain
}

// update reads again the machine-plan Secrets named in changed; when two
// Secrets claim one node, it lists them all. The pending list is a new
// slice: a pass may hold the old one.
func (d *DrainRequests) update(ctx context.Context, c client.Reader, changed []client.ObjectKey) (*DrainRequests, error) {
	pending := slices.Clone(d.postDrainPending)
	d.postDrainPending = nil // put appends the pending Secrets read again
	for _, key := range changed {
		if key.Namespace != cluster.FleetLocalNamespace {
			continue
		}
		sec := cluster.MachinePlan()
		found, err := get(ctx, c, key, sec)
		if err != nil {
			return nil, fmt.Errorf("reading machine-plan Secret %s: %w", key, err)
		}
		if node, ok := d.nodeOfSecret[key.Name]; ok {
			delete(d.secrets, node)
			delete(d.nodeOfSecret, key.Name)
		}
		pending = slices.DeleteFunc(pending, func(name string) bool { return name == key.Name })
		if found {
			d.put(sec)
		}
		if d.ambiguous {
			return listDrainRequests(ctx, c)
		}
	}
	pending = append(pending, d.postDrainPending...)
	slices.Sort(pending)
	d.postDrainPending = pending
	return d, nil
}

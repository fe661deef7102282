package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// LocalCluster reads the provisioning Cluster fleet-local/local.
func LocalCluster(ctx context.Context, c client.Reader, opts ...client.GetOption) (*provisioningv1.Cluster, error) {
	cl := &provisioningv1.Cluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: FleetLocalNamespace, Name: LocalClusterName}, cl, opts...); err != nil {
		return nil, fmt.Errorf("reading the provisioning Cluster %s/%s: %w", FleetLocalNamespace, LocalClusterName, err)
	}
	return cl, nil
}

// UpgradeStrategyJSON returns the cluster's upgrade strategy as JSON, nil
// when it has none.
func UpgradeStrategyJSON(cl *provisioningv1.Cluster) (*runtime.RawExtension, error) {
	if cl.Spec.RKEConfig == nil || cl.Spec.RKEConfig.UpgradeStrategy == nil {
		return nil, nil
	}
	raw, err := json.Marshal(cl.Spec.RKEConfig.UpgradeStrategy)
	if err != nil {
		return nil, err
	}
	return &runtime.RawExtension{Raw: raw}, nil
}

// hookedDrain drains a node with the toolkit's hooks around it.
func hookedDrain() provisioningv1.DrainOptions {
	return provisioningv1.DrainOptions{
		Enabled:            true,
		Force:              true,
		IgnoreDaemonSets:   ptr.To(true),
		DeleteEmptyDirData: true,
		PreDrainHooks:      []provisioningv1.DrainHook{{Annotation: v1beta1.AnnotationPreHook}},
		PostDrainHooks:     []provisioningv1.DrainHook{{Annotation: v1beta1.AnnotationPostHook}},
	}
}

// RollNodes makes Rancher upgrade RKE2 to version on every machine, one at a
// time, calling the toolkit's drain hooks around each: it sets the target
// version, the given provisionGeneration (recorded by the caller before this
// call, so that a retry sets the same value) and the upgrade strategy. It
// writes nothing when the Cluster already says so.
func RollNodes(ctx context.Context, c client.Client, version string, generation int64) error {
	// The cache's own object, read only and not copied unless it is to
	// change: the node upgrade asks on every pass, and the Cluster already
	// says so on all but the first.
	cl, err := LocalCluster(ctx, c, client.UnsafeDisableDeepCopy)
	if err != nil {
		return err
	}
	strategy := &provisioningv1.ClusterUpgradeStrategy{
		ControlPlaneConcurrency:  "1",
		WorkerConcurrency:        "1",
		ControlPlaneDrainOptions: hookedDrain(),
		WorkerDrainOptions:       hookedDrain(),
	}
	if rke := cl.Spec.RKEConfig; cl.Spec.KubernetesVersion == version && rke != nil && rke.ProvisionGeneration == generation &&
		equality.Semantic.DeepEqual(rke.UpgradeStrategy, strategy) {
		return nil
	}
	rolled := cl.DeepCopy()
	rolled.Spec.KubernetesVersion = version
	if rolled.Spec.RKEConfig == nil {
		rolled.Spec.RKEConfig = &provisioningv1.RKEConfig{}
	}
	rolled.Spec.RKEConfig.ProvisionGeneration = generation
	rolled.Spec.RKEConfig.UpgradeStrategy = strategy
	if err := c.Patch(ctx, rolled, client.MergeFrom(cl)); err != nil {
		return fmt.Errorf("patching the provisioning Cluster %s/%s to roll RKE2 %s: %w", FleetLocalNamespace, LocalClusterName, version, err)
	}
	return nil
}

// RestoreUpgradeStrategy puts back the upgrade strategy recorded before the
// upgrade (none when raw is nil), which removes the toolkit's drain hooks.
// The Kubernetes version stays: nodes already upgraded must not go back.
func RestoreUpgradeStrategy(ctx context.Context, c client.Client, raw *runtime.RawExtension) error {
	cl, err := LocalCluster(ctx, c)
	if err != nil {
		if absent(err) {
			return nil
		}
		return err
	}
	var op []map[string]any
	const path = "/spec/rkeConfig/upgradeStrategy"
	switch {
	case raw != nil && len(raw.Raw) > 0 && string(raw.Raw) != "null":
		if cl.Spec.RKEConfig == nil {
			op = []map[string]any{{"op": "add", "path": "/spec/rkeConfig", "value": map[string]any{"upgradeStrategy": json.RawMessage(raw.Raw)}}}
		} else {
			// "add" replaces the whole strategy, fields the reduced type
			// does not know included.
			op = []map[string]any{{"op": "add", "path": path, "value": json.RawMessage(raw.Raw)}}
		}
	case cl.Spec.RKEConfig != nil && cl.Spec.RKEConfig.UpgradeStrategy != nil:
		op = []map[string]any{{"op": "remove", "path": path}}
	default:
		return nil
	}
	body, err := json.Marshal(op)
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, cl, client.RawPatch(types.JSONPatchType, body)); err != nil && !absent(err) {
		return fmt.Errorf("restoring the upgrade strategy of the provisioning Cluster %s/%s: %w", FleetLocalNamespace, LocalClusterName, err)
	}
	return nil
}

// NodesOfMachines maps every CAPI Machine in fleet-local that has a node to
// the node's name, with one cached list instead of a read per Machine.
func NodesOfMachines(ctx context.Context, c client.Reader) (map[string]string, error) {
	var machines capiv1beta1.MachineList
	if err := c.List(ctx, &machines, client.InNamespace(FleetLocalNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the Machines of %s: %w", FleetLocalNamespace, err)
	}
	out := make(map[string]string, len(machines.Items))
	for _, m := range machines.Items {
		if m.Status.NodeRef != nil {
			out[m.Name] = m.Status.NodeRef.Name
		}
	}
	return out, nil
}

// NodeOfMachine returns the name of the node a CAPI Machine in fleet-local
// runs as, or "" when the Machine has no node yet.
func NodeOfMachine(ctx context.Context, c client.Reader, machine string) (string, error) {
	m := &capiv1beta1.Machine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: FleetLocalNamespace, Name: machine}, m); err != nil {
		if absent(err) {
			return "", nil // a deleted Machine has no node to drain
		}
		return "", fmt.Errorf("reading Machine %s/%s: %w", FleetLocalNamespace, machine, err)
	}
	if m.Status.NodeRef == nil {
		return "", nil
	}
	return m.Status.NodeRef.Name, nil
}

// The role labels Rancher puts on the CAPI Machines of an RKE2 cluster.
const (
	LabelMachineControlPlane = "rke.cattle.io/control-plane-role"
	LabelMachineEtcd         = "rke.cattle.io/etcd-role"
)

// MachineServesControlPlane reports whether the machine runs etcd or the
// control plane, which Rancher rolls out before the workers.
func MachineServesControlPlane(m *capiv1beta1.Machine) bool {
	return m.Labels[LabelMachineControlPlane] == "true" || m.Labels[LabelMachineEtcd] == "true"
}

// CompareRolloutOrder orders machines the way Rancher rolls a new RKE2
// version out to them, one at a time: etcd and control-plane machines
// first, then workers, each group by machine name. The toolkit does not
// pick the next node, Rancher does (by requesting its pre-drain hook); the
// upgrade preview and the simulated Rancher both order nodes with this.
func CompareRolloutOrder(a, b *capiv1beta1.Machine) int {
	ca, cb := MachineServesControlPlane(a), MachineServesControlPlane(b)
	switch {
	case ca && !cb:
		return -1
	case cb && !ca:
		return 1
	}
	return strings.Compare(a.Name, b.Name)
}

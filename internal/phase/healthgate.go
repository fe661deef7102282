package phase

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
)

// The health gate: before Rancher may drain the next node, the cluster must
// have recovered from the last one. Rancher drains one node at a time, but
// it moves on as soon as a node is back; a volume still rebuilding its
// replicas then loses another one.
//
// +kubebuilder:rbac:groups=longhorn.io,namespace=longhorn-system,resources=volumes,verbs=list;watch

// healthGate says what keeps the cluster from draining another node, empty
// when nothing does, sorted so that it reads the same on every pass: a node
// cordoned by someone else; the control plane not ready; in Strict mode
// also a Longhorn volume degraded or faulted (the toolkit does not see
// which nodes hold its replicas, so any such volume holds the next drain)
// and the VMs of an upgraded node still being restored. The nodes that are
// not Ready are the circuit breaker's (notReadyNodes, nodestate.Breaker).
func healthGate(ctx context.Context, s *Scope, nodes []corev1.Node, jobs map[string]*batchv1.Job) (string, error) {
	var why []string
	cordoned, err := cordonedNodes(ctx, s, nodes)
	if err != nil {
		return "", err
	}
	if len(cordoned) > 0 {
		why = append(why, "node "+list(cordoned)+" cordoned (kubectl uncordon it once it may run workloads again)")
	}
	if notReady, err := controlPlaneNotReady(ctx, s); err != nil {
		return "", err
	} else if notReady != "" {
		why = append(why, notReady)
	}
	if s.Plan.HealthGateMode() == v1beta1.HealthGateRelaxed {
		return strings.Join(why, "; "), nil
	}
	var volumes longhornv1beta2.VolumeList
	if err := s.Client.List(ctx, &volumes, client.InNamespace(cluster.LonghornNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("listing Longhorn volumes for the health gate: %w", err)
	}
	var unhealthy []string
	for _, v := range volumes.Items {
		if r := v.Status.Robustness; r == cluster.LonghornRobustnessDegraded || r == cluster.LonghornRobustnessFaulted {
			unhealthy = append(unhealthy, v.Name+" ("+r+")")
		}
	}
	slices.Sort(unhealthy)
	if len(unhealthy) > 0 {
		msg := fmt.Sprintf("Longhorn volume %s not healthy: replicas missing or rebuilding (kubectl get volumes.longhorn.io -n %s)", list(unhealthy), cluster.LonghornNamespace)
		if excluded := s.Plan.ExcludedNodes(); len(excluded) > 0 {
			msg += fmt.Sprintf("; node %s, excluded from the upgrade, is down: the volumes with a replica on it stay degraded until it is back "+
				"or Longhorn rebuilds the replica on another node. To drain the next node anyway, set spec.nodeUpgradeOption.healthGate to Relaxed, "+
				"knowing that each such volume then runs on one replica fewer during the drain", list(excluded))
		}
		why = append(why, msg)
	}
	var restoring []string
	for node, j := range jobs {
		if state, _, _ := JobOutcome(j); state != JobSucceeded && state != JobFailed {
			restoring = append(restoring, node)
		}
	}
	slices.Sort(restoring)
	if len(restoring) > 0 {
		why = append(why, "VMs still being restored on "+list(restoring))
	}
	return strings.Join(why, "; "), nil
}

// notReadyNodes are the managed nodes that are NotReady or unreachable,
// sorted; the nodes excluded from the upgrade are known lost and left out.
func (s *Scope) notReadyNodes(nodes []corev1.Node) []string {
	var out []string
	for i := range nodes {
		if !cluster.NodeReady(&nodes[i]) && s.nodeState(nodes[i].Name) != v1beta1.NodeStateExcluded {
			out = append(out, nodes[i].Name)
		}
	}
	slices.Sort(out)
	return out
}

// joinReasons joins what holds a node, leaving out the empty ones.
func joinReasons(reasons ...string) string {
	return strings.Join(slices.DeleteFunc(reasons, func(r string) bool { return r == "" }), "; ")
}

// controlPlaneNotReady asks the API server for its readiness (/readyz, which
// includes its etcd) and returns, when it is not ready, what failed. A
// request that fails altogether is an error: the reconcile is retried.
func controlPlaneNotReady(ctx context.Context, s *Scope) (string, error) {
	if s.Kube == nil {
		return "", nil
	}
	body, err := s.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "").DoRaw(ctx)
	if err == nil {
		return "", nil
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusInternalServerError {
		return "", fmt.Errorf("asking the API server whether it is ready: %w", err)
	}
	var failed []string
	for _, line := range strings.Split(string(body), "\n") {
		if check, ok := strings.CutPrefix(line, "[-]"); ok {
			failed = append(failed, strings.Fields(check)[0])
		}
	}
	if len(failed) == 0 {
		return "the API server is not ready", nil
	}
	return "the API server is not ready (failed: " + strings.Join(failed, ", ") + ")", nil
}

// holdAtHealthGate records when the health gate first held a node and
// returns, once the gate has held it past its deadline, the failure to end
// the plan with; otherwise the node's message gains since when it waits.
func (s *Scope) holdAtHealthGate(node, message string) (string, string) {
	st, ok := s.Plan.Status.NodeUpgradeStatuses[node]
	if st.HealthGateSince == nil && ok {
		now := metav1.NewTime(s.Now())
		st.HealthGateSince = &now
		s.putNode(node, st)
	}
	if st.HealthGateSince == nil {
		return message, ""
	}
	since := st.HealthGateSince.Time
	deadline := s.deadline(since, s.Config.Deadlines.HealthGate)
	if !s.Now().Before(deadline) {
		return message, fmt.Sprintf("node %s waited %s for the cluster to be healthy before its drain (%s): "+
			"fix what is named (bring the node back, let Longhorn rebuild or repair the volume, start the VMs) "+
			"and retry the plan; spec.nodeUpgradeOption.healthGate: Relaxed skips the volumes and the VM restores, at their risk", node, s.Config.Deadlines.HealthGate.Round(time.Second), strings.TrimPrefix(message, nodestate.HealthGatePrefix))
	}
	return fmt.Sprintf("%s (since %s; fails at %s)", message, timestamp(since), timestamp(deadline)), ""
}

// clearHealthGateSince forgets when the health gate first held a node.
func (s *Scope) clearHealthGateSince(node string) {
	if st, ok := s.Plan.Status.NodeUpgradeStatuses[node]; ok && st.HealthGateSince != nil {
		st.HealthGateSince = nil
		s.putNode(node, st)
	}
}

// cordonedNodes are the nodes cordoned by someone other than Rancher, which
// cordons the node it drains: draining another node now would leave the
// cluster two nodes short.
func cordonedNodes(ctx context.Context, s *Scope, nodes []corev1.Node) ([]string, error) {
	var out []string
	var rancher map[string]bool
	for i := range nodes {
		n := &nodes[i]
		if !n.Spec.Unschedulable || nodestate.InDrainSlot(s.Plan.Status.NodeUpgradeStatuses[n.Name].State) {
			continue
		}
		if rancher == nil {
			var err error
			if rancher, err = rancherDrains(ctx, s); err != nil {
				return nil, err
			}
		}
		if !rancher[n.Name] {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

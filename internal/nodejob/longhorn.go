package nodejob

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// UnhealthyVolumes returns, for each running Longhorn engine whose volume
// could not lose a replica now, what is wrong with it, sorted. With three
// or more workload nodes a volume must be healthy. With two or fewer it can
// never be (it cannot place three replicas), so it needs two replicas in
// sync instead (one for a single-replica volume).
func UnhealthyVolumes(engines []longhornv1beta2.Engine, volumes map[string]*longhornv1beta2.Volume, workloadNodes int) []string {
	var out []string
	for i := range engines {
		e := &engines[i]
		if e.Status.CurrentState != cluster.LonghornEngineRunning {
			continue
		}
		v := volumes[e.Spec.VolumeName]
		if v == nil {
			out = append(out, fmt.Sprintf("volume %s of engine %s not found", e.Spec.VolumeName, e.Name))
			continue
		}
		if workloadNodes > 2 {
			if v.Status.Robustness != cluster.LonghornRobustnessHealthy {
				out = append(out, fmt.Sprintf("volume %s is %s", v.Name, orUnknown(v.Status.Robustness)))
			}
			continue
		}
		want := 2
		if v.Spec.NumberOfReplicas == 1 {
			want = 1
		}
		rw := 0
		for _, mode := range e.Status.ReplicaModeMap {
			if mode == cluster.LonghornReplicaRW {
				rw++
			}
		}
		if rw < want {
			out = append(out, fmt.Sprintf("volume %s has %d of %d replicas in sync", v.Name, rw, want))
		}
	}
	sort.Strings(out)
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "of unknown robustness"
	}
	return s
}

// workloadNodes counts the managed nodes that can hold a volume's replica:
// not witness nodes, and not those the operator excluded from the upgrade
// (a node lost for good holds no replica again; counted, it would ask every
// volume to be healthy with too few nodes to place its replicas).
func workloadNodes(nodes []corev1.Node, excluded func(string) bool) int {
	n := 0
	for i := range nodes {
		if nodes[i].Labels[cluster.LabelManagedNode] == "true" && !cluster.IsWitness(&nodes[i]) && !excluded(nodes[i].Name) {
			n++
		}
	}
	return n
}

// +kubebuilder:rbac:groups=longhorn.io,resources=engines;volumes,verbs=list

// waitLonghorn waits until every running volume can lose this node's
// replica.
func (j *Job) waitLonghorn(ctx context.Context, _ *state) error {
	w := waitfor.Wait{
		What:     "every running Longhorn volume to be able to lose the replica on node " + j.Node,
		Timeout:  j.Timeouts.Longhorn,
		Interval: j.Timeouts.Interval,
		Hint:     "draining now could lose data: repair the volumes in the Longhorn UI, then let the job retry",
	}
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		var engines longhornv1beta2.EngineList
		if err := j.Client.List(ctx, &engines, client.InNamespace(cluster.LonghornNamespace)); err != nil {
			return false, "", err
		}
		var vols longhornv1beta2.VolumeList
		if err := j.Client.List(ctx, &vols, client.InNamespace(cluster.LonghornNamespace)); err != nil {
			return false, "", err
		}
		var nodes corev1.NodeList
		if err := j.Client.List(ctx, &nodes); err != nil {
			return false, "", err
		}
		// Read again on every look: the operator may exclude a lost node
		// while the job waits.
		plan, err := helper.Plan(ctx, j.Client, j.Plan)
		if err != nil {
			return false, "", err
		}
		byName := map[string]*longhornv1beta2.Volume{}
		for i := range vols.Items {
			byName[vols.Items[i].Name] = &vols.Items[i]
		}
		bad := UnhealthyVolumes(engines.Items, byName, workloadNodes(nodes.Items, plan.IsNodeExcluded))
		return len(bad) == 0, strings.Join(bad, "; "), nil
	})
}

package kept

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
)

// TestKeptListsFollowTheCache: the node list, node Jobs and drain requests a
// pass keeps and updates from the objects named as changed are, after any
// sequence of creations, changes (labels that move a Job to another plan or
// type, a node that stops being managed, a drain request and its end) and
// deletions, what a pass listing them afresh reads.
func TestKeptListsFollowTheCache(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(10) {
		rnd := rand.New(rand.NewPCG(seed, 1))
		c := fake.NewClientBuilder().WithScheme(cluster.Scheme()).Build()
		kept, fresh := New(), (*Lists)(nil)
		for step := range 60 {
			change(ctx, t, c, kept, rnd)
			if step%3 != 0 {
				continue
			}
			if got, want := describeLists(ctx, t, c, kept), describeLists(ctx, t, c, fresh); got != want {
				t.Fatalf("seed %d, step %d: kept lists\n%s\nlisted afresh\n%s", seed, step, got, want)
			}
		}
	}
}

// change makes one random change to the cluster and names it, as the
// manager's watches do.
func change(ctx context.Context, t *testing.T, c client.Client, r *Lists, rnd *rand.Rand) {
	t.Helper()
	node := fmt.Sprintf("n%d", rnd.IntN(6))
	var obj client.Object
	var kind Kind
	switch rnd.IntN(4) {
	case 0:
		labels := map[string]string{}
		if rnd.IntN(4) > 0 {
			labels[cluster.LabelManagedNode] = "true"
		}
		obj, kind = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: labels},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: fmt.Sprint(rnd.IntN(100))}}}, KindNodes
	case 1:
		jobType := []string{v1beta1.JobTypePreDrain, v1beta1.JobTypePostDrain}[rnd.IntN(2)]
		planName := []string{"p", "p", "other"}[rnd.IntN(3)]
		ns := []string{cluster.HarvesterNamespace, cluster.HarvesterNamespace, "default"}[rnd.IntN(3)]
		obj, kind = &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("job-%d", rnd.IntN(8)),
			Labels: map[string]string{v1beta1.LabelUpgradePlan: planName, v1beta1.LabelUpgradeComponent: v1beta1.ComponentNodeUpgrade,
				v1beta1.LabelJobType: jobType, v1beta1.LabelNode: node}},
			Status: batchv1.JobStatus{Succeeded: int32(rnd.IntN(2))}}, KindJobs
	case 2:
		annotations := map[string]string{}
		if rnd.IntN(2) == 0 {
			annotations[cluster.AnnotationRancherPostDrain] = "1"
		}
		obj, kind = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "plan-" + node, Annotations: annotations,
			Labels: map[string]string{cluster.LabelMachineName: fmt.Sprintf("m%d", rnd.IntN(6))}}, Type: cluster.MachinePlanSecretType}, KindMachinePlans
	default:
		m := &capiv1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: fmt.Sprintf("m%d", rnd.IntN(6))}}
		if rnd.IntN(4) > 0 {
			m.Status.NodeRef = &corev1.ObjectReference{Name: node}
		}
		obj, kind = m, KindMachines
	}
	key := client.ObjectKeyFromObject(obj)
	existing := obj.DeepCopyObject().(client.Object)
	err := c.Get(ctx, key, existing)
	switch {
	case err == nil && rnd.IntN(5) == 0:
		err = c.Delete(ctx, existing)
	case err == nil:
		obj.SetResourceVersion(existing.GetResourceVersion())
		withStatus := obj.DeepCopyObject().(client.Object)
		if err = c.Update(ctx, obj); err == nil && (kind == KindNodes || kind == KindJobs) {
			// In-tree kinds have a status subresource in the fake client.
			withStatus.SetResourceVersion(obj.GetResourceVersion())
			err = c.Status().Update(ctx, withStatus)
		}
	default:
		err = c.Create(ctx, obj)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.Changed(kind, key)
}

// describeLists says what a pass reads of the lists it keeps.
func describeLists(ctx context.Context, t *testing.T, c client.Reader, r *Lists) string {
	t.Helper()
	nodes, err := r.ManagedNodes(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	out := "nodes:"
	for _, n := range nodes {
		out += " " + n.Name + "@" + n.Status.NodeInfo.BootID
	}
	jobs, err := r.Jobs(ctx, c, NodeJobs("p"))
	if err != nil {
		t.Fatal(err)
	}
	out += "\njobs:"
	for _, jobType := range slices.Sorted(maps.Keys(jobs)) {
		for _, node := range slices.Sorted(maps.Keys(jobs[jobType])) {
			j := jobs[jobType][node]
			out += fmt.Sprintf(" %s/%s=%s(%d)", jobType, node, j.Name, j.Status.Succeeded)
		}
	}
	drains, err := r.DrainRequests(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	out += "\nmachine plans:"
	for _, node := range slices.Sorted(maps.Keys(drains.secrets)) {
		out += " " + node + "=" + drains.secrets[node].GetName()
	}
	return out + fmt.Sprintf("\npost-drain pending: %v", drains.postDrainPending)
}

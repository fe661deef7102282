package controller_test

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// volume creates a Longhorn volume of the given robustness, or sets it.
func (h *harness) volume(name, robustness string) {
	h.t.Helper()
	v := &longhornv1beta2.Volume{}
	key := client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: name}
	if err := h.c.Get(h.ctx(), key, v); err != nil {
		v = &longhornv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: name},
			Spec: longhornv1beta2.VolumeSpec{NumberOfReplicas: 3}}
		h.must(h.c.Create(h.ctx(), v))
		// The API server outlives the test: later tests must not see it.
		h.t.Cleanup(func() { _ = h.c.Delete(context.Background(), v) })
	}
	v.Status.State, v.Status.Robustness = cluster.LonghornVolumeAttached, robustness
	h.must(h.c.Status().Update(h.ctx(), v))
}

// TestHealthGate: Rancher reaches the next node while a volume rebuilds its
// replicas: the node waits, named why, with no Job; once the volume is
// healthy it is drained. A gate that holds past its deadline fails the
// plan with what to do.
func TestHealthGate(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(3)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.driveToNodeUpgrading(p.Name, nodes)
	h.upgradeNode(p.Name, "node-1")

	h.volume("pvc-rebuilding", cluster.LonghornRobustnessDegraded)
	pre := h.rancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	h.waitEventually(p.Name, "node-2", "health gate: waiting for the cluster to be healthy before draining this node: "+
		"Longhorn volume pvc-rebuilding (degraded) not healthy: replicas missing or rebuilding")
	p = h.get(p.Name)
	if st := p.Status.NodeUpgradeStatuses["node-2"]; st.State != v1beta1.NodeStateImagePreloaded || st.HealthGateSince == nil || !strings.Contains(st.Message, "fails at ") {
		t.Errorf("node-2 held by the gate: %+v", st)
	}
	h.wholePass(p.Name)
	preDrain := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2")}
	if !h.absent(preDrain, &batchv1.Job{}) {
		t.Fatal("node-2 was drained while a volume rebuilt")
	}
	h.volume("pvc-rebuilding", cluster.LonghornRobustnessHealthy)
	h.waitNodeState(p.Name, "node-2", v1beta1.NodeStatePreDraining)
	h.finishNode(p.Name, "node-2", pre)

	// node-3: a faulted volume holds it past the gate's deadline.
	h.volume("pvc-broken", cluster.LonghornRobustnessFaulted)
	h.rancherAsks("node-3", cluster.AnnotationRancherPreDrain)
	h.waitEventually(p.Name, "node-3", "Longhorn volume pvc-broken (faulted)")
	h.clock.Step(h.cfg.Deadlines.HealthGate)
	h.touch(p.Name)
	p = h.waitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); c == nil || !strings.Contains(c.Message, "node node-3 waited 30m0s for the cluster to be healthy before its drain (Longhorn volume pvc-broken (faulted)") {
		t.Errorf("failure %+v", c)
	}
}

// TestRelaxedHealthGate: a node the gate holds for a degraded volume is
// released when the operator relaxes the gate on the running plan.
func TestRelaxedHealthGate(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(3)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.driveToNodeUpgrading(p.Name, nodes)
	h.upgradeNode(p.Name, "node-1")

	h.volume("pvc-expendable", cluster.LonghornRobustnessDegraded)
	h.rancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	h.waitEventually(p.Name, "node-2", "Longhorn volume pvc-expendable (degraded)")
	p = h.get(p.Name)
	p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{HealthGate: ptr.To(v1beta1.HealthGateRelaxed)}
	h.must(h.c.Update(h.ctx(), p))
	h.waitNodeState(p.Name, "node-2", v1beta1.NodeStatePreDraining)
}

package phase_test

import (
	"fmt"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestHealthGate: Rancher reaches the next node while a volume rebuilds its
// replicas: the node waits, named why, with no Job; once the volume is
// healthy it is drained. A gate that holds past its deadline fails the
// plan with what to do.
func TestHealthGate(t *testing.T) {
	h := plantest.New(t)
	p := h.Node1Upgraded(3)

	h.Volume("pvc-rebuilding", cluster.LonghornRobustnessDegraded)
	pre := h.RancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	h.WaitEventually(p.Name, "node-2", "health gate: waiting for the cluster to be healthy before draining this node: "+
		"Longhorn volume pvc-rebuilding (degraded) not healthy: replicas missing or rebuilding")
	p = h.Get(p.Name)
	if st := p.Status.NodeUpgradeStatuses["node-2"]; st.State != v1beta1.NodeStateImagePreloaded || st.HealthGateSince == nil || !strings.Contains(st.Message, "fails at ") {
		t.Errorf("node-2 held by the gate: %+v", st)
	}
	h.WholePass(p.Name)
	preDrain := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2")}
	if !h.Absent(preDrain, &batchv1.Job{}) {
		t.Fatal("node-2 was drained while a volume rebuilt")
	}
	h.Volume("pvc-rebuilding", cluster.LonghornRobustnessHealthy)
	h.WaitNodeState(p.Name, "node-2", v1beta1.NodeStatePreDraining)
	h.FinishNode(p.Name, "node-2", pre)

	// node-3: a faulted volume holds it past the gate's deadline.
	h.Volume("pvc-broken", cluster.LonghornRobustnessFaulted)
	h.RancherAsks("node-3", cluster.AnnotationRancherPreDrain)
	h.WaitEventually(p.Name, "node-3", "Longhorn volume pvc-broken (faulted)")
	h.Clock.Step(h.Cfg.Deadlines.HealthGate)
	h.Touch(p.Name)
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); c == nil || !strings.Contains(c.Message, "node node-3 waited 30m0s for the cluster to be healthy before its drain (Longhorn volume pvc-broken (faulted)") {
		t.Errorf("failure %+v", c)
	}
}

// TestRelaxedHealthGate: a node the gate holds for a degraded volume is
// released when the operator relaxes the gate on the running plan.
func TestRelaxedHealthGate(t *testing.T) {
	h := plantest.New(t)
	p := h.Node1Upgraded(3)

	h.Volume("pvc-expendable", cluster.LonghornRobustnessDegraded)
	h.RancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	h.WaitEventually(p.Name, "node-2", "Longhorn volume pvc-expendable (degraded)")
	p = h.Get(p.Name)
	p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{HealthGate: ptr.To(v1beta1.HealthGateRelaxed)}
	h.Must(h.C.Update(h.Ctx(), p))
	h.WaitNodeState(p.Name, "node-2", v1beta1.NodeStatePreDraining)
}

// TestCircuitBreaker: while node-3 is down, Rancher's request to drain
// node-2 is held by the circuit breaker, named in the node's message, the
// Progressing condition and an insight, past the health gate's deadline
// without failing the plan; node-2 is drained by itself once node-3 is
// back. A limit of 2 lets node-3 be drained while node-2 is down.
func TestCircuitBreaker(t *testing.T) {
	h := plantest.New(t)
	p := h.Node1Upgraded(3)

	h.SetNodeReady("node-3", false)
	pre := h.RancherAsks("node-2", cluster.AnnotationRancherPreDrain)
	held := "circuit breaker: no node is drained while too many are down: node node-3 not Ready or unreachable: " +
		"draining another node would leave 2 unavailable, more than spec.nodeUpgradeOption.maxUnavailableNodes (1)"
	h.WaitEventually(p.Name, "node-2", held)
	h.WaitProgressing(p.Name, "node node-2 held by the "+held)
	h.Clock.Step(2 * h.Cfg.Deadlines.HealthGate)
	h.Touch(p.Name)
	h.WholePass(p.Name)
	p = h.Get(p.Name)
	if st := p.Status.NodeUpgradeStatuses["node-2"]; p.Status.CurrentPhase == v1beta1.PhaseFailed || st.State != v1beta1.NodeStateImagePreloaded || st.HealthGateSince != nil {
		t.Fatalf("the breaker failed the plan or started the gate's clock: %s", plantest.Describe(p))
	}
	h.Eventually("the CircuitBreakerOpen insight naming node-3", func() (bool, string) {
		p = h.Get(p.Name)
		return hasInsight(p, v1beta1.InsightCircuitBreakerOpen, "Node/node-3"), fmt.Sprintf("%+v", p.Status.Insights)
	})
	preDrain := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.NodeJob(p.Name, v1beta1.JobTypePreDrain, "node-2")}
	if !h.Absent(preDrain, &batchv1.Job{}) {
		t.Fatal("node-2 was drained while node-3 was down")
	}
	h.SetNodeReady("node-3", true)
	h.WaitNodeState(p.Name, "node-2", v1beta1.NodeStatePreDraining)
	h.FinishNode(p.Name, "node-2", pre)

	p = h.Get(p.Name)
	p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{MaxUnavailableNodes: ptr.To[int32](2)}
	h.Must(h.C.Update(h.Ctx(), p))
	h.SetNodeReady("node-2", false)
	h.RancherAsks("node-3", cluster.AnnotationRancherPreDrain)
	h.WaitNodeState(p.Name, "node-3", v1beta1.NodeStatePreDraining)
}

func hasInsight(p *v1beta1.UpgradePlan, insightType string, objects ...string) bool {
	for _, in := range p.Status.Insights {
		if in.Type == insightType && strings.Join(in.Objects, ",") == strings.Join(objects, ",") {
			return true
		}
	}
	return false
}

package phase_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestWatchdogNamesWhoCordoned: a node cordoned during the node upgrade is
// an insight NodeUnavailable that names who cordoned it, read from the
// node's managed fields; uncordoned, the insight goes.
func TestWatchdogNamesWhoCordoned(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(3)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)

	cordon := func(on bool) {
		n := &corev1.Node{}
		h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: "node-3"}, n))
		before := n.DeepCopy()
		n.Spec.Unschedulable = on
		h.Must(h.C.Patch(h.Ctx(), n, client.MergeFrom(before), client.FieldOwner("kubectl-cordon")))
	}
	cordon(true)
	named := func(p *v1beta1.UpgradePlan) *v1beta1.Insight {
		i := slices.IndexFunc(p.Status.Insights, func(in v1beta1.Insight) bool {
			return in.Type == v1beta1.InsightNodeUnavailable && slices.Contains(in.Objects, "Node/node-3")
		})
		if i < 0 {
			return nil
		}
		return &p.Status.Insights[i]
	}
	h.Eventually("node-3 named", func() (bool, string) {
		p = h.Get(p.Name)
		in := named(p)
		return in != nil && strings.Contains(in.Message, "kubectl-cordon"), plantest.Describe(p)
	})
	cordon(false)
	h.Eventually("the insight gone", func() (bool, string) {
		p = h.Get(p.Name)
		return named(p) == nil, plantest.Describe(p)
	})
}

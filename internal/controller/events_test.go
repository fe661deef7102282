package controller_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// TestARecurringErrorIsCountedOnItsEvent: an error that comes back after it
// cleared is recorded again, on the same event, whose count goes up.
func TestARecurringErrorIsCountedOnItsEvent(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(2)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.driveToNodeUpgrading(p.Name, nodes)
	h.waitProgressing(p.Name, "waiting for Rancher to start on the next node")

	local := &provisioningv1.Cluster{}
	h.must(h.c.Get(h.ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, local))
	for range 2 {
		// The plan does not watch the Cluster; a touch makes it look.
		h.must(h.c.Delete(h.ctx(), local))
		h.touch(p.Name)
		h.waitDegraded(p.Name, metav1.ConditionTrue)
		h.must(h.c.Create(h.ctx(), &provisioningv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: local.Namespace, Name: local.Name}, Spec: local.Spec}))
		h.touch(p.Name)
		h.waitDegraded(p.Name, metav1.ConditionFalse)
	}
	h.eventually("the ReconcileError event counted twice", func() (bool, string) {
		var list corev1.EventList
		h.must(h.c.List(h.ctx(), &list))
		var seen []string
		for _, e := range list.Items {
			if e.InvolvedObject.Name == p.Name && e.Reason == v1beta1.EventReconcileError {
				if e.Count == 2 && strings.Contains(e.Message, "provisioning Cluster") {
					return true, ""
				}
				seen = append(seen, fmt.Sprintf("%dx %s", e.Count, e.Message))
			}
		}
		return false, strings.Join(seen, "\n")
	})
}

// waitDegraded waits for the plan's Degraded condition.
func (h *harness) waitDegraded(plan string, status metav1.ConditionStatus) {
	h.t.Helper()
	h.eventually(fmt.Sprintf("plan %s Degraded=%s", plan, status), func() (bool, string) {
		p := h.get(plan)
		c := p.Condition(v1beta1.ConditionDegraded)
		return c != nil && c.Status == status, describe(p)
	})
}

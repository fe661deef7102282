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
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestARecurringErrorIsCountedOnItsEvent: an error that comes back after it
// cleared is recorded again, on the same event, whose count goes up.
func TestARecurringErrorIsCountedOnItsEvent(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(2)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.DriveToNodeUpgrading(p.Name, nodes)
	h.WaitProgressing(p.Name, "waiting for Rancher to start on the next node")

	local := &provisioningv1.Cluster{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}, local))
	for range 2 {
		// The plan does not watch the Cluster; a touch makes it look.
		h.Must(h.C.Delete(h.Ctx(), local))
		h.Touch(p.Name)
		h.WaitDegraded(p.Name, metav1.ConditionTrue)
		h.Must(h.C.Create(h.Ctx(), &provisioningv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: local.Namespace, Name: local.Name}, Spec: local.Spec}))
		h.Touch(p.Name)
		h.WaitDegraded(p.Name, metav1.ConditionFalse)
	}
	h.Eventually("the ReconcileError event counted twice", func() (bool, string) {
		var list corev1.EventList
		h.Must(h.C.List(h.Ctx(), &list))
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

package phase

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// TestWorkingCopyLeavesThePlanAlone: a pass works on a copy that shares the
// node map of the plan it came from (the cache's own) until it changes an
// entry; no change of the pass reaches that plan.
func TestWorkingCopyLeavesThePlanAlone(t *testing.T) {
	cached := &v1beta1.UpgradePlan{Status: v1beta1.UpgradePlanStatus{
		Conditions: []metav1.Condition{{Type: "Progressing", Status: "True"}},
		NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
			"n1": {State: v1beta1.NodeStateImagePreloaded},
			"n2": {State: v1beta1.NodeStateImagePreloaded},
		},
	}}
	want := cached.DeepCopy()
	for name, change := range map[string]func(*Scope){
		"a state":     func(s *Scope) { s.setNodeState("n1", v1beta1.NodeStatePreDraining, "", "") },
		"a new node":  func(s *Scope) { s.setNodeState("n3", v1beta1.NodeStateImagePreloaded, "", "") },
		"a boot":      func(s *Scope) { s.recordBoot("n1", "boot-1", "Harvester v1.7.0") },
		"health gate": func(s *Scope) { s.holdAtHealthGate("n2", "waiting") },
		"a condition": func(s *Scope) { s.Plan.Status.Conditions[0].Status = "False" },
	} {
		t.Run(name, func(t *testing.T) {
			s := &Scope{Clock: clocktesting.NewFakeClock(time.Now()), Config: &Config{Deadlines: Deadlines{HealthGate: time.Hour}}}
			s.SetWorkingCopy(cached)
			change(s)
			if !equalStatus(cached, want) {
				t.Errorf("the pass changed the plan it copied: %+v", cached.Status)
			}
			if equalStatus(s.Plan, want) {
				t.Errorf("the change is not in the working copy")
			}
		})
	}
}

func equalStatus(a, b *v1beta1.UpgradePlan) bool {
	if len(a.Status.NodeUpgradeStatuses) != len(b.Status.NodeUpgradeStatuses) || a.Status.Conditions[0] != b.Status.Conditions[0] {
		return false
	}
	for n, st := range a.Status.NodeUpgradeStatuses {
		if other, ok := b.Status.NodeUpgradeStatuses[n]; !ok || !sameNode(st, other) {
			return false
		}
	}
	return true
}

func sameNode(a, b v1beta1.NodeUpgradeStatus) bool {
	return a.State == b.State && a.PreviousBootID == b.PreviousBootID && a.HealthGateSince.Equal(b.HealthGateSince)
}

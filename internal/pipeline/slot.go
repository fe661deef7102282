package pipeline

import (
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// NeedsSlot reports whether a plan holds or waits for the cluster's one
// upgrade slot: it is not finished, or it still has cleanup to do. A dry
// run changes nothing, so it never needs the slot.
func NeedsSlot(p *v1beta1.UpgradePlan) bool {
	if p.IsDryRun() {
		return false
	}
	return !p.IsFinished() || controllerutil.ContainsFinalizer(p, v1beta1.FinalizerCleanup)
}

// SlotHolder decides which plan may run. A plan that has started keeps the
// slot until it is finished and cleaned up; otherwise the oldest waiting plan
// gets it (by creation time, then name, so that every reconcile agrees).
// It returns nil when no plan needs the slot.
func SlotHolder(plans []v1beta1.UpgradePlan) *v1beta1.UpgradePlan {
	var candidates []*v1beta1.UpgradePlan
	for i := range plans {
		if NeedsSlot(&plans[i]) {
			candidates = append(candidates, &plans[i])
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	return slices.MinFunc(candidates, func(a, b *v1beta1.UpgradePlan) int {
		if a.IsStarted() != b.IsStarted() {
			if a.IsStarted() {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

package pipeline

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

func plan(name string, created int, phase v1beta1.UpgradePlanPhase, finalizer bool) v1beta1.UpgradePlan {
	p := v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{
		Name:              name,
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, created, 0, time.UTC)),
	}}
	p.Status.CurrentPhase = phase
	if finalizer {
		p.Finalizers = []string{v1beta1.FinalizerCleanup}
	}
	return p
}

func dryRun(p v1beta1.UpgradePlan) v1beta1.UpgradePlan {
	p.Spec.DryRun = ptr.To(true)
	return p
}

func TestSlotHolder(t *testing.T) {
	tests := []struct {
		name  string
		plans []v1beta1.UpgradePlan
		want  string
	}{
		{"none", nil, ""},
		{"only finished plans", []v1beta1.UpgradePlan{plan("a", 1, v1beta1.PhaseSucceeded, false), plan("b", 2, v1beta1.PhaseFailed, false)}, ""},
		{"a single new plan", []v1beta1.UpgradePlan{plan("a", 1, "", false)}, "a"},
		{"oldest waiting plan first", []v1beta1.UpgradePlan{plan("b", 2, "", false), plan("a", 1, "", false)}, "a"},
		{"same second: by name", []v1beta1.UpgradePlan{plan("b", 1, "", false), plan("a", 1, "", false)}, "a"},
		{"a started plan keeps the slot even if an older one appears",
			[]v1beta1.UpgradePlan{plan("old", 1, "", false), plan("new", 2, v1beta1.PhaseRepoCreating, true)}, "new"},
		{"a finished plan still cleaning up keeps the slot",
			[]v1beta1.UpgradePlan{plan("a", 1, v1beta1.PhaseSucceeded, true), plan("b", 2, "", false)}, "a"},
		{"a finished and cleaned-up plan frees it",
			[]v1beta1.UpgradePlan{plan("a", 1, v1beta1.PhaseFailed, false), plan("b", 2, "", false)}, "b"},
		{"a dry run never takes it", []v1beta1.UpgradePlan{dryRun(plan("a", 1, "", false)), plan("b", 2, "", false)}, "b"},
		{"nor waits for it", []v1beta1.UpgradePlan{dryRun(plan("a", 1, "", false))}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SlotHolder(tt.plans)
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tt.want {
				t.Errorf("SlotHolder = %q, want %q", name, tt.want)
			}
		})
	}
}

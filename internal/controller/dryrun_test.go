package controller_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestDryRunEndsInPreviewed: a plan with spec.dryRun is previewed into its
// status and ends in Previewed, with no finalizer, no phase of the pipeline
// and nothing created, as the manager's role (the harness runs the manager
// as its service account).
func TestDryRunEndsInPreviewed(t *testing.T) {
	h := plantest.New(t)
	h.Harvester(3)
	var p *v1beta1.UpgradePlan
	writes := h.WritesDuring(func() {
		p = h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), DryRun: ptr.To(true)})
		p = h.WaitPhase(p.Name, v1beta1.PhasePreviewed)
	})
	for k := range writes {
		if k.Resource != "upgradeplans/status" && k.Resource != "events" {
			t.Errorf("the manager wrote %s %s during a dry run", k.Verb, k.Resource)
		}
	}
	if pv := p.Status.Preview; pv == nil || len(pv.Nodes) != 3 || pv.EstimatedMinutes == 0 {
		t.Fatalf("status.preview %+v", pv)
	}
	if len(p.Finalizers) != 0 || len(p.Status.PhaseTransitionTimestamps) != 1 {
		t.Errorf("finalizers %q, phases %+v", p.Finalizers, p.Status.PhaseTransitionTimestamps)
	}
	h.WaitEvent(p.Name, "Previewed")
	// With an image, the preview looks the image up; the target version is
	// then unknown until the ISO is read, and the preview says so.
	img := h.Plan(v1beta1.UpgradePlanSpec{Image: ptr.To("no-such-iso"), DryRun: ptr.To(true)})
	img = h.WaitPhase(img.Name, v1beta1.PhasePreviewed)
	if pv := img.Status.Preview; pv == nil || pv.WouldRun || !slices.ContainsFunc(pv.Warnings, func(w string) bool {
		return strings.Contains(w, "eligibility: not checked")
	}) {
		t.Errorf("status.preview of the image plan %+v", pv)
	}
	if !h.Absent(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ISOImage(p.Name)}, &harvesterv1beta1.VirtualMachineImage{}) {
		t.Error("a dry run created the ISO image")
	}
}

package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/preview"
)

// What a dry run reads (preview.Gather), straight from the API server,
// beside what preflight.GatherAdmissionFacts reads.
//
// +kubebuilder:rbac:groups=harvesterhci.io,resources=settings,verbs=get

// dryRun previews a plan with spec.dryRun: it runs the checks, writes the
// outcome into status.preview and ends the plan in Previewed. It only reads:
// no finalizer (nothing to clean up), no slot, no phase of the pipeline.
func (p *pass) dryRun(ctx context.Context) (ctrl.Result, error) {
	s := p.s
	facts, err := preview.Gather(ctx, p.r.APIReader, s.Plan, p.r.Config.Alerts)
	if err != nil {
		p.setDegraded(err, "")
		return ctrl.Result{}, err
	}
	rep := preview.Build(s.Plan, facts)
	st := &s.Plan.Status
	st.Preview = rep.Summary()
	pipeline.SetPhase(st, v1beta1.PhasePreviewed, s.Now())
	msg, kind := "Dry run: the upgrade would start", corev1.EventTypeNormal
	if !rep.WouldRun {
		msg, kind = "Dry run: the upgrade would not start, a check failed (status.preview.failures)", corev1.EventTypeWarning
	}
	p.setDegraded(nil, "")
	p.setEnded()
	p.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonPreviewed, msg)
	s.Event(kind, v1beta1.EventPreviewed, "%s; estimated duration %d minutes", msg, rep.Estimate.Minutes)
	return ctrl.Result{}, nil
}

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
)

// TestRiskAppearsBeforeInitialize: a plan created paused on a healthy
// cluster is admitted; while it waits, a VM backup schedule is switched
// on, a risk the plan does not accept. Unpaused, the plan fails at
// Initialize naming the risk and the line that accepts it, having changed
// nothing; the operator accepts it by name and retries, and the upgrade
// runs to Succeeded with the risk recorded in status.acceptedRisks.
// (The webhook's refusal of a risk at admission, then the same plan
// accepting it, is TestEveryRiskIsRaisedOnTheWorld in internal/webhook:
// the simulated cluster serves no webhook.)
func TestRiskAppearsBeforeInitialize(t *testing.T) {
	risk := string(preflight.RiskBackupScheduleActive)
	var raised, failedOnIt, accepted bool
	final := scenario{
		sim: sim.Config{Nodes: 3},
		// restoreVM: the world's pinned VMs are then a Warning, not a risk
		// to accept.
		spec:        v1beta1.UpgradePlanSpec{Paused: ptr.To(true), RestoreVM: ptr.To(true)},
		annotations: map[string]string{v1beta1.AnnotationSkipWebhook: "false"},
		retryWindow: 10 * time.Minute,
		want:        v1beta1.PhaseSucceeded,
		during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
			c := p.Condition(v1beta1.ConditionProgressing)
			switch {
			case !raised && c != nil && c.Reason == v1beta1.ReasonPaused:
				if p.Status.CurrentPhase != "" && p.Status.CurrentPhase != v1beta1.PhaseInitializing {
					t.Fatalf("the paused plan is already in %s", p.Status.CurrentPhase)
				}
				if err := run.Client.Create(ctx, &harvesterv1beta1.ScheduleVMBackup{
					ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nightly"},
					Spec:       harvesterv1beta1.ScheduleVMBackupSpec{Cron: "0 2 * * *"},
				}); err != nil {
					t.Fatalf("switching a backup schedule on: %v", err)
				}
				raised = true
				patchPlan(t, ctx, run, p, func(p *v1beta1.UpgradePlan) { p.Spec.Paused = ptr.To(false) })
			case raised && !accepted && p.AwaitsRetry():
				if p.LastFailure().Phase != v1beta1.PhaseInitializing {
					t.Fatalf("failed in %s: %s", p.LastFailure().Phase, p.LastFailure().Message)
				}
				for _, want := range []string{"risk " + risk + ": VM backup or snapshot schedules are active: default/nightly",
					"spec.acceptRisks: [" + risk + "]"} {
					if !strings.Contains(c.Message, want) {
						t.Errorf("failure %q does not say %q", c.Message, want)
					}
				}
				failedOnIt = true
				accepted = true
				patchPlan(t, ctx, run, p, func(p *v1beta1.UpgradePlan) {
					p.Spec.AcceptRisks = []string{risk}
					metav1.SetMetaDataAnnotation(&p.ObjectMeta, v1beta1.AnnotationRetry, "accepted")
				})
			}
		},
	}.run(t)
	if !failedOnIt {
		t.Fatal("the plan never failed on the risk that appeared after admission")
	}
	if n := len(final.Status.AcceptedRisks); n != 1 || final.Status.AcceptedRisks[0].Name != risk ||
		!strings.Contains(final.Status.AcceptedRisks[0].Message, "default/nightly") {
		t.Errorf("status.acceptedRisks %+v, want %s alone", final.Status.AcceptedRisks, risk)
	}
}

// patchPlan changes the plan as an operator would, with a merge patch.
func patchPlan(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan, change func(*v1beta1.UpgradePlan)) {
	t.Helper()
	p = p.DeepCopy()
	before := p.DeepCopy()
	change(p)
	if err := run.Client.Patch(ctx, p, client.MergeFrom(before)); err != nil {
		t.Fatalf("changing the plan: %v", err)
	}
}

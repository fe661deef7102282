package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/phase"
)

// setQueued reports that the plan waits for another one to finish.
func (p *pass) setQueued(holder *v1beta1.UpgradePlan) {
	p.setCondition(v1beta1.ConditionAvailable, metav1.ConditionTrue, v1beta1.ReasonExecutable, "")
	msg := fmt.Sprintf("waiting for upgrade %q to finish; this plan starts by itself when it has finished and cleaned up", holder.Name)
	if holder.Status.CurrentPhase != "" {
		msg = fmt.Sprintf("waiting for upgrade %q (phase %s) to finish; this plan starts by itself when it has finished and cleaned up", holder.Name, holder.Status.CurrentPhase)
	}
	if p.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonConcurrentUpgradeBlocked, msg) {
		p.s.Event(corev1.EventTypeWarning, v1beta1.EventConcurrentUpgradeBlocked, "Blocked by in-progress upgrade %q", holder.Name)
	}
	p.setCondition(v1beta1.ConditionDegraded, metav1.ConditionFalse, v1beta1.ReasonReconcileSuccess, "")
}

// setEnded marks the plan no longer available: it reached a terminal phase.
func (p *pass) setEnded() {
	p.setCondition(v1beta1.ConditionAvailable, metav1.ConditionFalse, v1beta1.ReasonExecuted, "Entered one of the terminal phases")
}

// setConditions summarises the pass in the plan's conditions and records the
// events that go with their changes.
func (p *pass) setConditions(res phase.Result, runErr error) {
	s := p.s
	st := &s.Plan.Status
	p.setDegraded(runErr, res.Degraded)
	switch st.CurrentPhase {
	case v1beta1.PhaseSucceeded:
		p.setEnded()
		p.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonSucceeded, "UpgradePlan has completed")
	case v1beta1.PhaseFailed, v1beta1.PhaseAborted:
		// fail and abort set Progressing with the reason.
		p.setEnded()
	default:
		p.setCondition(v1beta1.ConditionAvailable, metav1.ConditionTrue, v1beta1.ReasonExecutable, "")
		progressing := s.Plan.Condition(v1beta1.ConditionProgressing)
		wasHeld := progressing != nil && progressing.Reason == v1beta1.ReasonPaused
		switch {
		case res.Held:
			if p.setCondition(v1beta1.ConditionProgressing, metav1.ConditionFalse, v1beta1.ReasonPaused, res.Waiting) && !wasHeld {
				s.Event(corev1.EventTypeNormal, v1beta1.EventPaused, "Paused: %s", res.Waiting)
			}
		default:
			p.setCondition(v1beta1.ConditionProgressing, metav1.ConditionTrue, string(st.CurrentPhase), res.Waiting)
			if wasHeld && !s.Plan.IsPaused() {
				s.Event(corev1.EventTypeNormal, v1beta1.EventResumed, "Resumed in phase %s", st.CurrentPhase)
			}
		}
	}
}

// setDegraded reports the pass's error, if any, in the Degraded condition,
// with a Warning event once per distinct error; without an error, what a
// step has been missing for a while although its work reported success.
func (p *pass) setDegraded(err error, missing string) {
	switch {
	case err != nil:
		if p.setCondition(v1beta1.ConditionDegraded, metav1.ConditionTrue, v1beta1.ReasonReconcileError, err.Error()) {
			p.s.Event(corev1.EventTypeWarning, v1beta1.EventReconcileError, "Pipeline error: %s", err.Error())
		}
	case missing != "":
		if p.setCondition(v1beta1.ConditionDegraded, metav1.ConditionTrue, v1beta1.ReasonVerificationPending, missing) {
			p.s.Event(corev1.EventTypeWarning, v1beta1.EventVerificationPending, "%s", missing)
		}
	default:
		p.setCondition(v1beta1.ConditionDegraded, metav1.ConditionFalse, v1beta1.ReasonReconcileSuccess, "")
	}
}

// setCondition sets a condition of the working copy and reports whether its
// status, reason or message changed. Timestamps move only on change.
func (p *pass) setCondition(t string, status metav1.ConditionStatus, reason, msg string) bool {
	s := p.s
	old := meta.FindStatusCondition(s.Plan.Status.Conditions, t)
	changed := old == nil || old.Status != status || old.Reason != reason || old.Message != msg
	meta.SetStatusCondition(&s.Plan.Status.Conditions, metav1.Condition{
		Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: s.Plan.Generation,
	})
	return changed
}

package preflight

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// AdmitDelete judges the deletion of a plan. A finished plan, or one that has
// not started (it waits behind another), can always go. While the cluster's
// components or the nodes are being upgraded nothing may stop it: the
// cluster would stay half-upgraded. Any other running plan needs the
// allow-deletion annotation. webhookConfiguration names the
// ValidatingWebhookConfiguration that enforces this, for the last-resort
// advice.
func AdmitDelete(p *v1beta1.UpgradePlan, webhookConfiguration string) AdmissionResult {
	return judged(ReasonDeletion, "the plan has finished or not started", admitDelete(p, webhookConfiguration))
}

func admitDelete(p *v1beta1.UpgradePlan, webhookConfiguration string) AdmissionResult {
	var r AdmissionResult
	phase := p.Status.CurrentPhase
	if p.IsFinished() || !p.IsStarted() {
		return r
	}
	metadata := field.NewPath("metadata")
	switch phase {
	case v1beta1.PhaseClusterUpgrading, v1beta1.PhaseNodeUpgrading:
		what := "the cluster's components are"
		if phase == v1beta1.PhaseNodeUpgrading {
			what = "the nodes are"
		}
		r.refuse(field.Forbidden(metadata, fmt.Sprintf(
			"cannot delete UpgradePlan %q while %s being upgraded (phase %s), whatever its annotations: stopping now leaves the "+
				"cluster half-upgraded. Wait until it reaches Succeeded or Failed; if it is stuck, `kubectl describe upgradeplan %[1]s` "+
				"shows what it waits for (the Progressing condition and the events): fix that and it carries on. "+
				"As a last resort, delete the ValidatingWebhookConfiguration %[4]s to remove the plan, knowing the cluster stays part-upgraded",
			p.Name, what, phase, webhookConfiguration)))
		return r
	}
	if allow, _ := p.AllowDeletion(); !allow { // a bad value allows nothing
		r.refuse(field.Forbidden(metadata.Child("annotations").Key(v1beta1.AnnotationAllowDeletion), fmt.Sprintf(
			"cannot delete UpgradePlan %q while it runs (phase %s): deleting it stops the upgrade and removes what it created. "+
				"To delete it anyway, first run `kubectl annotate upgradeplan %[1]s %[3]s=true`",
			p.Name, phase, v1beta1.AnnotationAllowDeletion)))
		return r
	}
	return admissionWarn("deleting UpgradePlan %q in phase %s: the upgrade stops in this phase and its cleanup removes what it created", p.Name, phase)
}

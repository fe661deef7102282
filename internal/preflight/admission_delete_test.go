package preflight

import (
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

func TestAdmitDelete(t *testing.T) {
	const hard = `metadata: Forbidden: cannot delete UpgradePlan "hvst-upgrade-abcde" while`
	const soft = `metadata.annotations[management.harvesterhci.io/allow-deletion]: Forbidden: cannot delete UpgradePlan "hvst-upgrade-abcde" while it runs`
	phases := []v1beta1.UpgradePlanPhase{
		"", v1beta1.PhaseInitializing, v1beta1.PhaseInitialized, v1beta1.PhaseISODownloading, v1beta1.PhaseISODownloaded,
		v1beta1.PhaseRepoCreating, v1beta1.PhaseRepoCreated, v1beta1.PhaseMetadataPopulating, v1beta1.PhaseMetadataPopulated,
		v1beta1.PhaseImagePreloading, v1beta1.PhaseImagePreloaded, v1beta1.PhaseClusterUpgrading, v1beta1.PhaseClusterUpgraded,
		v1beta1.PhaseNodeUpgrading, v1beta1.PhaseNodeUpgraded, v1beta1.PhaseCleaningUp, v1beta1.PhaseCleanedUp,
		v1beta1.PhaseSucceeded, v1beta1.PhaseFailed,
	}
	for _, phase := range phases {
		for _, allow := range []bool{false, true} {
			p := testPlan()
			p.Status.CurrentPhase = phase
			if allow {
				p.Annotations = map[string]string{v1beta1.AnnotationAllowDeletion: "true"}
			}
			r := AdmitDelete(p, "upgrade-toolkit-validating-webhook-configuration")
			var want string
			switch {
			case phase == "" || phase.IsTerminal():
			case phase == v1beta1.PhaseClusterUpgrading || phase == v1beta1.PhaseNodeUpgrading:
				want = hard
			case !allow:
				want = soft
			}
			got := errorStrings(r)
			switch {
			case want == "" && len(got) > 0:
				t.Errorf("phase %q allow=%v: refused %q", phase, allow, got)
			case want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], want)):
				t.Errorf("phase %q allow=%v: got %q; want %q…", phase, allow, got, want)
			}
			started := phase != "" && !phase.IsTerminal()
			if allowed := want == ""; allowed && started != (len(r.Warnings()) == 1) {
				t.Errorf("phase %q allow=%v: warnings %q", phase, allow, r.Warnings())
			}
		}
	}
}

func TestAdmitDeleteMessagesSayWhatToDo(t *testing.T) {
	p := testPlan()
	p.Status.CurrentPhase = v1beta1.PhaseNodeUpgrading
	got := errorStrings(AdmitDelete(p, "my-webhook"))[0]
	for _, want := range []string{"the nodes are being upgraded (phase NodeUpgrading)", "whatever its annotations",
		"Wait until it reaches Succeeded or Failed", "kubectl describe upgradeplan hvst-upgrade-abcde", "delete the ValidatingWebhookConfiguration my-webhook"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not say %q", got, want)
		}
	}
	p.Status.CurrentPhase = v1beta1.PhaseClusterUpgrading
	if got := errorStrings(AdmitDelete(p, "w"))[0]; !strings.Contains(got, "the cluster's components are being upgraded (phase ClusterUpgrading)") {
		t.Errorf("got %q", got)
	}
	p.Status.CurrentPhase = v1beta1.PhaseRepoCreating
	if got := errorStrings(AdmitDelete(p, "w"))[0]; !strings.Contains(got, "kubectl annotate upgradeplan hvst-upgrade-abcde management.harvesterhci.io/allow-deletion=true") {
		t.Errorf("got %q", got)
	}
}

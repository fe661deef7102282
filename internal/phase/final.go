package phase

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// GateFinal names the final verification's checks (Final/<check>).
const GateFinal = "Final"

// The checks of the final verification, by reason.
const (
	checkNodesUpgraded    preflight.Reason = "NodesUpgraded"
	checkSettingsRestored preflight.Reason = "SettingsRestored"
	checkNothingLeft      preflight.Reason = "NothingLeft"
)

// Finalize runs between the last phase and Succeeded: it cleans up (deletes
// the plan's objects and puts back every setting it changed) and then
// verifies, in one look at the whole cluster, that the upgrade is what it
// claims: Harvester reports the release, every managed node is Ready on the
// release's OS image and kubelet version, every changed setting is back and
// nothing of the plan is left. The plan becomes Succeeded only once every
// check passed; the checks stay in status.checks as the record of why.
func Finalize(ctx context.Context, s *Scope) (Result, error) {
	report, err := cleanup(ctx, s)
	if err != nil {
		return Result{}, err
	}
	harvester, err := harvesterVersionCheck(ctx, s)
	if err != nil {
		return Result{}, err
	}
	nodes, err := s.Kept.ManagedNodes(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	since, ok := pipeline.EnteredAt(&s.Plan.Status, s.Plan.Status.CurrentPhase)
	if !ok {
		since = s.Now()
	}
	checks := []preflight.Verdict{
		harvester,
		nodesUpgradedCheck(s.Plan.Status.ReleaseMetadata, nodes),
		s.settingsRestoredCheck(report),
		nothingLeftCheck(report.left),
	}
	return s.verify(gate{name: GateFinal, what: "the upgrade", since: since, deadline: s.Config.Deadlines.Verify}, checks), nil
}

// nodesUpgradedCheck: every managed node is Ready on the release's OS image
// and kubelet version.
func nodesUpgradedCheck(rm *v1beta1.ReleaseMetadata, nodes []corev1.Node) preflight.Verdict {
	target := nodestate.Target{OSImage: rm.OS, KubeletVersion: release.KubeletVersionOf(rm.Kubernetes)}
	var off []string
	for i := range nodes {
		h := hostOf(&nodes[i])
		if h.Ready && h.OSImage == target.OSImage && h.KubeletVersion == target.KubeletVersion {
			continue
		}
		off = append(off, fmt.Sprintf("%s (Ready=%v, OS %q, kubelet %s)", nodes[i].Name, h.Ready, h.OSImage, orNothing(h.KubeletVersion)))
	}
	if len(off) > 0 {
		return preflight.Pending(checkNodesUpgraded, "%d of %d nodes are not Ready on %q with kubelet %s: %s",
			len(off), len(nodes), target.OSImage, target.KubeletVersion, list(off))
	}
	return preflight.Passed(checkNodesUpgraded, "all %d nodes Ready on %q with kubelet %s", len(nodes), target.OSImage, target.KubeletVersion)
}

// settingsRestoredCheck: every setting the plan changed holds its original
// value again. The settings restored in an earlier pass are recorded in the
// check's message of that pass.
func (s *Scope) settingsRestoredCheck(r cleanupReport) preflight.Verdict {
	if len(r.unsettled) > 0 {
		return preflight.Pending(checkSettingsRestored, "%s", strings.Join(r.unsettled, "; "))
	}
	if s.Plan.Status.SavedSettings != nil {
		return preflight.Pending(checkSettingsRestored, "settings not restored yet: %+v", *s.Plan.Status.SavedSettings)
	}
	if len(r.restored) > 0 {
		return preflight.Passed(checkSettingsRestored, "restored %s", strings.Join(r.restored, ", "))
	}
	for _, c := range s.Plan.Status.Checks {
		if c.Name == GateFinal+"/"+string(checkSettingsRestored) && c.Result == v1beta1.CheckPassed {
			return preflight.Passed(checkSettingsRestored, "%s", c.Message)
		}
	}
	return preflight.Passed(checkSettingsRestored, "the plan changed no setting")
}

// nothingLeftCheck: every object the plan created is gone (its Jobs, Plans,
// the repo); the restore-vm record stays with the plan on purpose.
func nothingLeftCheck(left []string) preflight.Verdict {
	if len(left) > 0 {
		return preflight.Pending(checkNothingLeft, "waiting for %s to be deleted", list(left))
	}
	return preflight.Passed(checkNothingLeft, "no Job, Plan, repo or image of the plan left")
}

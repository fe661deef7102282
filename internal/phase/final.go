package phase

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// GateFinal names the final verification's checks (Final/<check>).
const GateFinal = "Final"

// The checks of the final verification, by reason.
const (
	checkNodesUpgraded    preflight.Reason = "NodesUpgraded"
	checkSettingsRestored preflight.Reason = "SettingsRestored"
	checkNothingLeft      preflight.Reason = "NothingLeft"
	checkVMsRunning       preflight.Reason = "VMsRunning"
)

// Finalize runs between the last phase and Succeeded: it cleans up (deletes
// the plan's objects and puts back every setting it changed) and then
// verifies, in one look at the whole cluster, that the upgrade is what it
// claims: Harvester reports the release, every managed node is Ready on the
// release's OS image and kubelet version, every changed setting is back,
// nothing of the plan is left and every VM that ran when it started runs,
// or was stopped by its owner. The plan becomes Succeeded only once every
// check passed; the checks stay in status.checks as the record of why.
func Finalize(ctx context.Context, s *Scope) (Result, error) {
	if err := s.nodeReplicas(ctx); err != nil {
		return Result{}, err
	}
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
	vms, err := s.vmsRunningCheck(ctx)
	if err != nil {
		return Result{}, err
	}
	checks := []preflight.Verdict{
		harvester,
		nodesUpgradedCheck(s.Plan.Status.ReleaseMetadata, nodes, s.Plan.ExcludedNodes()),
		s.settingsRestoredCheck(report),
		nothingLeftCheck(report.left),
		vms,
	}
	return s.verify(gate{name: GateFinal, what: "the upgrade", since: since, deadline: s.Config.Deadlines.Verify}, checks), nil
}

// nodesUpgradedCheck: every managed node is Ready on the release's OS image
// and kubelet version, but those excluded from the upgrade, which it names.
func nodesUpgradedCheck(rm *v1beta1.ReleaseMetadata, nodes []corev1.Node, excluded []string) preflight.Verdict {
	target := nodestate.Target{OSImage: rm.OS, KubeletVersion: release.KubeletVersionOf(rm.Kubernetes)}
	var off []string
	checked := 0
	for i := range nodes {
		if slices.Contains(excluded, nodes[i].Name) {
			continue
		}
		checked++
		h := hostOf(&nodes[i])
		if h.Ready && h.OSImage == target.OSImage && h.KubeletVersion == target.KubeletVersion {
			continue
		}
		off = append(off, fmt.Sprintf("%s (Ready=%v, OS %q, kubelet %s)", nodes[i].Name, h.Ready, h.OSImage, orNothing(h.KubeletVersion)))
	}
	skipped := ""
	if len(excluded) > 0 {
		skipped = fmt.Sprintf("; not checked, excluded from the upgrade: %s", list(excluded))
	}
	if len(off) > 0 {
		return preflight.Pending(checkNodesUpgraded, "%d of %d nodes are not Ready on %q with kubelet %s: %s%s",
			len(off), checked, target.OSImage, target.KubeletVersion, list(off), skipped)
	}
	return preflight.Passed(checkNodesUpgraded, "all %d nodes Ready on %q with kubelet %s%s", checked, target.OSImage, target.KubeletVersion, skipped)
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

// vmsRunningCheck: every VM that ran when the plan started runs, or its
// owner stopped or deleted it (the ledger records who); a VM the upgrade
// shut down as planned without spec.restoreVM stays off (a warning). Any
// other VM that is off holds the plan, named with where it ran, what
// happened to it and what to do.
func (s *Scope) vmsRunningCheck(ctx context.Context) (preflight.Verdict, error) {
	l, err := s.Ledgers.Read(ctx, s.Client, s.Plan.Name)
	if err != nil {
		return preflight.Verdict{}, err
	}
	if l == nil {
		return preflight.Warning(checkVMsRunning, "the plan has no VM ledger (%s): it started before the toolkit kept one, so its VMs are not checked", vmledger.Key(s.Plan.Name)), nil
	}
	var vms kubevirtv1.VirtualMachineList
	if err := s.Client.List(ctx, &vms); err != nil {
		return preflight.Verdict{}, fmt.Errorf("listing VMs: %w", err)
	}
	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := s.Client.List(ctx, &vmis); err != nil {
		return preflight.Verdict{}, fmt.Errorf("listing VM instances: %w", err)
	}
	seen := map[string]vmledger.Observed{}
	for i := range vms.Items {
		seen[client.ObjectKeyFromObject(&vms.Items[i]).String()] = vmledger.Observed{Exists: true}
	}
	for i := range vmis.Items {
		k := client.ObjectKeyFromObject(&vmis.Items[i]).String()
		if o, ok := seen[k]; ok && !vmledger.Final(&vmis.Items[i]) {
			o.Running, o.Node = true, vmis.Items[i].Status.NodeName
			seen[k] = o
		}
	}
	return vmsRunningVerdict(s.Plan.Name, l.Outcomes(func(vm string) vmledger.Observed { return seen[vm] })), nil
}

// vmsRunningVerdict judges the VMs' outcomes: pending while one is off that
// should run, a warning for the VMs the plan leaves off as planned.
func vmsRunningVerdict(plan string, outcomes []vmledger.Outcome) preflight.Verdict {
	by := map[vmledger.Result][]vmledger.Outcome{}
	for _, o := range outcomes {
		by[o.Result] = append(by[o.Result], o)
	}
	tell := func(os []vmledger.Outcome) string {
		parts := make([]string, 0, len(os))
		for i, o := range os {
			if i == vmsTold {
				parts = append(parts, fmt.Sprintf("and %d more (upgrade-toolkit status %s)", len(os)-i, plan))
				break
			}
			parts = append(parts, fmt.Sprintf("%s (ran on %s) %s", o.VM, o.Node, o.Story))
		}
		return strings.Join(parts, "; ")
	}
	msg := fmt.Sprintf("%d of %d VMs that ran when the plan started run", len(by[vmledger.Runs]), len(outcomes))
	if owner := by[vmledger.ByOwner]; len(owner) > 0 {
		msg += "; stopped by their owners, as recorded: " + tell(owner)
	}
	switch off := by[vmledger.Off]; {
	case len(off) > 0:
		return preflight.Pending(checkVMsRunning, "%s; off, neither as planned nor by their owners: %s; to go on, for each: %s",
			msg, tell(off), vmledger.Do(off[0].VM))
	case len(by[vmledger.StaysOff]) > 0:
		return preflight.Warning(checkVMsRunning, "%s; left off as planned: %s", msg, tell(by[vmledger.StaysOff]))
	}
	return preflight.Passed(checkVMsRunning, "%s", msg)
}

// vmsTold is how many VMs of each outcome the check tells of: its message
// is at most 2048 characters.
const vmsTold = 4

package clusterupgrade

import (
	"fmt"

	"github.com/harvester/upgrade-toolkit/internal/release"
)

// VersionStep says for which upgrades a step (or an action within one) is
// needed: Harvester's upgrade scripts run it only from some releases, or
// only to some.
type VersionStep struct {
	// Step is the step's id (or an action's, within a step).
	Step string
	// From is the release line the cluster must run (v1.7: v1.7.0,
	// v1.7.1-rc1, v1.7-head); empty means any.
	From string
	// To is the oldest release line the upgrade may go to; empty means any.
	To string
	// Why the step is needed on that path.
	Why string
}

// VersionSteps are the per-version steps of Harvester's upgrade scripts,
// as data. A step not listed here runs on every supported path.
var VersionSteps = []VersionStep{
	{Step: StepPreserveOvercommit, From: "v1.7",
		Why: "v1.8 lowers the default storage overcommit; a cluster that never set overcommit-config keeps the old default"},
	{Step: actionCleanLegacyCAPIWebhooks, From: "v1.7",
		Why: "the CAPI of v1.7 leaves webhook configurations that make the new Rancher log errors"},
	{Step: StepTLSInternalCN, From: "v1.8",
		Why: "Rancher v2.15 flaps its internal certificate unless it knows the services that serve it (harvester/harvester#11338)"},
	{Step: StepProvisioningAdministrated, From: "v1.8",
		Why: "Rancher v2.15's system-agent-upgrader needs the local cluster marked as administrated (harvester/harvester#11336)"},
	{Step: StepTraefikConfig, From: "v1.8",
		Why: "v1.9 moves the ingress to Traefik, whose chart needs Harvester's settings"},
	{Step: actionForceRefreshRancherChart, To: "v1.9",
		Why: "Rancher v2.15 re-reads its own chart repository only when asked"},
}

// AppliesTo says whether a step runs on the upgrade from previous to target,
// and when not, why.
func AppliesTo(id, previous, target string) (bool, string) {
	for _, vs := range VersionSteps {
		if vs.Step != id {
			continue
		}
		if vs.From != "" && !inSeries(previous, vs.From) {
			return false, fmt.Sprintf("only upgrades from %s need it (%s); this one is from %s", vs.From, vs.Why, orUnknown(previous))
		}
		if vs.To != "" && !atLeast(target, vs.To) {
			return false, fmt.Sprintf("only upgrades to %s or newer need it (%s); this one is to %s", vs.To, vs.Why, orUnknown(target))
		}
	}
	return true, ""
}

// inSeries reports whether version belongs to the release line series.
func inSeries(version, series string) bool {
	v, ok := release.ParseSeries(version)
	want, _ := release.ParseSeries(series)
	return ok && v == want
}

// atLeast reports whether version is of the release line series or a newer
// one; a version that names no line (master-head) counts as newer.
func atLeast(version, series string) bool {
	v, ok := release.ParseSeries(version)
	want, _ := release.ParseSeries(series)
	return !ok || v.Compare(want) >= 0
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown release"
	}
	return s
}

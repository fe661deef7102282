package clusterupgrade

import "github.com/harvester/upgrade-toolkit/internal/release"

// VersionSteps are the per-version steps of Harvester's upgrade_manifests.sh,
// as data. A step not listed here runs on every supported path.
var VersionSteps = release.VersionSteps{
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
	{Step: actionTokenRotationOff, To: "v1.9",
		Why: "Rancher v2.15's token rotation would expire Harvester's long-lived tokens"},
}

// AppliesTo says whether a step runs on the upgrade from previous to target,
// and when not, why.
func AppliesTo(id, previous, target string) (bool, string) {
	return VersionSteps.AppliesTo(id, previous, target)
}

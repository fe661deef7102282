// Package clusterupgrade is what the cluster-upgrade Job does, as Go code:
// every step of Harvester's upgrade_manifests.sh that applies to an upgrade
// from a release this toolkit supports, through the Kubernetes API (see
// docs/cluster-upgrade.md for the script's steps and where each one is).
// Each finished step is recorded in the ConfigMap <plan>-cluster-upgrade,
// every step can run again from any line, and every wait has a deadline and
// says what it waits for, so a restarted pod resumes where the last one
// stopped.
package clusterupgrade

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// RancherUpgrader upgrades the embedded Rancher's Helm release to a
// release's Rancher version and returns once Helm has. HelmRancher is the
// real one.
type RancherUpgrader interface {
	Upgrade(ctx context.Context, rel *release.Release, opts RancherOptions) error
}

// RancherOptions are the values the upgrade decides for Rancher's release
// besides the version.
type RancherOptions struct {
	// Replicas, when set, replaces the release's replicas (-2 on a
	// three-node cluster with a witness node: one Rancher per
	// control-plane node but the witness).
	Replicas *int
}

// Timeouts bound the waits of the cluster upgrade; together they stay
// within the Job's three-hour deadline in any normal upgrade.
type Timeouts struct {
	// Repo: the upgrade repo serves the release.
	Repo time.Duration
	// Rancher: the new Rancher runs.
	Rancher time.Duration
	// CAPI: the CAPI Cluster settles; CAPIStable: how long it must stay
	// settled (Rancher's controllers reconcile in bursts).
	CAPI, CAPIStable time.Duration
	// Dependencies: Rancher's Helm releases and Deployments.
	Dependencies time.Duration
	// Fleet: Fleet's agent and the fleet Cluster; FleetReady: how long the
	// fleet Cluster's Ready is waited for (it does not hold up the upgrade).
	Fleet, FleetReady time.Duration
	// ClusterRepo: the new Harvester chart repository is served and indexed.
	ClusterRepo time.Duration
	// Charts: Fleet deployed a ManagedChart's new version.
	Charts time.Duration
	// KubeVirt and Longhorn: they run the new version everywhere;
	// LonghornStable: how long Longhorn's manager must stay ready on every
	// node (a crashing manager is ready for moments between its restarts).
	KubeVirt, Longhorn, LonghornStable time.Duration
	// Addon: an add-on redeployed; an add-on that does not is reported and
	// left for the operator, as it does not hold up the upgrade.
	Addon time.Duration
	// Bundles: every Fleet bundle is ready; reported, not blocking.
	Bundles time.Duration
	// Interval is the time between two checks of a wait.
	Interval time.Duration
}

// DefaultTimeouts fit the cluster-upgrade Job's deadline.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		Repo: 10 * time.Minute, Rancher: 30 * time.Minute, CAPI: 15 * time.Minute, CAPIStable: 30 * time.Second,
		Dependencies: 15 * time.Minute, Fleet: 15 * time.Minute, FleetReady: time.Minute,
		ClusterRepo: 10 * time.Minute, Charts: 30 * time.Minute, KubeVirt: 30 * time.Minute, Longhorn: 30 * time.Minute, LonghornStable: 30 * time.Second,
		Addon: 5 * time.Minute, Bundles: 90 * time.Second, Interval: 5 * time.Second,
	}
}

// Upgrade is the cluster upgrade of one plan.
type Upgrade struct {
	// Client must read from the API server, not from a cache.
	Client client.Client
	// Plan names the UpgradePlan.
	Plan string
	// RepoURL is the repo's base URL (default: the repo Service of the plan).
	RepoURL string
	// Rancher upgrades Rancher's Helm release.
	Rancher RancherUpgrader
	// Addons holds the add-on manifests (Addon objects in YAML) of the
	// release; nil skips them.
	Addons fs.FS
	// CRDs holds CustomResourceDefinitions the release's charts need but
	// Helm does not upgrade (CDI's), applied before the Harvester charts;
	// nil skips them.
	CRDs fs.FS
	// Manifests holds manifests to apply for upgrades from one release, in
	// a directory named after it (v1.7.1/*.yaml); nil skips them.
	Manifests fs.FS
	// Timeouts bound the waits (DefaultTimeouts when zero).
	Timeouts Timeouts
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnStepDone, when set, is called after each step is recorded as done.
	OnStepDone func(step string)
}

// step is one recorded step of the upgrade.
type step struct {
	id, what string
	run      func(context.Context, *run) error
}

// run carries one attempt's knowledge.
type run struct {
	rel      *release.Release
	plan     *v1beta1.UpgradePlan
	progress *progress
}

// previous is the release the cluster ran before the upgrade.
func (r *run) previous() string {
	if r.plan.Status.PreviousVersion == nil {
		return ""
	}
	return *r.plan.Status.PreviousVersion
}

// Steps of the cluster upgrade, by the id recorded in the progress ConfigMap,
// in the order they run.
const (
	StepMultusFailurePolicy        = "rke2-multus-failure-policy"
	StepPreserveOvercommit         = "preserve-overcommit-config"
	StepPauseCharts                = "pause-charts"
	StepDisableVersionManagement   = "disable-cluster-version-management"
	StepTLSInternalCN              = "tls-internal-cn-allowed-services"
	StepProvisioningAdministrated  = "provisioning-administrated"
	StepRancher                    = "upgrade-rancher"
	StepRancherDependencies        = "wait-rancher-dependencies"
	StepRedeployFleetAgent         = "redeploy-fleet-agent"
	StepWaitFleet                  = "wait-fleet"
	StepPatchLocalCluster          = "patch-local-cluster"
	StepCheckLocalRKEState         = "check-local-rke-state"
	StepClusterRepo                = "upgrade-harvester-cluster-repo"
	StepIngressClass               = "ingress-class-name"
	StepApplyCRDs                  = "apply-crds"
	StepHarvesterCRDChart          = "upgrade-harvester-crd-chart"
	StepHarvesterChart             = "upgrade-harvester-chart"
	StepKubeVirt                   = "wait-kubevirt"
	StepSyncContainerdRegistry     = "sync-containerd-registry"
	StepLonghorn                   = "wait-longhorn"
	StepMonitoringLogging          = "upgrade-monitoring-logging-crds"
	StepVersionedManifests         = "apply-versioned-manifests"
	StepAddons                     = "upgrade-addons"
	StepResumeCharts               = "resume-charts"
	StepFleetBundles               = "wait-fleet-bundles"
	StepTraefikConfig              = "rke2-traefik-config"
	actionCleanLegacyCAPIWebhooks  = "clean-legacy-capi-webhooks"
	actionForceRefreshRancherChart = "refresh-rancher-charts"
	actionTokenRotationOff         = "rancher-token-rotation-off"
)

func (u *Upgrade) steps() []step {
	return []step{
		{StepMultusFailurePolicy, "keep RKE2 from reinstalling the multus chart", u.multusFailurePolicy},
		{StepPreserveOvercommit, "keep the storage overcommit the cluster runs with", u.preserveOvercommit},
		{StepPauseCharts, "pause the ManagedCharts", u.pauseCharts},
		{StepDisableVersionManagement, "turn Rancher's cluster version management off", u.disableVersionManagement},
		{StepTLSInternalCN, "set Rancher's tls-internal-cn-allowed-services", u.tlsInternalCNAllowedServices},
		{StepProvisioningAdministrated, "mark the local cluster as administrated by provisioning", u.provisioningAdministrated},
		{StepRancher, "upgrade Rancher", u.upgradeRancher},
		{StepRancherDependencies, "wait for Rancher's dependencies", u.waitRancherDependencies},
		{StepRedeployFleetAgent, "redeploy Fleet's agent", u.redeployFleetAgent},
		{StepWaitFleet, "wait for Fleet to take the local cluster back", u.waitFleet},
		{StepPatchLocalCluster, "patch the local cluster's details", u.patchLocalCluster},
		{StepCheckLocalRKEState, "check the local cluster's RKE state Secret", u.checkLocalRKEState},
		{StepClusterRepo, "serve the new Harvester charts to Rancher", u.upgradeClusterRepo},
		{StepIngressClass, "give Rancher's ingress an ingress class", u.ensureIngressClass},
		{StepApplyCRDs, "apply the CRDs Helm does not upgrade", u.applyCRDs},
		{StepHarvesterCRDChart, "upgrade the Harvester CRD chart", u.upgradeHarvesterCRDChart},
		{StepHarvesterChart, "upgrade the Harvester chart", u.upgradeHarvesterChart},
		{StepKubeVirt, "wait for KubeVirt", u.waitKubeVirt},
		{StepSyncContainerdRegistry, "sync the containerd registry setting to Rancher", u.syncContainerdRegistry},
		{StepLonghorn, "wait for Longhorn", u.waitLonghorn},
		{StepMonitoringLogging, "upgrade the monitoring and logging CRD charts", u.upgradeMonitoringLogging},
		{StepVersionedManifests, "apply the manifests of the release upgraded from", u.applyVersionedManifests},
		{StepAddons, "upgrade the add-ons", u.upgradeAddons},
		{StepResumeCharts, "resume the ManagedCharts", u.resumeCharts},
		{StepFleetBundles, "wait for Fleet's bundles", u.waitFleetBundles},
		{StepTraefikConfig, "configure RKE2's Traefik", u.traefikConfig},
	}
}

// StepIDs lists the steps in order.
func StepIDs() []string {
	var ids []string
	for _, s := range (&Upgrade{}).steps() {
		ids = append(ids, s.id)
	}
	return ids
}

// Run runs the steps not recorded as done, in order, recording each.
func (u *Upgrade) Run(ctx context.Context) error {
	if u.Timeouts == (Timeouts{}) {
		u.Timeouts = DefaultTimeouts()
	}
	if u.Now == nil {
		u.Now = time.Now
	}
	logger := log.FromContext(ctx).WithValues("plan", u.Plan)
	ctx = log.IntoContext(ctx, logger)
	plan, err := helper.Plan(ctx, u.Client, u.Plan)
	if err != nil {
		return err
	}
	// The manager checked this before the Job started; a Job started by
	// hand must not run the steps of a path it does not have.
	if prev := plan.Status.PreviousVersion; prev != nil {
		if err := release.CheckSupportedPath(*prev); err != nil {
			return err
		}
	}
	r := &run{plan: plan}
	if r.progress, err = loadProgress(ctx, u.Client, plan); err != nil {
		return err
	}
	if r.rel, err = u.readRelease(ctx); err != nil {
		return err
	}
	for _, s := range u.steps() {
		// A killed Job starts no further step.
		if err := ctx.Err(); err != nil {
			return &StepError{Step: s.id, What: s.what, Err: err}
		}
		if r.progress.done(s.id) {
			logger.Info("step done in an earlier attempt", "step", s.id)
			continue
		}
		start := time.Now()
		if ok, why := AppliesTo(s.id, r.previous(), r.rel.Harvester); ok {
			logger.Info("step started", "step", s.id)
			if err := s.run(ctx, r); err != nil {
				return &StepError{Step: s.id, What: s.what, Err: err}
			}
		} else {
			logger.Info("step not needed", "step", s.id, "reason", why)
		}
		if err := r.progress.markDone(ctx, s.id); err != nil {
			return err
		}
		logger.Info("step done", "step", s.id, "took", time.Since(start).Round(time.Millisecond).String())
		if u.OnStepDone != nil {
			u.OnStepDone(s.id)
		}
	}
	return nil
}

// StepError is the failure of one step.
type StepError struct {
	Step, What string
	Err        error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("cluster upgrade failed to %s (step %s): %v", e.What, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// readRelease waits for the repo and reads the release.
func (u *Upgrade) readRelease(ctx context.Context) (*release.Release, error) {
	url := u.RepoURL
	if url == "" {
		url = release.BaseURL(cluster.HarvesterNamespace, names.Repo(u.Plan))
	}
	repo, err := release.NewClient(url, release.WithRetries(1, 0))
	if err != nil {
		return nil, err
	}
	var rel *release.Release
	w := waitfor.Wait{What: "the upgrade repo " + url + " to serve the release", Timeout: u.Timeouts.Repo, Interval: u.Timeouts.Interval,
		Hint: fmt.Sprintf("check the repo's pods (kubectl -n %s describe deployment %s)", cluster.HarvesterNamespace, names.Repo(u.Plan))}
	err = w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		var err error
		rel, err = repo.Release(ctx)
		return err == nil, "", err
	})
	return rel, err
}

func (u *Upgrade) wait(what string, timeout time.Duration, hint string) waitfor.Wait {
	return waitfor.Wait{What: what, Timeout: timeout, Interval: u.Timeouts.Interval, Hint: hint}
}

// settling tells how long a state a wait checks has held without a break:
// a component that works in bursts or crashes after it starts is judged
// by a state that lasted, not by one sighting.
type settling struct {
	since time.Time
	need  time.Duration
}

// reset starts the count again: the state could not be read.
func (s *settling) reset() { s.since = time.Time{} }

// held records one check of the state and says whether it has now held for
// the time needed, and for how long, for the wait's status.
func (s *settling) held(ok bool, status string) (bool, string) {
	if !ok {
		s.reset()
		return false, status
	}
	if s.since.IsZero() {
		s.since = time.Now()
	}
	stable := time.Since(s.since)
	return stable >= s.need, fmt.Sprintf("%s, settled for %s of %s", status, stable.Round(time.Second), s.need)
}

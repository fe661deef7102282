// Package clusterupgrade is what the cluster-upgrade Job does, as Go code:
// the steps of Harvester's upgrade_manifests.sh through the Kubernetes API.
// It pauses the ManagedCharts, upgrades the embedded Rancher, serves the new
// Harvester charts to Rancher, upgrades the Harvester CRD and Harvester
// charts, waits for KubeVirt and Longhorn to roll out, upgrades the
// monitoring and logging charts and the add-ons, and resumes the charts it
// paused. Each finished step is recorded in the ConfigMap
// <plan>-cluster-upgrade, and every step can run again, so a restarted pod
// resumes where the last one stopped.
package clusterupgrade

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

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
	Upgrade(ctx context.Context, rel *release.Release) error
}

// Timeouts bound the waits of the cluster upgrade; together they stay
// within the Job's three-hour deadline in any normal upgrade.
type Timeouts struct {
	// Repo: the upgrade repo serves the release.
	Repo time.Duration
	// Rancher: the new Rancher runs.
	Rancher time.Duration
	// ClusterRepo: the new Harvester chart repository is served and indexed.
	ClusterRepo time.Duration
	// Charts: Fleet deployed a ManagedChart's new version.
	Charts time.Duration
	// KubeVirt and Longhorn: they run the new version everywhere.
	KubeVirt, Longhorn time.Duration
	// Addon: an add-on redeployed; an add-on that does not is reported and
	// left for the operator, as it does not hold up the upgrade.
	Addon time.Duration
	// Interval is the time between two checks of a wait.
	Interval time.Duration
}

// DefaultTimeouts fit the cluster-upgrade Job's deadline.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		Repo: 10 * time.Minute, Rancher: 30 * time.Minute, ClusterRepo: 10 * time.Minute,
		Charts: 30 * time.Minute, KubeVirt: 30 * time.Minute, Longhorn: 30 * time.Minute,
		Addon: 5 * time.Minute, Interval: 5 * time.Second,
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
	// Timeouts bound the waits (DefaultTimeouts when zero).
	Timeouts Timeouts
}

// step is one recorded step of the upgrade.
type step struct {
	id, what string
	run      func(context.Context, *run) error
}

// run carries one attempt's knowledge.
type run struct {
	rel      *release.Release
	progress *progress
}

// Steps of the cluster upgrade, by the id recorded in the progress ConfigMap.
const (
	StepPauseCharts       = "pause-charts"
	StepRancher           = "upgrade-rancher"
	StepClusterRepo       = "upgrade-harvester-cluster-repo"
	StepHarvesterCharts   = "upgrade-harvester-charts"
	StepKubeVirt          = "wait-kubevirt"
	StepLonghorn          = "wait-longhorn"
	StepMonitoringLogging = "upgrade-monitoring-logging-crds"
	StepAddons            = "upgrade-addons"
	StepResumeCharts      = "resume-charts"
)

func (u *Upgrade) steps() []step {
	return []step{
		{StepPauseCharts, "pause the ManagedCharts", u.pauseCharts},
		{StepRancher, "upgrade Rancher", u.upgradeRancher},
		{StepClusterRepo, "serve the new Harvester charts to Rancher", u.upgradeClusterRepo},
		{StepHarvesterCharts, "upgrade the Harvester CRD and Harvester charts", u.upgradeHarvesterCharts},
		{StepKubeVirt, "wait for KubeVirt", u.waitKubeVirt},
		{StepLonghorn, "wait for Longhorn", u.waitLonghorn},
		{StepMonitoringLogging, "upgrade the monitoring and logging CRD charts", u.upgradeMonitoringLogging},
		{StepAddons, "upgrade the add-ons", u.upgradeAddons},
		{StepResumeCharts, "resume the ManagedCharts", u.resumeCharts},
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
	logger := log.FromContext(ctx).WithValues("plan", u.Plan)
	ctx = log.IntoContext(ctx, logger)
	plan, err := helper.Plan(ctx, u.Client, u.Plan)
	if err != nil {
		return err
	}
	r := &run{}
	if r.progress, err = loadProgress(ctx, u.Client, plan); err != nil {
		return err
	}
	if r.rel, err = u.readRelease(ctx); err != nil {
		return err
	}
	for _, s := range u.steps() {
		if r.progress.done(s.id) {
			logger.Info("step done in an earlier attempt", "step", s.id)
			continue
		}
		start := time.Now()
		logger.Info("step started", "step", s.id)
		if err := s.run(ctx, r); err != nil {
			return &StepError{Step: s.id, What: s.what, Err: err}
		}
		if err := r.progress.markDone(ctx, s.id); err != nil {
			return err
		}
		logger.Info("step done", "step", s.id, "took", time.Since(start).Round(time.Millisecond).String())
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

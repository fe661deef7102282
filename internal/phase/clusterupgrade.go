package phase

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// clusterUpgradeDeadline bounds the cluster-upgrade Job: Rancher, the
// Harvester charts, KubeVirt and Longhorn all roll in this time.
const clusterUpgradeDeadline = 3 * 3600

// ClusterUpgrade upgrades the cluster's components (Rancher, the Harvester
// charts and CRDs, add-ons) with one Job, after stopping KubeVirt from live
// migrating every VM when it is upgraded along the way.
type ClusterUpgrade struct{}

// Name implements Phase.
func (ClusterUpgrade) Name() string { return v1beta1.StepClusterUpgrade }

// Run implements Phase.
func (ClusterUpgrade) Run(ctx context.Context, s *Scope) (Result, error) {
	// KubeVirt's workload update methods are emptied first (kubeVirtUpdates).
	if r, done, err := recordThenChange(ctx, s, "recording KubeVirt's workload update methods before changing them", kubeVirtUpdates{}); !done {
		return r, err
	}

	job := &batchv1.Job{}
	name := names.ClusterUpgradeJob(s.Plan.Name)
	found, err := s.get(ctx, cluster.HarvesterNamespace, name, job)
	if err != nil {
		return Result{}, err
	}
	if !found {
		job = s.newJob(JobSpec{
			Name:            name,
			Component:       v1beta1.ComponentClusterUpgrade,
			Command:         jobspec.ClusterUpgradeCommand(),
			BackoffLimit:    3,
			DeadlineSeconds: clusterUpgradeDeadline,
			ServiceAccount:  s.Config.ClusterUpgradeServiceAccount,
		})
		if err := s.create(ctx, job, v1beta1.ComponentClusterUpgrade); err != nil {
			return Result{}, err
		}
		return Wait("upgrading the cluster's components: Job %s/%s created", job.Namespace, name), nil
	}
	switch state, reason, msg := JobOutcome(job); state {
	case JobSucceeded:
		checks, err := clusterUpgradeChecks(ctx, s)
		if err != nil {
			return Result{}, err
		}
		return s.verify(gate{name: v1beta1.StepClusterUpgrade, what: "the cluster upgrade", since: finishedAt(job),
			deadline: s.Config.Deadlines.Verify}, checks), nil
	case JobFailed:
		return Fail("%s", s.jobFailure(ctx, "upgrading the cluster's components failed", job, reason, msg)), nil
	}
	return Wait("upgrading the cluster's components: Job %s/%s running", job.Namespace, name), nil
}

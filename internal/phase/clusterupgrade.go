package phase

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"

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
	if r, err := guardKubeVirtMigrations(ctx, s); err != nil || !r.Done {
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

// +kubebuilder:rbac:groups=kubevirt.io,namespace=harvester-system,resources=kubevirts,verbs=patch
// +kubebuilder:rbac:groups=management.cattle.io,namespace=fleet-local,resources=managedcharts,verbs=patch

// guardKubeVirtMigrations empties KubeVirt's workload update methods, so that
// upgrading KubeVirt does not live-migrate every VM of the cluster at once,
// and tells Fleet to leave that change alone. The original values are
// recorded in status first, in one pass, and changed in the next, so that a
// crash in between never records a changed value as the original.
func guardKubeVirtMigrations(ctx context.Context, s *Scope) (Result, error) {
	saved := ensureSaved(s.Plan)
	if saved.KubeVirt == nil {
		methods, found, err := cluster.WorkloadUpdateMethods(ctx, s.Client)
		if err != nil || !found {
			return Done(), err
		}
		has, _, err := cluster.HasKubeVirtComparePatch(ctx, s.Client)
		if err != nil {
			return Result{}, err
		}
		saved.KubeVirt = &v1beta1.SavedKubeVirt{ComparePatchAdded: !has}
		if methods != nil {
			saved.KubeVirt.WorkloadUpdateMethods = ptr.To(methods)
		}
		return Wait("recording KubeVirt's workload update methods before changing them"), nil
	}
	if err := cluster.SetWorkloadUpdateMethods(ctx, s.Client, []string{}); err != nil {
		return Result{}, err
	}
	if saved.KubeVirt.ComparePatchAdded {
		if err := cluster.SetKubeVirtComparePatch(ctx, s.Client, true); err != nil {
			return Result{}, err
		}
	}
	return Done(), nil
}

// ensureSaved returns the plan's saved settings, creating them if needed.
func ensureSaved(p *v1beta1.UpgradePlan) *v1beta1.SavedSettings {
	if p.Status.SavedSettings == nil {
		p.Status.SavedSettings = &v1beta1.SavedSettings{}
	}
	return p.Status.SavedSettings
}

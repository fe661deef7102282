package sim

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/host"
	"github.com/harvester/upgrade-toolkit/internal/host/hosttest"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodejob"
)

// realJobWorks runs the toolkit's own job code in-process (Config.RealJobs):
// the node jobs of internal/nodejob and restore-vm of internal/helper, with
// the simulator's API server and repo, on a host that records what the job
// asks of the node and reboots the node into the plan's release when the
// job asks for a reboot. The cluster-upgrade Job keeps its simulated work:
// the simulator does not play the Rancher, Fleet and KubeVirt upgrades the
// real one waits for.
func (s *Sim) realJobWorks() map[string]JobWork {
	node := func(jobType string) JobWork {
		return func(ctx context.Context, pod *corev1.Pod) error { return s.runNodeJob(ctx, pod, jobType) }
	}
	return map[string]JobWork{
		JobImagePreload:      node(nodejob.TypePrepare),
		JobPreDrain:          node(nodejob.TypePreDrain),
		JobPostDrain:         node(nodejob.TypePostDrain),
		JobSingleNodeUpgrade: node(nodejob.TypeSingleNodeUpgrade),
		JobImageCleanup:      node(nodejob.TypeImageCleanup),
		JobRestoreVM:         s.runRestoreVM,
		JobClusterUpgrade:    s.runClusterUpgrade,
	}
}

// image holds what the toolkit's image carries for the cluster-upgrade Job:
// the add-on manifests (addons/) and the CRDs Helm does not upgrade (crds/).
//
//go:embed image
var image embed.FS

// ClusterUpgradeTimeouts are the real cluster-upgrade Job's bounds in the
// simulator: its defaults, polled as fast as simulated work, with Rancher's
// CAPI controllers settled after a drain step.
func (s *Sim) ClusterUpgradeTimeouts() clusterupgrade.Timeouts {
	t := clusterupgrade.DefaultTimeouts()
	t.Interval = pollInterval
	t.CAPIStable = s.cfg.Timing.DrainStep
	if s.cfg.ClusterUpgradeTimeouts != nil {
		t = *s.cfg.ClusterUpgradeTimeouts
	}
	return t
}

// runClusterUpgrade runs `upgrade-toolkit cluster-upgrade` as the Job's pod
// would.
func (s *Sim) runClusterUpgrade(ctx context.Context, pod *corev1.Pod) error {
	plan := JobEnv(pod)[nodejob.EnvPlan]
	if plan == "" {
		return fmt.Errorf("pod %s/%s has no %s", pod.Namespace, pod.Name, nodejob.EnvPlan)
	}
	addons, _ := fs.Sub(image, "image/addons")
	crds, _ := fs.Sub(image, "image/crds")
	u := &clusterupgrade.Upgrade{
		Client: s.direct, Plan: plan, RepoURL: s.RepoURL(cluster.HarvesterNamespace, names.Repo(plan)),
		Rancher: RancherChart{s: s}, Addons: addons, CRDs: crds, Timeouts: s.ClusterUpgradeTimeouts(),
	}
	return u.Run(ctx)
}

// jobTimeouts are the real jobs' bounds, polled as fast as simulated work.
func jobTimeouts() nodejob.Timeouts {
	t := nodejob.DefaultTimeouts()
	t.Interval = pollInterval
	return t
}

// runNodeJob runs `upgrade-toolkit node <type>` as the Job's pod does, with
// the pod's environment.
func (s *Sim) runNodeJob(ctx context.Context, pod *corev1.Pod, jobType string) error {
	j := &nodejob.Job{Client: s.direct, Timeouts: jobTimeouts()}
	env := JobEnv(pod)
	if err := j.FromEnv(func(k string) string { return env[k] }); err != nil {
		return err
	}
	j.RepoURL = s.RepoURL(cluster.HarvesterNamespace, names.Repo(j.Plan))
	n := &corev1.Node{}
	if err := s.direct.Get(ctx, client.ObjectKey{Name: j.Node}, n); err != nil {
		return fmt.Errorf("reading node %s: %w", j.Node, err)
	}
	j.Host = &hosttest.Fake{
		PrettyName: n.Status.NodeInfo.OSImage,
		OnReboot: func(ctx context.Context, _ host.JobContainer) error {
			_, rm, err := s.jobRelease(ctx, pod)
			if err != nil {
				return err
			}
			return s.ScheduleReboot(ctx, j.Node, jobOfPod(pod), rm.OS, rm.Kubernetes)
		},
	}
	return j.Run(ctx, jobType)
}

// restoreNode is the node whose VMs a restore-vm pod starts: its --node,
// which the Job's node label repeats. The pod itself runs wherever the
// scheduler put it, not necessarily on that node.
func restoreNode(pod *corev1.Pod) string { return pod.Labels[v1beta1.LabelNode] }

// runRestoreVM runs `upgrade-toolkit restore-vm --node <node> --upgrade <plan>`.
func (s *Sim) runRestoreVM(ctx context.Context, pod *corev1.Pod) error {
	node := restoreNode(pod)
	r := &helper.Restorer{Client: s.direct, Power: helper.RunStrategyPower{Client: s.direct}, Interval: pollInterval,
		Events: &helper.Recorder{Client: s.direct, Component: helper.ComponentRestoreVM, Host: node}}
	_, err := r.Restore(ctx, pod.Labels[v1beta1.LabelUpgradePlan], node)
	return err
}

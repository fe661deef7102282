package sim

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/host"
	"github.com/harvester/upgrade-toolkit/internal/host/hosttest"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodejob"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// The work of each job type is the toolkit's own job code, run in-process:
// the node jobs of internal/nodejob, the cluster upgrade of
// internal/clusterupgrade and restore-vm of internal/helper, with the
// simulator's API server and repo. Only the host is fake: a hosttest.Fake
// records what a node job asks of the node, and the reboot it asks for is
// scheduled on the Node, for the node agent to play once the Job completed.

// pollInterval is how often the simulator and the jobs it runs re-check what
// they wait for.
const pollInterval = 20 * time.Millisecond

func (s *Sim) jobWorks() map[string]JobWork {
	node := func(jobType string) JobWork {
		return func(ctx context.Context, pod *corev1.Pod) error { return s.runNodeJob(ctx, pod, jobType) }
	}
	return map[string]JobWork{
		JobImagePreload:      node(jobspec.Prepare),
		JobPreDrain:          node(jobspec.PreDrain),
		JobPostDrain:         node(jobspec.PostDrain),
		JobSingleNodeUpgrade: node(jobspec.SingleNodeUpgrade),
		JobImageCleanup:      node(jobspec.ImageCleanup),
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
// simulator: its defaults, polled as fast as the simulator, with Rancher's
// CAPI controllers and Longhorn's manager settled after a drain step.
func (s *Sim) ClusterUpgradeTimeouts() clusterupgrade.Timeouts {
	t := clusterupgrade.DefaultTimeouts()
	t.Interval = pollInterval
	t.CAPIStable, t.LonghornStable = s.cfg.Timing.DrainStep, s.cfg.Timing.DrainStep
	if s.cfg.ClusterUpgradeTimeouts != nil {
		t = *s.cfg.ClusterUpgradeTimeouts
	}
	return t
}

// runClusterUpgrade runs `upgrade-toolkit cluster-upgrade` as the Job's pod
// would.
func (s *Sim) runClusterUpgrade(ctx context.Context, pod *corev1.Pod) error {
	plan := JobEnv(pod)[jobspec.EnvPlan]
	if plan == "" {
		return fmt.Errorf("pod %s/%s has no %s", pod.Namespace, pod.Name, jobspec.EnvPlan)
	}
	addons, _ := fs.Sub(image, "image/addons")
	crds, _ := fs.Sub(image, "image/crds")
	u := &clusterupgrade.Upgrade{
		Client: s.direct, Plan: plan, RepoURL: s.RepoURL(cluster.HarvesterNamespace, names.Repo(plan)),
		Rancher: RancherChart{s: s}, Addons: addons, CRDs: crds, Timeouts: s.ClusterUpgradeTimeouts(),
	}
	return u.Run(ctx)
}

// jobTimeouts are the real jobs' bounds, polled as fast as the simulator.
func jobTimeouts() nodejob.Timeouts {
	t := nodejob.DefaultTimeouts()
	t.Interval = pollInterval
	return t
}

// runNodeJob runs `upgrade-toolkit node <type>` as the Job's pod does, with
// the pod's environment, on a host that records what the job asks of the
// node and reboots the node into the plan's release when the job asks for a
// reboot.
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
		// The node's containerd: what the job imports or removes stays.
		Present:       s.images.list(j.Node),
		ArchiveImages: s.images.archives,
		Observe:       func(op string) { s.images.observe(j.Node, op) },
		OnReboot: func(ctx context.Context, _ host.JobContainer) error {
			rm, err := s.planRelease(ctx, j.Plan)
			if err != nil {
				return err
			}
			return s.ScheduleReboot(ctx, j.Node, jobOfPod(pod), rm.OS, rm.Kubernetes)
		},
	}
	return j.Run(ctx, jobType)
}

// planRelease returns the release the UpgradePlan installs, which the node
// reboots into.
func (s *Sim) planRelease(ctx context.Context, name string) (*v1beta1.ReleaseMetadata, error) {
	plan := &v1beta1.UpgradePlan{}
	if err := s.reader.Get(ctx, types.NamespacedName{Name: name}, plan); err != nil {
		return nil, fmt.Errorf("reading UpgradePlan %s: %w", name, err)
	}
	rm := plan.Status.ReleaseMetadata
	if rm == nil || rm.OS == "" || rm.Kubernetes == "" {
		return nil, fmt.Errorf("UpgradePlan %s has no status.releaseMetadata with os and kubernetes: the node cannot tell what it reboots into", name)
	}
	return rm, nil
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

func (s *Sim) poll(ctx context.Context, done func() bool) error {
	return wait.PollUntilContextCancel(ctx, pollInterval, true, func(context.Context) (bool, error) { return done(), nil })
}

// reboot is a node reboot the simulator has scheduled, kept in an annotation
// of the Node: once the Job that asked for it is complete, the node goes
// NotReady, and after the reboot time it comes back with the new OS.
type reboot struct {
	// Job is namespace/name of the Job after whose completion the node
	// reboots.
	Job            string `json:"job"`
	OSImage        string `json:"osImage"`
	KubeletVersion string `json:"kubeletVersion"`
	// Since is when the node went down; empty until then.
	Since *metav1.Time `json:"since,omitempty"`
}

const annotationReboot = "sim.upgrade-toolkit.harvesterhci.io/reboot"

// ScheduleReboot makes the node reboot into osImage with kubelet version
// kubelet once the Job completes, like the reboot unit the node jobs install.
// A node listed in FaultSet.NeverReturn stays down.
func (s *Sim) ScheduleReboot(ctx context.Context, node string, job types.NamespacedName, osImage, kubelet string) error {
	r := reboot{Job: job.String(), OSImage: osImage, KubeletVersion: release.KubeletVersionOf(kubelet)}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	return s.mutate(ctx, n, false, func() bool {
		if n.Annotations[annotationReboot] != "" {
			return false
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[annotationReboot] = string(b)
		return true
	})
}

// cutKey splits namespace/name.
func cutKey(key string) (namespace, name string, ok bool) { return strings.Cut(key, "/") }

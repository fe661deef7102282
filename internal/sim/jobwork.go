package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// The simulated work of each job type: the effects the real job commands
// have on the cluster, without touching a host. The VM work of
// internal/helper (recording and stopping the VMs that cannot migrate,
// restore-vm) is not played: the simulator runs the toolkit's own code.
// Config.RealJobs runs the toolkit's own code for every job.

// pollInterval is how often simulated job work re-checks what it waits for.
const pollInterval = 20 * time.Millisecond

func (s *Sim) defaultJobWorks() map[string]JobWork {
	return map[string]JobWork{
		JobImagePreload:      func(context.Context, *corev1.Pod) error { return nil },
		JobImageCleanup:      func(context.Context, *corev1.Pod) error { return nil },
		JobClusterUpgrade:    s.clusterUpgradeWork,
		JobPreDrain:          s.preDrainWork,
		JobPostDrain:         s.postDrainWork,
		JobSingleNodeUpgrade: s.singleNodeUpgradeWork,
		JobRestoreVM:         s.runRestoreVM,
	}
}

// jobPlan is the UpgradePlan a Job's pod works for (label upgrade-plan).
func (s *Sim) jobPlan(ctx context.Context, pod *corev1.Pod) (*v1beta1.UpgradePlan, error) {
	name := pod.Labels[v1beta1.LabelUpgradePlan]
	if name == "" {
		return nil, fmt.Errorf("pod %s/%s has no %s label: the job cannot tell which UpgradePlan it works for", pod.Namespace, pod.Name, v1beta1.LabelUpgradePlan)
	}
	plan := &v1beta1.UpgradePlan{}
	if err := s.reader.Get(ctx, types.NamespacedName{Name: name}, plan); err != nil {
		return nil, fmt.Errorf("reading UpgradePlan %s: %w", name, err)
	}
	return plan, nil
}

// jobRelease returns the plan a Job's pod works for and the release it
// installs.
func (s *Sim) jobRelease(ctx context.Context, pod *corev1.Pod) (*v1beta1.UpgradePlan, *v1beta1.ReleaseMetadata, error) {
	plan, err := s.jobPlan(ctx, pod)
	if err != nil {
		return nil, nil, err
	}
	rm, err := releaseOf(plan)
	return plan, rm, err
}

// releaseOf returns the plan's release metadata, which the jobs need.
func releaseOf(plan *v1beta1.UpgradePlan) (*v1beta1.ReleaseMetadata, error) {
	rm := plan.Status.ReleaseMetadata
	if rm == nil || rm.Harvester == "" || rm.OS == "" || rm.Kubernetes == "" {
		return nil, fmt.Errorf("UpgradePlan %s has no complete status.releaseMetadata (harvester, os, kubernetes): the jobs run only after MetadataPopulate", plan.Name)
	}
	return rm, nil
}

// clusterUpgradeWork upgrades the cluster's components as the
// cluster-upgrade Job does: the Harvester charts to the release's chart
// version (Fleet deploys them and the new Harvester reports its version),
// Rancher to the release's (the new Rancher reports it), the monitoring
// add-on to the release's chart; then it waits until Fleet deployed the
// charts.
func (s *Sim) clusterUpgradeWork(ctx context.Context, pod *corev1.Pod) error {
	_, rm, err := s.jobRelease(ctx, pod)
	if err != nil {
		return err
	}
	charts := []string{cluster.HarvesterCRDManagedChart, cluster.HarvesterManagedChart}
	for _, name := range charts {
		mc := &managementv3.ManagedChart{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: name}}
		if err := s.mutate(ctx, mc, false, func() bool {
			if mc.Spec.Version == rm.HarvesterChart && !mc.Spec.Paused {
				return false
			}
			mc.Spec.Version, mc.Spec.Paused = rm.HarvesterChart, false
			return true
		}); err != nil {
			return fmt.Errorf("upgrading ManagedChart %s: %w", name, err)
		}
	}
	rancher := &managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherServerVersionSetting}}
	if err := s.mutate(ctx, rancher, false, func() bool {
		if rancher.Value == rm.Rancher {
			return false
		}
		rancher.Value = rm.Rancher
		return true
	}); err != nil {
		return fmt.Errorf("upgrading Rancher: %w", err)
	}
	addon := &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.MonitoringNamespace, Name: cluster.MonitoringAddon}}
	if err := s.mutate(ctx, addon, false, func() bool {
		if addon.Spec.Version == rm.MonitoringChart {
			return false
		}
		addon.Spec.Version = rm.MonitoringChart
		return true
	}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("upgrading the monitoring add-on: %w", err)
	}
	return s.poll(ctx, func() bool {
		for _, name := range charts {
			mc := &managementv3.ManagedChart{}
			if s.c.Get(ctx, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, mc) != nil {
				return false
			}
			if ok, _ := cluster.ChartDeployed(mc, rm.HarvesterChart); !ok {
				return false
			}
		}
		return true
	})
}

// preDrainWork is the pre-drain job: it records and stops the VMs that
// cannot live-migrate, taints the node kubevirt.io/drain so KubeVirt
// evacuates the rest, and waits until no instance is left on the node.
func (s *Sim) preDrainWork(ctx context.Context, pod *corev1.Pod) error {
	node := pod.Spec.NodeName
	plan, err := s.jobPlan(ctx, pod)
	if err != nil {
		return err
	}
	if err := s.shutDownNonMigratable(ctx, plan, node); err != nil {
		return err
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := s.mutate(ctx, n, false, func() bool {
		if hasDrainTaint(n) {
			return false
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: cluster.TaintKubeVirtDrain, Value: cluster.KubeVirtDrainTaintValue, Effect: corev1.TaintEffectNoSchedule})
		return true
	}); err != nil {
		return fmt.Errorf("tainting node %s: %w", node, err)
	}
	return s.waitNodeEmpty(ctx, node)
}

// postDrainWork is the post-drain job: it lifts the drain taint and, once
// the Job completed, the node reboots into the new OS.
func (s *Sim) postDrainWork(ctx context.Context, pod *corev1.Pod) error {
	node := pod.Spec.NodeName
	_, rm, err := s.jobRelease(ctx, pod)
	if err != nil {
		return err
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := s.mutate(ctx, n, false, func() bool {
		before := len(n.Spec.Taints)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cluster.TaintKubeVirtDrain })
		return len(n.Spec.Taints) != before
	}); err != nil {
		return fmt.Errorf("removing the drain taint of node %s: %w", node, err)
	}
	return s.ScheduleReboot(ctx, node, jobOfPod(pod), rm.OS, rm.Kubernetes)
}

// singleNodeUpgradeWork is the single-node-upgrade job: it shuts every VM
// down (recording them for restore), has Rancher move the cluster to the
// target Kubernetes version without drain hooks, waits for the kubelet to run
// it, and reboots the node into the new OS once the Job completed.
func (s *Sim) singleNodeUpgradeWork(ctx context.Context, pod *corev1.Pod) error {
	node := pod.Spec.NodeName
	plan, rm, err := s.jobRelease(ctx, pod)
	if err != nil {
		return err
	}
	if err := s.shutDownNonMigratable(ctx, plan, node); err != nil {
		return err
	}
	if err := s.waitNodeEmpty(ctx, node); err != nil {
		return err
	}
	cl := &provisioningv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}}
	if err := s.mutate(ctx, cl, false, func() bool {
		if cl.Spec.KubernetesVersion == rm.Kubernetes {
			return false
		}
		cl.Spec.KubernetesVersion = rm.Kubernetes
		return true
	}); err != nil {
		return fmt.Errorf("setting the Kubernetes version of cluster fleet-local/local: %w", err)
	}
	want := release.KubeletVersionOf(rm.Kubernetes)
	if err := s.poll(ctx, func() bool {
		n := &corev1.Node{}
		return s.c.Get(ctx, types.NamespacedName{Name: node}, n) == nil && n.Status.NodeInfo.KubeletVersion == want
	}); err != nil {
		return fmt.Errorf("waiting for node %s to run Kubernetes %s: %w", node, want, err)
	}
	return s.ScheduleReboot(ctx, node, jobOfPod(pod), rm.OS, rm.Kubernetes)
}

// shutDownNonMigratable runs vm-live-migrate-detector --shutdown, the
// toolkit's own code: it records the node's non-migratable VMs in the
// plan's restore-vm ConfigMap and stops them.
func (s *Sim) shutDownNonMigratable(ctx context.Context, plan *v1beta1.UpgradePlan, node string) error {
	d := &helper.Detector{Client: s.direct, Power: helper.RunStrategyPower{Client: s.direct},
		Events: &helper.Recorder{Client: s.direct, Component: helper.ComponentDetector, Host: node}}
	_, err := d.Shutdown(ctx, plan.Name, node)
	return err
}

// waitNodeEmpty waits until no VirtualMachineInstance runs on the node.
func (s *Sim) waitNodeEmpty(ctx context.Context, node string) error {
	return s.poll(ctx, func() bool {
		var vmis kubevirtv1.VirtualMachineInstanceList
		return s.c.List(ctx, &vmis, client.MatchingLabels{cluster.LabelVMINodeName: node}) == nil && len(vmis.Items) == 0
	})
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

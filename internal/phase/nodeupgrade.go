package phase

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// activeJobType is the node Job a node runs in each state of the drain slot.
var activeJobType = map[v1beta1.NodeUpgradeState]string{
	v1beta1.NodeStatePreDraining:         v1beta1.JobTypePreDrain,
	v1beta1.NodeStatePostDraining:        v1beta1.JobTypePostDrain,
	v1beta1.NodeStateSingleNodeUpgrading: v1beta1.JobTypeSingleNodeUpgrade,
}

// unscheduledRecheck is how often the plan looks again at a node Job whose
// pod the scheduler cannot place.
const unscheduledRecheck = 5 * time.Second

// restoreJobDeadline bounds restore-vm, which waits for KubeVirt 30 minutes
// itself.
const restoreJobDeadline = 35 * 60

// NodeUpgrade upgrades the nodes one at a time. On a multi-node cluster it
// hands the rollout of RKE2 to Rancher, whose drain hooks run the toolkit's
// pre-drain (evacuate VMs) and post-drain (upgrade the OS and reboot) Jobs;
// a single-node cluster is upgraded by one Job.
type NodeUpgrade struct{}

// Name implements Phase.
func (NodeUpgrade) Name() string { return v1beta1.StepNodeUpgrade }

// Run implements Phase.
func (NodeUpgrade) Run(ctx context.Context, s *Scope) (Result, error) {
	nodes, err := managedNodes(ctx, s)
	if err != nil {
		return Result{}, err
	}
	singleNode := s.Plan.Status.SingleNode != nil
	// Nodes the preload skipped or missed start from ImagePreloaded.
	for _, n := range nodes {
		if s.nodeState(n.Name) == "" {
			s.setNodeState(n.Name, v1beta1.NodeStateImagePreloaded, "", "")
		}
	}
	if recorded, err := recordNodeUpgradeSettings(ctx, s, singleNode); err != nil || recorded {
		return Wait("recording the settings the node upgrade changes, before changing them"), err
	}
	if err := applyNodeUpgradeSettings(ctx, s, singleNode); err != nil {
		return Result{}, err
	}

	obs, err := observeNodes(ctx, s, nodes, singleNode)
	if err != nil {
		return Result{}, err
	}
	decisions := nodestate.Decide(obs.nodes, singleNode)
	var failure string
	for _, n := range obs.nodes {
		d := decisions[n.Name]
		before := s.Plan.Status.NodeUpgradeStatuses[n.Name].Message
		if d.HealthGate {
			var overdue string
			if d.Message, overdue = s.holdAtHealthGate(n.Name, d.Message); overdue != "" && failure == "" {
				failure = overdue
			}
		}
		// A decision to stay, with nothing to say, keeps what is recorded
		// (e.g. how the node's VM restore went).
		if d.State != n.State || d.Reason != "" || d.Message != "" {
			s.setNodeState(n.Name, d.State, d.Reason, d.Message)
		}
		if d.State != n.State && beginsOSUpgrade(d.State) {
			// Recorded with the state, before the Job that reboots the node
			// exists: the next boot ID is then proof of the reboot.
			s.recordBoot(n.Name, n.Host.BootID, n.Host.OSImage)
		}
		if d.State != n.State && nodestate.Upgraded(d.State) {
			s.Event(corev1.EventTypeNormal, v1beta1.EventNodeRebootVerified, "Node %s rebooted into %s: %s", n.Name, s.Plan.Status.ReleaseMetadata.OS, d.Message)
		}
		if d.StartJob != "" {
			if err := s.create(ctx, s.nodeJob(d.StartJob, n.Name), v1beta1.ComponentNodeUpgrade); err != nil {
				return Result{}, err
			}
		}
		if n.State == v1beta1.NodeStateWaitingReboot || d.State == v1beta1.NodeStateWaitingReboot {
			if err := setPendingOSImage(ctx, s, n.Name, d.State == v1beta1.NodeStateWaitingReboot); err != nil {
				return Result{}, err
			}
		}
		if n.DrainBlocked != "" && !strings.Contains(before, n.DrainBlocked) {
			// Once per blocker: the node's message keeps it while it blocks.
			s.Event(corev1.EventTypeWarning, v1beta1.EventDrainBlocked, "%s", n.DrainBlocked)
		}
		if d.State.IsFailure() && failure == "" {
			failure = s.nodeFailure(ctx, n.Name, d, obs, before)
		}
	}
	if failure != "" {
		return Fail("%s", failure), nil
	}
	restoring, err := restoreVMs(ctx, s, nodes, obs)
	if err != nil {
		return Result{}, err
	}
	return nodeUpgradeProgress(ctx, s, nodes, obs, restoring), nil
}

// The node upgrade reads the provisioning Cluster from the API server, and
// changes it, the Longhorn setting, the descheduler Addon and the nodes'
// annotations.
//
// +kubebuilder:rbac:groups=provisioning.cattle.io,namespace=fleet-local,resources=clusters,verbs=get;patch
// +kubebuilder:rbac:groups=longhorn.io,namespace=longhorn-system,resources=settings,verbs=patch
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=kube-system,resources=addons,verbs=patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=patch

// recordNodeUpgradeSettings records, before anything is changed, the
// settings the node upgrade changes and, on a multi-node cluster, the
// provisionGeneration it will give Rancher. It reports whether it recorded
// anything new, in which case the caller ends the pass so the record is
// written before any change is made.
func recordNodeUpgradeSettings(ctx context.Context, s *Scope, singleNode bool) (bool, error) {
	saved := ensureSaved(s.Plan)
	recorded := false
	if saved.LonghornReplicaReplenishmentWaitInterval == nil {
		v, found, err := cluster.LonghornSetting(ctx, s.Client, cluster.LonghornReplicaReplenishmentWaitInterval)
		if err != nil {
			return false, err
		}
		if found {
			saved.LonghornReplicaReplenishmentWaitInterval, recorded = &v, true
		}
	}
	if saved.DeschedulerEnabled == nil {
		enabled, found, err := cluster.AddonEnabled(ctx, s.Client, cluster.KubeSystemNamespace, cluster.DeschedulerAddon)
		if err != nil {
			return false, err
		}
		if found {
			saved.DeschedulerEnabled, recorded = &enabled, true
		}
	}
	if !singleNode && s.Plan.Status.ProvisionGeneration == nil {
		// The generation to bump must be fresh: a stale one could be a value
		// Rancher already rolled, and then nothing would happen.
		cl, err := cluster.LocalCluster(ctx, s.APIReader)
		if err != nil {
			return false, err
		}
		strategy, err := cluster.UpgradeStrategyJSON(cl)
		if err != nil {
			return false, err
		}
		gen := int64(1)
		if cl.Spec.RKEConfig != nil {
			gen = cl.Spec.RKEConfig.ProvisionGeneration + 1
		}
		s.Plan.Status.ProvisionGeneration = &gen
		saved.Rancher = &v1beta1.SavedRancher{UpgradeStrategy: strategy}
		recorded = true
	}
	return recorded, nil
}

// applyNodeUpgradeSettings makes the recorded changes; each is idempotent.
func applyNodeUpgradeSettings(ctx context.Context, s *Scope, singleNode bool) error {
	saved := s.Plan.Status.SavedSettings
	if saved.LonghornReplicaReplenishmentWaitInterval != nil {
		if err := cluster.SetLonghornSetting(ctx, s.Client, cluster.LonghornReplicaReplenishmentWaitInterval,
			cluster.UpgradeReplicaReplenishmentWaitInterval); err != nil {
			return err
		}
	}
	if ptr.Deref(saved.DeschedulerEnabled, false) {
		if err := cluster.SetAddonEnabled(ctx, s.Client, cluster.KubeSystemNamespace, cluster.DeschedulerAddon, false); err != nil {
			return err
		}
	}
	if singleNode {
		return nil
	}
	return cluster.RollNodes(ctx, s.Client, s.Plan.Status.ReleaseMetadata.Kubernetes, *s.Plan.Status.ProvisionGeneration)
}

// beginsOSUpgrade reports whether a node entering state s is about to get
// the Job that upgrades its OS and reboots it.
func beginsOSUpgrade(s v1beta1.NodeUpgradeState) bool {
	return s == v1beta1.NodeStatePostDraining || s == v1beta1.NodeStateSingleNodeUpgrading
}

// observation is what one pass saw of the nodes.
type observation struct {
	nodes []nodestate.Node
	// jobs holds the plan's node Jobs by type and node.
	jobs map[string]map[string]*batchv1.Job
	// postDrainPending names machine-plan Secrets Rancher has not finished.
	postDrainPending []string
	// nextDeadline is when the first node waiting in a state with a
	// deadline is overdue; zero when none waits.
	nextDeadline time.Time
}

// observeNodes gathers, for each node, what the state machine decides on.
func observeNodes(ctx context.Context, s *Scope, nodes []corev1.Node, singleNode bool) (*observation, error) {
	obs := &observation{jobs: map[string]map[string]*batchv1.Job{}}
	var jobs batchv1.JobList
	// Read-only lists of the cache's own objects: no copies.
	if err := s.Client.List(ctx, &jobs, client.InNamespace(cluster.HarvesterNamespace), client.UnsafeDisableDeepCopy,
		client.MatchingLabels{v1beta1.LabelUpgradePlan: s.Plan.Name, v1beta1.LabelUpgradeComponent: v1beta1.ComponentNodeUpgrade}); err != nil {
		return nil, fmt.Errorf("listing node Jobs: %w", err)
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		t := j.Labels[v1beta1.LabelJobType]
		if obs.jobs[t] == nil {
			obs.jobs[t] = map[string]*batchv1.Job{}
		}
		obs.jobs[t][j.Labels[v1beta1.LabelNode]] = j
	}

	planSecrets := map[string]client.Object{}
	if !singleNode {
		secrets, err := cluster.MachinePlans(ctx, s.Client)
		if err != nil {
			return nil, err
		}
		nodeOf, err := cluster.NodesOfMachines(ctx, s.Client)
		if err != nil {
			return nil, err
		}
		for i := range secrets {
			sec := &secrets[i]
			if !cluster.IsMachinePlan(sec) {
				continue
			}
			if sec.Annotations[cluster.AnnotationRancherPostDrain] != "" {
				obs.postDrainPending = append(obs.postDrainPending, sec.Name)
			}
			if node := nodeOf[sec.Labels[cluster.LabelMachineName]]; node != "" {
				planSecrets[node] = sec
			} // else a Machine without a node has nothing for us to drain
		}
	}

	slices.Sort(obs.postDrainPending)
	rm := s.Plan.Status.ReleaseMetadata
	target := nodestate.Target{OSImage: rm.OS, KubeletVersion: release.KubeletVersionOf(rm.Kubernetes)}
	now := s.Clock.Now()
	for i := range nodes {
		n := &nodes[i]
		st := s.Plan.Status.NodeUpgradeStatuses[n.Name]
		o := nodestate.Node{
			Name:              n.Name,
			State:             st.State,
			Paused:            s.Plan.IsNodePaused(n.Name),
			PlanPaused:        s.Plan.IsPaused(),
			PreDrain:          jobOf(obs.jobs, v1beta1.JobTypePreDrain, n.Name),
			PostDrain:         jobOf(obs.jobs, v1beta1.JobTypePostDrain, n.Name),
			SingleNodeUpgrade: jobOf(obs.jobs, v1beta1.JobTypeSingleNodeUpgrade, n.Name),
			Host:              hostOf(n),
			Before:            nodestate.Host{BootID: st.PreviousBootID, OSImage: st.PreviousOSImage},
			Target:            target,
		}
		sec := planSecrets[n.Name]
		if sec != nil {
			o.PreDrainRequested = pending(sec, cluster.AnnotationRancherPreDrain, v1beta1.AnnotationPreHook)
			o.PostDrainRequested = pending(sec, cluster.AnnotationRancherPostDrain, v1beta1.AnnotationPostHook)
		}
		if limit := s.stateDeadline(st.State); limit > 0 && st.LastTransitionTime != nil {
			deadline := st.LastTransitionTime.Add(limit)
			o.Overdue = !now.Before(deadline)
			o.Waiting = fmt.Sprintf("since %s; fails at %s", timestamp(st.LastTransitionTime.Time), timestamp(deadline))
			if obs.nextDeadline.IsZero() || deadline.Before(obs.nextDeadline) {
				obs.nextDeadline = deadline
			}
		}
		if st.State == v1beta1.NodeStatePreDrained && sec != nil {
			report, err := describeMachine(ctx, s, sec)
			if err != nil {
				return nil, err
			}
			o.Rancher = report
			if o.DrainBlocked, err = drainBlock(ctx, s, n.Name, sec); err != nil {
				return nil, err
			}
		}
		obs.nodes = append(obs.nodes, o)
	}
	// The health gate asks the API server and lists every volume: only
	// when Rancher waits to drain a node that has not begun its upgrade.
	if !singleNode && slices.ContainsFunc(obs.nodes, nodestate.Node.AtHealthGate) {
		unhealthy, err := healthGate(ctx, s, nodes, obs.jobs[v1beta1.JobTypeRestoreVM])
		if err != nil {
			return nil, err
		}
		for i := range obs.nodes {
			obs.nodes[i].Unhealthy = unhealthy
		}
	}
	return obs, nil
}

// stateDeadline is how long a node may stay in a state that waits for
// something outside the toolkit's Jobs (which have deadlines of their own).
func (s *Scope) stateDeadline(state v1beta1.NodeUpgradeState) time.Duration {
	switch state {
	case v1beta1.NodeStatePreDrained:
		return s.Config.Deadlines.Rancher
	case v1beta1.NodeStateWaitingReboot:
		return s.Config.Deadlines.Reboot
	}
	return 0
}

// The node upgrade reads a machine-plan Secret whole (the cache holds their
// metadata only) to say how far Rancher's agent is with the node's plan.
//
// +kubebuilder:rbac:groups="",namespace=fleet-local,resources=secrets,verbs=get

// describeMachine says what Rancher reports of the machine behind a
// machine-plan Secret: one read of the Secret from the API server per
// version of it, for the node Rancher holds.
func describeMachine(ctx context.Context, s *Scope, sec client.Object) (string, error) {
	reader := s.PlanProgress
	if reader == nil {
		reader = &cluster.PlanProgressReader{Reader: s.APIReader}
	}
	progress, err := reader.Read(ctx, sec)
	if err != nil {
		return "", err
	}
	m := &capiv1beta1.Machine{}
	if found, err := s.get(ctx, cluster.FleetLocalNamespace, sec.GetLabels()[cluster.LabelMachineName], m); err != nil {
		return "", err
	} else if !found {
		m = nil
	}
	cl := &provisioningv1.Cluster{}
	if found, err := s.get(ctx, cluster.FleetLocalNamespace, cluster.LocalClusterName, cl); err != nil {
		return "", err
	} else if !found {
		cl = nil
	}
	return cluster.DescribeMachine(m, sec, &progress, cl), nil
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list

// drainBlock says what keeps Rancher's drain of the node from evicting the
// pods its drain error names, "" without a drain error. It reads the pods
// and PodDisruptionBudgets from the API server: only while a drain fails.
func drainBlock(ctx context.Context, s *Scope, node string, sec client.Object) (string, error) {
	var blocks []string
	for _, key := range cluster.DrainErrorPods(sec.GetAnnotations()[cluster.AnnotationRancherDrainError]) {
		pod := &corev1.Pod{}
		if err := s.APIReader.Get(ctx, key, pod); apierrors.IsNotFound(err) {
			pod = nil
		} else if err != nil {
			return "", fmt.Errorf("reading pod %s, which Rancher's drain cannot evict: %w", key, err)
		}
		var pdbs policyv1.PodDisruptionBudgetList
		if err := s.APIReader.List(ctx, &pdbs, client.InNamespace(key.Namespace)); err != nil {
			return "", fmt.Errorf("listing the PodDisruptionBudgets of namespace %s: %w", key.Namespace, err)
		}
		blocks = append(blocks, cluster.DescribeDrainBlock(node, key, pod, pdbs.Items))
	}
	return strings.Join(blocks, "; "), nil
}

// hostOf is what a node reports of itself.
func hostOf(n *corev1.Node) nodestate.Host {
	return nodestate.Host{
		Ready: cluster.NodeReady(n), BootID: n.Status.NodeInfo.BootID,
		OSImage: n.Status.NodeInfo.OSImage, KubeletVersion: n.Status.NodeInfo.KubeletVersion,
	}
}

// timestamp formats a time for messages.
func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// pending reports whether Rancher's hook request is set and not yet
// acknowledged.
func pending(sec client.Object, request, ack string) bool {
	a := sec.GetAnnotations()
	v := a[request]
	return v != "" && v != a[ack]
}

// jobOf reads a node Job's status for the state machine.
func jobOf(jobs map[string]map[string]*batchv1.Job, jobType, node string) nodestate.Job {
	j := jobs[jobType][node]
	if j == nil {
		return nodestate.Job{}
	}
	switch state, reason, msg := JobOutcome(j); state {
	case JobSucceeded:
		return nodestate.Job{Status: nodestate.JobSucceeded}
	case JobFailed:
		return nodestate.Job{Status: nodestate.JobFailed, Reason: reason, Message: msg}
	}
	return nodestate.Job{Status: nodestate.JobRunning}
}

// nodeJob builds a node Job of the given type.
func (s *Scope) nodeJob(jobType, node string) *batchv1.Job {
	return s.newJob(JobSpec{
		Name:      names.NodeJob(s.Plan.Name, jobType, node),
		Component: v1beta1.ComponentNodeUpgrade,
		Labels:    map[string]string{v1beta1.LabelJobType: jobType, v1beta1.LabelNode: node},
		Node:      node,
		// Evacuating, upgrading the OS and rebooting need the host.
		Privileged: true,
		Command:    []string{"upgrade-toolkit", "node", jobType},
		Env: []corev1.EnvVar{
			{Name: "HARVESTER_UPGRADE_NODE_NAME", Value: node},
			{Name: "HARVESTER_UPGRADE_POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		},
		BackoffLimit:    2,
		DeadlineSeconds: int64(s.Config.Deadlines.NodeJob.Seconds()),
	})
}

// setPendingOSImage marks a node that waits to reboot into the new OS with
// the OS image it must report, and unmarks it otherwise.
func setPendingOSImage(ctx context.Context, s *Scope, node string, waiting bool) error {
	n := &corev1.Node{}
	if found, err := s.get(ctx, "", node, n); err != nil || !found {
		return err
	}
	want := ""
	if waiting {
		want = s.Plan.Status.ReleaseMetadata.OS
	}
	if n.Annotations[v1beta1.AnnotationPendingOSImage] == want {
		return nil
	}
	before := n.DeepCopy()
	if want == "" {
		delete(n.Annotations, v1beta1.AnnotationPendingOSImage)
	} else {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[v1beta1.AnnotationPendingOSImage] = want
	}
	if err := s.Client.Patch(ctx, n, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("annotating node %s with %s: %w", node, v1beta1.AnnotationPendingOSImage, err)
	}
	return nil
}

// nodeFailure describes a failed node for the plan's failure message.
// A Job that failed at its deadline without ever running has no pod left to
// ask why: before is the node's message from before the failure, which says
// so (see nodeUpgradeProgress).
func (s *Scope) nodeFailure(ctx context.Context, node string, d nodestate.Decision, obs *observation, before string) string {
	jobType := map[v1beta1.NodeUpgradeState]string{
		v1beta1.NodeStatePreDrainFailed:          v1beta1.JobTypePreDrain,
		v1beta1.NodeStatePostDrainFailed:         v1beta1.JobTypePostDrain,
		v1beta1.NodeStateSingleNodeUpgradeFailed: v1beta1.JobTypeSingleNodeUpgrade,
	}[d.State]
	what := fmt.Sprintf("upgrading node %s failed in %s", node, d.State)
	if j := obs.jobs[jobType][node]; j != nil && jobOf(obs.jobs, jobType, node).Status == nodestate.JobFailed {
		failure := s.jobFailure(ctx, what, j, d.Reason, d.Message)
		if d.Reason == batchv1.JobReasonDeadlineExceeded && strings.Contains(before, unschedulableMark) {
			failure += "\nbefore its deadline, " + before
		}
		return failure
	}
	return fmt.Sprintf("%s: %s; no further node is drained: check the node, then delete this plan", what, d.Message)
}

// restoreVMs starts, for each node back from its reboot, a Job that restarts
// the VMs shut down for it, and reports on each node how that goes. A slow
// or failed restore never holds up the next node. It returns the nodes whose
// restore still runs.
func restoreVMs(ctx context.Context, s *Scope, nodes []corev1.Node, obs *observation) ([]string, error) {
	if !s.Plan.RestoreVMEnabled() {
		return nil, nil
	}
	cm := &corev1.ConfigMap{}
	found, err := s.get(ctx, cluster.HarvesterNamespace, names.RestoreVMConfigMap(s.Plan.Name), cm)
	if err != nil || !found {
		return nil, err
	}
	var running []string
	for _, n := range nodes {
		st := s.Plan.Status.NodeUpgradeStatuses[n.Name]
		if !nodestate.Upgraded(st.State) || strings.TrimSpace(cm.Data[n.Name]) == "" || cluster.IsWitness(&n) {
			continue
		}
		j := obs.jobs[v1beta1.JobTypeRestoreVM][n.Name]
		if j == nil {
			job := s.newJob(JobSpec{
				Name:            names.NodeJob(s.Plan.Name, v1beta1.JobTypeRestoreVM, n.Name),
				Component:       v1beta1.ComponentNodeUpgrade,
				Labels:          map[string]string{v1beta1.LabelJobType: v1beta1.JobTypeRestoreVM, v1beta1.LabelNode: n.Name},
				Command:         []string{"upgrade-toolkit", "restore-vm", "--node", n.Name, "--upgrade", s.Plan.Name},
				BackoffLimit:    1,
				DeadlineSeconds: restoreJobDeadline,
			})
			if err := s.create(ctx, job, v1beta1.ComponentNodeUpgrade); err != nil {
				return nil, err
			}
			s.setNodeState(n.Name, st.State, "", "restoring the VMs shut down for the upgrade: "+cm.Data[n.Name])
			running = append(running, n.Name)
			continue
		}
		switch state, reason, msg := JobOutcome(j); state {
		case JobSucceeded:
			s.setNodeState(n.Name, st.State, "", "restored the VMs shut down for the upgrade: "+cm.Data[n.Name])
		case JobFailed:
			if s.setNodeState(n.Name, st.State, "RestoreVMFailed", fmt.Sprintf("restoring the VMs failed (%s: %s): start them by hand: %s", reason, msg, cm.Data[n.Name])) {
				s.Event(corev1.EventTypeWarning, v1beta1.EventRestoreVMFailed, "Restoring VMs on node %s failed: Job %s/%s %s: %s", n.Name, j.Namespace, j.Name, reason, msg)
			}
		default:
			running = append(running, n.Name)
		}
	}
	return running, nil
}

// nodeUpgradeProgress says whether the phase is done and, if not, what it
// waits for.
func nodeUpgradeProgress(ctx context.Context, s *Scope, nodes []corev1.Node, obs *observation, restoring []string) Result {
	var done, paused, todo []string
	active, unscheduled := "", false
	for _, n := range nodes {
		st := s.nodeState(n.Name)
		switch {
		case nodestate.Upgraded(st):
			done = append(done, n.Name)
		case st == v1beta1.NodeStateUpgradePaused && s.Plan.HoldsNode(n.Name):
			paused = append(paused, n.Name)
		case nodestate.InDrainSlot(st) || st == v1beta1.NodeStateSingleNodeUpgrading:
			active = fmt.Sprintf("upgrading node %s (%s)", n.Name, st)
			if j := obs.jobs[activeJobType[st]][n.Name]; j != nil {
				if why := s.unscheduled(ctx, j); why != "" {
					s.setNodeState(n.Name, st, "", fmt.Sprintf("Job %s/%s waits: %s", j.Namespace, j.Name, why))
					unscheduled = true
				}
			}
			if msg := s.Plan.Status.NodeUpgradeStatuses[n.Name].Message; msg != "" {
				active = fmt.Sprintf("upgrading node %s (%s: %s)", n.Name, st, msg)
			}
			todo = append(todo, n.Name)
		default:
			todo = append(todo, n.Name)
		}
	}
	if len(done) == len(nodes) && len(obs.postDrainPending) == 0 && len(restoring) == 0 {
		return Done()
	}
	parts := []string{fmt.Sprintf("%d of %d nodes upgraded", len(done), len(nodes))}
	if s.Plan.IsPaused() {
		if active == "" && len(restoring) == 0 && len(obs.postDrainPending) == 0 {
			return Hold("paused (spec.paused) during NodeUpgrade: %s, no node under way; set spec.paused to false to resume", parts[0])
		}
		parts = append(parts, "pausing (spec.paused): no other node starts once the one under way is done")
	}
	if active != "" {
		parts = append(parts, active)
	}
	if len(paused) > 0 && !s.Plan.IsPaused() {
		parts = append(parts, "node upgrade paused: "+list(paused))
	}
	if len(done) == len(nodes) && len(obs.postDrainPending) > 0 {
		parts = append(parts, "waiting for Rancher to finish the last node (machine-plan Secret "+list(obs.postDrainPending)+" still has "+cluster.AnnotationRancherPostDrain+")")
	} else if active == "" && len(paused) == 0 && len(todo) > 0 && s.Plan.Status.SingleNode == nil {
		parts = append(parts, "waiting for Rancher to start on the next node ("+list(todo)+")")
	}
	if len(restoring) > 0 {
		parts = append(parts, "restoring VMs on "+list(restoring))
	}
	r := Wait("%s", strings.Join(parts, "; "))
	if !obs.nextDeadline.IsZero() {
		// Nothing changes when a node's deadline passes: come back then.
		r = r.After(max(obs.nextDeadline.Sub(s.Clock.Now()), time.Second))
	}
	if unscheduled && (r.RequeueAfter == 0 || r.RequeueAfter > unscheduledRecheck) {
		// A pending pod changes nothing the plan watches until its Job's
		// deadline: look again for what the scheduler says.
		r = r.After(unscheduledRecheck)
	}
	return r
}

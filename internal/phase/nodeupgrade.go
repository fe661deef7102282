package phase

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/kept"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/window"
)

// activeJobType is the node Job a node runs in each state of the drain slot.
var activeJobType = map[v1beta1.NodeUpgradeState]string{
	v1beta1.NodeStatePreDraining:         jobspec.PreDrain,
	v1beta1.NodeStatePostDraining:        jobspec.PostDrain,
	v1beta1.NodeStateSingleNodeUpgrading: jobspec.SingleNodeUpgrade,
}

// unscheduledRecheck is how often the plan looks again at a node Job whose
// pod the scheduler cannot place.
const unscheduledRecheck = 5 * time.Second

// NodeUpgrade upgrades the nodes one at a time. On a multi-node cluster it
// hands the rollout of RKE2 to Rancher, whose drain hooks run the toolkit's
// pre-drain (evacuate VMs) and post-drain (upgrade the OS and reboot) Jobs;
// a single-node cluster is upgraded by one Job.
type NodeUpgrade struct{}

// Name implements Phase.
func (NodeUpgrade) Name() string { return v1beta1.StepNodeUpgrade }

// Run implements Phase.
func (NodeUpgrade) Run(ctx context.Context, s *Scope) (Result, error) {
	nodes, err := s.Kept.ManagedNodes(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	singleNode := s.Plan.Status.SingleNode != nil
	// Nodes the preload skipped or missed start from ImagePreloaded.
	for i := range nodes {
		n := &nodes[i]
		if s.nodeState(n.Name) == "" {
			s.setNodeState(n.Name, v1beta1.NodeStateImagePreloaded, "", "")
		}
	}
	settings := []savedSetting{longhornReplenishment{}, deschedulerAddon{}}
	if !singleNode {
		settings = append(settings, rancherStrategy{})
	}
	if r, done, err := recordThenChange(ctx, s, "recording the settings the node upgrade changes, before changing them", settings...); !done {
		return r, err
	}

	// The nodes whose upgrade was recorded before this pass: the cleanup
	// takes a node only once its verified upgrade is in the status.
	recorded := upgradedNodes(s, nodes)
	obs, err := observeNodes(ctx, s, nodes, singleNode)
	if err != nil {
		return Result{}, err
	}
	defer obs.release()
	decisions := obs.decide(singleNode)
	var failure string
	for i := range obs.nodes {
		f, err := s.stepNode(ctx, &obs.nodes[i], decisions[i], obs, failure != "")
		if err != nil {
			return Result{}, err
		}
		if failure == "" {
			failure = f
		}
	}
	if failure != "" {
		return Fail("%s", failure), nil
	}
	ledger, err := s.Ledgers.Read(ctx, s.Client, s.Plan.Name)
	if err != nil {
		return Result{}, err
	}
	deadline, err := s.nodeVMs(ctx, nodes, ledger, obs.jobs[jobspec.PreDrain])
	if err != nil {
		return Result{}, err
	}
	if err := s.nodeReplicas(ctx); err != nil {
		return Result{}, err
	}
	restoring, err := restoreVMs(ctx, s, nodes, obs, ledger)
	if err != nil {
		return Result{}, err
	}
	if err := cleanEarly(ctx, s, recorded); err != nil {
		return Result{}, err
	}
	r := nodeUpgradeProgress(ctx, s, nodes, obs, restoring)
	if wait := deadline.Sub(s.Clock.Now()); !deadline.IsZero() && (r.RequeueAfter == 0 || wait < r.RequeueAfter) {
		// Nothing changes when a migration deadline passes: look then.
		r = r.After(max(wait, time.Second))
	}
	if r.Done {
		s.Kept.Forget(kept.NodeJobs(s.Plan.Name).Key(), kept.DrainRequestsKey)
	}
	return r, nil
}

// stepNode carries out the decision for one node: it records the node's
// new state (and, as its OS upgrade begins, the boot it leaves), starts the
// Job the node needs, marks a node that waits to reboot, and tells of a
// blocked drain once. It returns what fails the plan when the node failed
// it or outlived the health gate; failed says that another node of this
// pass already did, which spares the reads that describe a failure.
func (s *Scope) stepNode(ctx context.Context, n *nodestate.Node, d nodestate.Decision, obs *observation, failed bool) (string, error) {
	var failure string
	before := s.Plan.Status.NodeUpgradeStatuses[n.Name].Message
	if d.Breaker || d.Window {
		// The breaker and the maintenance windows have no deadline; the
		// health gate's starts again once they let go.
		s.clearHealthGateSince(n.Name)
	}
	if d.HealthGate {
		var overdue string
		if d.Message, overdue = s.holdAtHealthGate(n.Name, d.Message); overdue != "" && !failed {
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
	if d.State != n.State && d.State == v1beta1.NodeStateExcluded {
		s.Event(corev1.EventTypeWarning, v1beta1.EventNodeExcluded, "Node %s %s", n.Name, d.Message)
		s.setNodesExcluded()
	}
	if d.State != n.State && nodestate.Upgraded(d.State) {
		s.Event(corev1.EventTypeNormal, v1beta1.EventNodeRebootVerified, "Node %s rebooted into %s: %s", n.Name, s.Plan.Status.ReleaseMetadata.OS, d.Message)
	}
	if d.StartJob != "" {
		if err := s.create(ctx, s.nodeJob(d.StartJob, n.Name), v1beta1.ComponentNodeUpgrade); err != nil {
			return "", err
		}
	}
	if n.State == v1beta1.NodeStateWaitingReboot || d.State == v1beta1.NodeStateWaitingReboot {
		if err := setPendingOSImage(ctx, s, n.Name, d.State == v1beta1.NodeStateWaitingReboot); err != nil {
			return "", err
		}
	}
	if n.DrainBlocked != "" && !strings.Contains(before, n.DrainBlocked) {
		// Once per blocker: the node's message keeps it while it blocks.
		s.Event(corev1.EventTypeWarning, v1beta1.EventDrainBlocked, "%s", n.DrainBlocked)
	}
	if d.State.IsFailure() && !nodestate.Upgraded(d.State) && failure == "" && !failed {
		failure = s.nodeFailure(ctx, n.Name, d, obs, before)
	}
	return failure, nil
}

// setNodesExcluded sets the plan's NodesExcluded condition: which nodes
// were excluded, and what is left to do for them.
func (s *Scope) setNodesExcluded() {
	excluded := s.Plan.ExcludedNodes()
	if len(excluded) == 0 {
		return
	}
	meta.SetStatusCondition(&s.Plan.Status.Conditions, metav1.Condition{
		Type: v1beta1.ConditionNodesExcluded, Status: metav1.ConditionTrue, Reason: v1beta1.ReasonExcludedByOperator,
		ObservedGeneration: s.Plan.Generation,
		Message: fmt.Sprintf("node(s) %s excluded from the upgrade while down (spec.nodeUpgradeOption.excludeNodes): the upgrade goes on and ends "+
			"without them, and they are not upgraded. Remove each from the cluster (Harvester: Hosts, Delete; this also removes its etcd member), "+
			"or repair it and upgrade it with a new plan", list(excluded)),
	})
}

// beginsOSUpgrade reports whether a node entering state s is about to get
// the Job that upgrades its OS and reboots it.
func beginsOSUpgrade(s v1beta1.NodeUpgradeState) bool {
	return s == v1beta1.NodeStatePostDraining || s == v1beta1.NodeStateSingleNodeUpgrading
}

// nodeJob builds a node Job of the given type.
func (s *Scope) nodeJob(jobType, node string) *batchv1.Job {
	return s.newJob(JobSpec{
		Name:      names.NodeJob(s.Plan.Name, jobType, node),
		Component: v1beta1.ComponentNodeUpgrade,
		Labels:    map[string]string{v1beta1.LabelJobType: jobType, v1beta1.LabelNode: node},
		Node:      node,
		// Evacuating, upgrading the OS and rebooting need the host.
		Privileged:      true,
		Command:         jobspec.NodeCommand(jobType),
		Env:             jobspec.NodeEnv(node),
		BackoffLimit:    2,
		DeadlineSeconds: int64(s.Config.Deadlines.NodeJob.Seconds()),
	})
}

// The node upgrade marks the nodes that wait to reboot.
//
// +kubebuilder:rbac:groups="",resources=nodes,verbs=patch

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
		v1beta1.NodeStatePreDrainFailed:          jobspec.PreDrain,
		v1beta1.NodeStatePostDrainFailed:         jobspec.PostDrain,
		v1beta1.NodeStateSingleNodeUpgradeFailed: jobspec.SingleNodeUpgrade,
	}[d.State]
	what := fmt.Sprintf("upgrading node %s failed in %s", node, d.State)
	if j := obs.jobs[jobType][node]; j != nil && jobOf(j).Status == nodestate.JobFailed {
		failure := s.jobFailure(ctx, what, j, d.Reason, d.Message)
		if d.Reason == batchv1.JobReasonDeadlineExceeded && strings.Contains(before, unschedulableMark) {
			failure += "\nbefore its deadline, " + before
		}
		if d.State == v1beta1.NodeStatePreDrainFailed {
			// The Job gave up on VMs that would not move: say which, and
			// what the operator can choose before the retry.
			if vms, err := s.troublesOf(ctx, node); err == nil && vms != "" {
				failure += "\n" + vms
			}
		}
		return failure
	}
	return fmt.Sprintf("%s: %s; no further node is drained: check the node, then delete this plan", what, d.Message)
}

// nodeUpgradeProgress says whether the phase is done and, if not, what it
// waits for.
func nodeUpgradeProgress(ctx context.Context, s *Scope, nodes []corev1.Node, obs *observation, restoring []string) Result {
	var paused, todo, excluded, cleanFailed, cleaning []string
	active, held, unscheduled, done, cleaned, toBegin := "", "", false, 0, 0, 0
	for i := range nodes {
		n := &nodes[i]
		st := s.nodeState(n.Name)
		switch {
		case st == v1beta1.NodeStateExcluded:
			excluded = append(excluded, n.Name)
			done++
		case nodestate.Upgraded(st):
			done++
			switch st {
			case v1beta1.NodeStateImageCleaning:
				cleaning = append(cleaning, n.Name)
			case v1beta1.NodeStateImageCleaned:
				cleaned++
			case v1beta1.NodeStateImageCleanFailed:
				cleanFailed = append(cleanFailed, n.Name)
			}
		case st == v1beta1.NodeStateUpgradePaused && s.Plan.HoldsNode(n.Name):
			paused = append(paused, n.Name)
			toBegin++
		case nodestate.UnderWay(st):
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
			if msg := s.Plan.Status.NodeUpgradeStatuses[n.Name].Message; strings.HasPrefix(msg, nodestate.BreakerPrefix) || strings.HasPrefix(msg, nodestate.HealthGatePrefix) {
				held = "node " + n.Name + " held by the " + msg
			}
			todo = append(todo, n.Name)
			toBegin++
		}
	}
	w := obs.windows
	waiting := w.closed && toBegin > 0 && !s.Plan.AbortRequested()
	s.recordWindowWait(w, waiting, waiting && active == "", len(nodes)-done)
	if done == len(nodes) && len(obs.postDrainPending) == 0 && len(restoring) == 0 {
		return Done()
	}
	parts := []string{fmt.Sprintf("%d of %d nodes upgraded", done-len(excluded), len(nodes))}
	if len(excluded) > 0 {
		parts[0] += fmt.Sprintf(", %d excluded (%s)", len(excluded), list(excluded))
	}
	if s.Plan.AbortRequested() {
		// The plan ends Aborted as soon as no node is under way
		// (pipeline.CanAbortNow).
		parts = append(parts, "aborting (spec.abort): no other node starts, the plan ends Aborted once the node under way is back")
	} else if s.Plan.IsPaused() {
		if active == "" && len(restoring) == 0 && len(obs.postDrainPending) == 0 && len(cleaning) == 0 {
			resume := "set spec.paused to false to resume"
			if waiting {
				// Paused wins the message; the window still holds after.
				resume += "; the nodes left then wait for a maintenance window: " + w.hold
			}
			return Hold("paused (spec.paused) during NodeUpgrade: %s, no node under way; %s", parts[0], resume).
				After(w.nextWindowChange(s.Clock.Now(), waiting, toBegin > 0))
		}
		parts = append(parts, "pausing (spec.paused): no other node starts once the one under way is done")
		if len(cleaning) > 0 {
			parts = append(parts, "no other image cleanup starts once the one under way on "+list(cleaning)+" is done")
		}
	}
	if active != "" {
		parts = append(parts, active)
	}
	switch {
	case waiting && active != "":
		parts = append(parts, "no maintenance window is open: no other node begins once this one is done; "+w.hold)
	case waiting:
		parts = append(parts, fmt.Sprintf("waiting for a maintenance window (%s): %s; %d nodes left", window.Path, w.hold, len(nodes)-done))
	case held != "":
		parts = append(parts, held)
	}
	if len(paused) > 0 && !s.Plan.IsPaused() && !s.Plan.AbortRequested() {
		parts = append(parts, "node upgrade paused: "+list(paused))
	}
	if done == len(nodes) && len(obs.postDrainPending) > 0 {
		parts = append(parts, "waiting for Rancher to finish the last node (machine-plan Secret "+list(obs.postDrainPending)+" still has "+cluster.AnnotationRancherPostDrain+")")
	} else if active == "" && held == "" && !waiting && len(paused) == 0 && len(todo) > 0 && s.Plan.Status.SingleNode == nil {
		parts = append(parts, "waiting for Rancher to start on the next node ("+list(todo)+")")
	}
	if len(restoring) > 0 {
		parts = append(parts, "restoring VMs on "+list(restoring))
	}
	if cleaned > 0 {
		parts = append(parts, fmt.Sprintf("old images removed from %d upgraded nodes", cleaned))
	}
	if len(cleanFailed) > 0 {
		parts = append(parts, "removing old images failed on "+list(cleanFailed)+" (see the node's message; ImageCleanup fails on it, and a retry runs it again)")
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
	if d := w.nextWindowChange(s.Clock.Now(), waiting, toBegin > 0); d > 0 && (r.RequeueAfter == 0 || d < r.RequeueAfter) {
		// Nothing watched changes as a window opens or closes: look then.
		r = r.After(d)
	}
	return r
}

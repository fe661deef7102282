package phase

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// observation is what one pass saw of the nodes.
type observation struct {
	nodes []nodestate.Node
	// decisions are the nodes', index for index, once decided.
	decisions []nodestate.Decision
	// jobs holds the plan's node Jobs by type and node.
	jobs map[string]map[string]*batchv1.Job
	// postDrainPending names machine-plan Secrets Rancher has not finished.
	postDrainPending []string
	// nextDeadline is when the first node waiting in a state with a
	// deadline is overdue; zero when none waits.
	nextDeadline time.Time
}

// JobChangeMatters reports whether a Job's update changes what a plan reads
// of it (readNodeJobs, the node Jobs it keeps between passes): its
// outcome (conditions, counts, start and completion), suspension, deletion
// and labels. The Job controller's bookkeeping (pods not yet counted, pods
// terminating, finalizers) does not: with four Jobs per node, each such
// update would be a pass over every node.
func JobChangeMatters(o, n *batchv1.Job) bool {
	was, is := o.Status, n.Status
	return was.Active != is.Active || !ptr.Equal(was.Ready, is.Ready) || was.Succeeded != is.Succeeded || was.Failed != is.Failed ||
		(was.StartTime == nil) != (is.StartTime == nil) || !was.CompletionTime.Equal(is.CompletionTime) ||
		!ptr.Equal(o.Spec.Suspend, n.Spec.Suspend) || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
		!maps.Equal(o.Labels, n.Labels) ||
		!slices.EqualFunc(was.Conditions, is.Conditions, func(a, b batchv1.JobCondition) bool {
			return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
		})
}

// What the node upgrade's passes keep (Reuse): the plan's node Jobs and the
// drain requests.
const drainRequestsKey = "drain-requests"

func nodeJobsKey(plan string) string { return "node-jobs/" + plan }

// readNodeJobs reads the plan's node Jobs by type and node, from the cache:
// read them, never change them, and read only what JobChangeMatters
// compares.
func readNodeJobs(ctx context.Context, s *Scope) (map[string]map[string]*batchv1.Job, error) {
	return readJobs(ctx, s, jobSelection{
		name:      nodeJobsKey(s.Plan.Name),
		namespace: cluster.HarvesterNamespace,
		labels:    client.MatchingLabels{v1beta1.LabelUpgradePlan: s.Plan.Name, v1beta1.LabelUpgradeComponent: v1beta1.ComponentNodeUpgrade},
		slotOf: func(labels map[string]string) jobSlot {
			return jobSlot{jobType: labels[v1beta1.LabelJobType], node: labels[v1beta1.LabelNode]}
		},
	})
}

// drainRequests is what Rancher's machine-plan Secrets say of the drains.
type drainRequests struct {
	// secrets holds each node's machine-plan Secret.
	secrets map[string]client.Object
	// postDrainPending names machine-plan Secrets Rancher has not finished.
	postDrainPending []string
	// nodeOf names the node of each Machine, and nodeOfSecret the node of
	// each Secret in secrets.
	nodeOf, nodeOfSecret map[string]string
	// ambiguous: two Secrets claim one node, and which one a pass reads is
	// the list's to say.
	ambiguous bool
}

// byNode returns the machine-plan Secret of each node; none on a
// single-node cluster.
func (d *drainRequests) byNode() map[string]client.Object {
	if d == nil {
		return nil
	}
	return d.secrets
}

// readDrainRequests keeps what the machine-plan Secrets say from one pass to
// the next, reading again only the Secrets that changed; a change of a
// Machine (which names its node) reads them all.
func readDrainRequests(ctx context.Context, s *Scope) (*drainRequests, error) {
	return reuseUpdating(s.Reuse, drainRequestsKey, KindMachinePlans,
		func() (*drainRequests, error) { return listDrainRequests(ctx, s) },
		func(d *drainRequests, changed []client.ObjectKey) (*drainRequests, error) {
			return d.update(ctx, s, changed)
		},
		KindMachines)
}

// listDrainRequests reads the machine-plan Secrets and the Machines that
// name their nodes.
func listDrainRequests(ctx context.Context, s *Scope) (*drainRequests, error) {
	secrets, err := cluster.MachinePlans(ctx, s.Client)
	if err != nil {
		return nil, err
	}
	nodeOf, err := cluster.NodesOfMachines(ctx, s.Client)
	if err != nil {
		return nil, err
	}
	d := &drainRequests{secrets: map[string]client.Object{}, nodeOf: nodeOf, nodeOfSecret: map[string]string{}}
	for i := range secrets {
		d.put(&secrets[i])
	}
	slices.Sort(d.postDrainPending)
	return d, nil
}

// put records a machine-plan Secret; the caller sorts postDrainPending.
func (d *drainRequests) put(sec *metav1.PartialObjectMetadata) {
	if !cluster.IsMachinePlan(sec) {
		return
	}
	if sec.Annotations[cluster.AnnotationRancherPostDrain] != "" {
		d.postDrainPending = append(d.postDrainPending, sec.Name)
	}
	if node := d.nodeOf[sec.Labels[cluster.LabelMachineName]]; node != "" {
		d.ambiguous = d.ambiguous || d.secrets[node] != nil
		d.secrets[node] = sec
		d.nodeOfSecret[sec.Name] = node
	} // else a Machine without a node has nothing for us to drain
}

// update reads again the machine-plan Secrets named in changed; when two
// Secrets claim one node, it lists them all. The pending list is a new
// slice: an observation may hold the old one.
func (d *drainRequests) update(ctx context.Context, s *Scope, changed []client.ObjectKey) (*drainRequests, error) {
	pending := slices.Clone(d.postDrainPending)
	d.postDrainPending = nil // put appends the pending Secrets read again
	for _, key := range changed {
		if key.Namespace != cluster.FleetLocalNamespace {
			continue
		}
		sec := cluster.MachinePlan()
		found, err := s.get(ctx, key.Namespace, key.Name, sec, client.UnsafeDisableDeepCopy)
		if err != nil {
			return nil, fmt.Errorf("reading machine-plan Secret %s: %w", key, err)
		}
		if node, ok := d.nodeOfSecret[key.Name]; ok {
			delete(d.secrets, node)
			delete(d.nodeOfSecret, key.Name)
		}
		pending = slices.DeleteFunc(pending, func(name string) bool { return name == key.Name })
		if found {
			d.put(sec)
		}
		if d.ambiguous {
			return listDrainRequests(ctx, s)
		}
	}
	pending = append(pending, d.postDrainPending...)
	slices.Sort(pending)
	d.postDrainPending = pending
	return d, nil
}

// observations are the observations of passes that ended, whose arrays the
// next passes reuse: at 500 nodes a pass's nodes and decisions are some
// 200 KiB, and most passes change nothing.
var observations = sync.Pool{New: func() any { return &observation{} }}

// release hands obs back for another pass to reuse; nothing may read it
// after.
func (obs *observation) release() {
	clear(obs.nodes[:cap(obs.nodes)])
	clear(obs.decisions[:cap(obs.decisions)])
	*obs = observation{nodes: obs.nodes[:0], decisions: obs.decisions[:0]}
	observations.Put(obs)
}

// decide decides for every node observed.
func (obs *observation) decide(singleNode bool) []nodestate.Decision {
	obs.decisions = nodestate.DecideInto(obs.decisions, obs.nodes, singleNode)
	return obs.decisions
}

// observeNodes gathers, for each node, what the state machine decides on.
// The caller releases the observation at the end of its pass.
func observeNodes(ctx context.Context, s *Scope, nodes []corev1.Node, singleNode bool) (*observation, error) {
	obs := observations.Get().(*observation)
	obs.nodes = slices.Grow(obs.nodes[:0], len(nodes))
	var err error
	if obs.jobs, err = readNodeJobs(ctx, s); err != nil {
		return nil, err
	}
	var drains *drainRequests
	if !singleNode {
		if drains, err = readDrainRequests(ctx, s); err != nil {
			return nil, err
		}
		obs.postDrainPending = drains.postDrainPending
	}
	planSecrets := drains.byNode()

	rm := s.Plan.Status.ReleaseMetadata
	target := nodestate.Target{OSImage: rm.OS, KubeletVersion: release.KubeletVersionOf(rm.Kubernetes)}
	now := s.Clock.Now()
	preDrains, postDrains := obs.jobs[jobspec.PreDrain], obs.jobs[jobspec.PostDrain]
	singleNodeUpgrades := obs.jobs[jobspec.SingleNodeUpgrade]
	for i := range nodes {
		n := &nodes[i]
		st := s.Plan.Status.NodeUpgradeStatuses[n.Name]
		if nodestate.Upgraded(st.State) {
			// The state machine keeps an upgraded node where it is, whatever
			// it observes (nodestate.TestUpgradedNodesStay): its Jobs, Secret
			// and host are not read, on average half a pass's reading.
			obs.nodes = append(obs.nodes, nodestate.Node{Name: n.Name, State: st.State})
			continue
		}
		o := nodestate.Node{
			Name:              n.Name,
			State:             st.State,
			Paused:            s.Plan.IsNodePaused(n.Name),
			PlanPaused:        s.Plan.IsPaused(),
			PreDrain:          jobOf(preDrains[n.Name]),
			PostDrain:         jobOf(postDrains[n.Name]),
			SingleNodeUpgrade: jobOf(singleNodeUpgrades[n.Name]),
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
		unhealthy, err := healthGate(ctx, s, nodes, obs.jobs[jobspec.RestoreVM])
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
func jobOf(j *batchv1.Job) nodestate.Job {
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

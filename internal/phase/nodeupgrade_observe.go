package phase

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/kept"
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
	// windows is how the maintenance windows stand.
	windows windows
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
	// The plan's node Jobs, from the cache: read them, never change them,
	// and read only what kept.JobChangeMatters compares.
	if obs.jobs, err = s.Kept.Jobs(ctx, s.Client, kept.NodeJobs(s.Plan.Name)); err != nil {
		return nil, err
	}
	var drains *kept.DrainRequests
	if !singleNode {
		if drains, err = s.Kept.DrainRequests(ctx, s.Client); err != nil {
			return nil, err
		}
		obs.postDrainPending = drains.PostDrainPending()
	}
	planSecrets := drains.ByNode()

	rm := s.Plan.Status.ReleaseMetadata
	target := nodestate.Target{OSImage: rm.OS, KubeletVersion: release.KubeletVersionOf(rm.Kubernetes)}
	now := s.Clock.Now()
	obs.windows = s.maintenanceWindows(now)
	preDrains, postDrains := obs.jobs[jobspec.PreDrain], obs.jobs[jobspec.PostDrain]
	singleNodeUpgrades := obs.jobs[jobspec.SingleNodeUpgrade]
	for i := range nodes {
		n := &nodes[i]
		st := s.Plan.Status.NodeUpgradeStatuses[n.Name]
		if nodestate.Finished(st.State) {
			// The state machine keeps an upgraded or excluded node where it
			// is, whatever it observes (nodestate.TestUpgradedNodesStay): its
			// Jobs, Secret and host are not read, on average half a pass's
			// reading.
			obs.nodes = append(obs.nodes, nodestate.Node{Name: n.Name, State: st.State})
			continue
		}
		o := nodestate.Node{
			Name:              n.Name,
			State:             st.State,
			Paused:            s.Plan.IsNodePaused(n.Name),
			PlanPaused:        s.Plan.IsPaused(),
			Aborting:          s.Plan.AbortRequested(),
			Excluded:          s.Plan.IsNodeExcluded(n.Name),
			PreDrain:          jobOf(preDrains[n.Name]),
			PostDrain:         jobOf(postDrains[n.Name]),
			SingleNodeUpgrade: jobOf(singleNodeUpgrades[n.Name]),
			Host:              hostOf(n),
			Before:            nodestate.Host{BootID: st.PreviousBootID, OSImage: st.PreviousOSImage},
			Target:            target,
			OutsideWindow:     obs.windows.hold,
		}
		sec := planSecrets[n.Name]
		if sec != nil {
			o.PreDrainRequested = pending(sec, cluster.AnnotationRancherPreDrain, v1beta1.AnnotationPreHook)
			o.PostDrainRequested = pending(sec, cluster.AnnotationRancherPostDrain, v1beta1.AnnotationPostHook)
		}
		if limit := s.stateDeadline(st.State); limit > 0 && st.LastTransitionTime != nil {
			deadline := s.deadline(st.LastTransitionTime.Time, limit)
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
		down := s.notReadyNodes(nodes)
		for i := range obs.nodes {
			n := &obs.nodes[i]
			if !n.AtHealthGate() {
				continue
			}
			n.Unhealthy = unhealthy
			others := slices.DeleteFunc(slices.Clone(down), func(name string) bool { return name == n.Name })
			if len(others) < len(down) {
				n.Unhealthy = joinReasons("node "+n.Name+" not Ready", unhealthy)
			}
			n.Breaker = nodestate.Breaker(others, s.Plan.MaxUnavailableNodes())
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

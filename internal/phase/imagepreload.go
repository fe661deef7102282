package phase

import (
	"cmp"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/kept"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// nodePlanDeadline bounds each node's Job of a system-upgrade-controller
// Plan: importing a release's image archives takes minutes on SSDs and much
// longer on spinning disks.
const nodePlanDeadline = 3600

// ImagePreload loads the new release's container images onto every node
// before anything is upgraded, with a system-upgrade-controller Plan.
type ImagePreload struct{}

// Name implements Phase.
func (ImagePreload) Name() string { return v1beta1.StepImagePreload }

// Gate checks that the cluster may upgrade from its version to the release's
// (no downgrade, the minimum upgradable version, the prerelease and
// development build rules), unless spec.force says otherwise.
func (ImagePreload) Gate(s *Scope) string {
	if err := helper.PlanEligibility(s.Plan); err != nil {
		return err.Error()
	}
	return ""
}

// PreloadConcurrency resolves spec.imagePreloadOption.concurrency against the
// number of nodes: 0 means all at once, a positive value is capped at the
// node count, a negative value skips the preload (returned as -1).
func PreloadConcurrency(requested, nodes int) int {
	switch {
	case requested < 0:
		return -1
	case requested == 0 || requested > nodes:
		return nodes
	}
	return requested
}

// Run implements Phase.
func (ImagePreload) Run(ctx context.Context, s *Scope) (Result, error) {
	nodes, err := s.Kept.ManagedNodes(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	concurrency := PreloadConcurrency(s.Plan.PreloadConcurrency(), len(nodes))
	if concurrency < 0 {
		// The images are not imported, but `node prepare` still runs on
		// every node, at once: it keeps rancher-system-agent from
		// restarting RKE2 everywhere when Rancher is upgraded.
		if len(nodes) > 0 && s.nodeState(nodes[0].Name) == "" {
			s.Event(corev1.EventTypeNormal, v1beta1.EventImagePreloadSkipped,
				"Image preloading skipped: spec.imagePreloadOption.concurrency is negative; each node is still prepared for Rancher's upgrade")
		}
		concurrency = len(nodes)
	}
	// The preload runs before its node has the new release's images.
	if err := ensureNodePlan(ctx, s, names.ImagePreloadPlan(s.Plan.Name), v1beta1.ComponentImagePreload, images.BeforeImport,
		int64(concurrency), jobspec.NodeCommand(jobspec.Prepare), nodeSelection{}); err != nil {
		return Result{}, err
	}
	return trackNodePlan(ctx, s, nodes, nodePlanStates{
		plan:      names.ImagePreloadPlan(s.Plan.Name),
		component: v1beta1.ComponentImagePreload,
		running:   v1beta1.NodeStateImagePreloading,
		done:      v1beta1.NodeStateImagePreloaded,
		failed:    v1beta1.NodeStateImagePreloadFailed,
		what:      "preloading images",
	})
}

// nodeSelection narrows a node Plan to some managed nodes, by their
// hostname labels: all but skip (the nodes excluded from the upgrade: they
// are down), and, when only is set, only those.
type nodeSelection struct{ skip, only []string }

// ensureNodePlan creates the system-upgrade-controller Plan that runs a
// command on the managed nodes sel takes, with the toolkit image of a
// stage, or brings an existing one back to what the plan wants (e.g. a
// changed concurrency or selection).
func ensureNodePlan(ctx context.Context, s *Scope, name, component string, stage images.Stage, concurrency int64, command []string, sel nodeSelection) error {
	repo, tag := images.Split(s.Config.Toolkit(s.Plan).Image(stage))
	want := cluster.NewSUCPlan(cluster.CattleNamespace, name, cluster.SUCPlanSpec{
		Concurrency:        concurrency,
		DeadlineSeconds:    nodePlanDeadline,
		NodeSelector:       map[string]string{cluster.LabelManagedNode: "true"},
		SkipHostnames:      sel.skip,
		OnlyHostnames:      sel.only,
		ServiceAccountName: s.Config.PlanServiceAccount,
		Image:              repo,
		Version:            tag,
		Command:            command,
		Env:                []corev1.EnvVar{jobspec.PlanEnv(s.Plan.Name)},
	})
	plan := &upgradev1.Plan{}
	if err := s.ensure(ctx, want, plan, component, want.Spec, func() { plan.Spec = want.Spec }); err != nil {
		return fmt.Errorf("ensuring system-upgrade-controller Plan %s/%s: %w", want.Namespace, name, err)
	}
	return nil
}

// nodePlanStates says how a node Plan's Jobs map to node states.
type nodePlanStates struct {
	plan, component       string
	running, done, failed v1beta1.NodeUpgradeState
	what                  string
	// describeEach gives every node whose Job failed the whole failure
	// (the Job's last log lines) as its message, not only the first:
	// for Jobs that fail nothing when they fail (the early cleanup).
	describeEach bool
}

// trackNodePlan records each node's state from the Plan's Jobs (or, for Jobs
// already garbage-collected, from the label SUC leaves on a node that
// finished), fails the plan if a node failed, and is done when all are.
func trackNodePlan(ctx context.Context, s *Scope, nodes []corev1.Node, m nodePlanStates) (Result, error) {
	// The newest Job per node: SUC replaces a Job when the plan changes.
	sucJobs := kept.SUCJobs(s.Plan.Name, m.plan, m.component)
	jobs, err := s.Kept.Jobs(ctx, s.Client, sucJobs)
	if err != nil {
		return Result{}, fmt.Errorf("reading the Jobs of Plan %s/%s: %w", cluster.CattleNamespace, m.plan, err)
	}
	sucPlan := &upgradev1.Plan{}
	if _, err := s.get(ctx, cluster.CattleNamespace, m.plan, sucPlan); err != nil {
		return Result{}, err
	}
	byNode := jobs[""]
	var failure string
	finishedLabel := cluster.LabelSUCPlanNode(m.plan)
	for i := range nodes {
		n := &nodes[i]
		if h := sucPlan.Status.LatestHash; h != "" && n.Labels[finishedLabel] == h {
			s.setNodeState(n.Name, m.done, "", "")
			continue
		}
		j, ok := byNode[n.Name]
		if !ok {
			continue
		}
		switch state, reason, msg := JobOutcome(j); state {
		case JobSucceeded:
			if s.nodeState(n.Name) != m.done {
				// Once, as the node is done: the Job must have run there.
				ran, err := s.ranOn(ctx, j)
				if err != nil {
					return Result{}, err
				}
				if ran != "" && ran != n.Name {
					what := fmt.Sprintf("%s on node %s: Job %s/%s succeeded, but its pod ran on node %s, not %s: check the Plan's node affinity (kubectl -n %[3]s get job %[4]s -o yaml)",
						m.what, n.Name, j.Namespace, j.Name, ran, n.Name)
					s.setNodeState(n.Name, m.failed, v1beta1.ReasonWrongNode, what)
					if failure == "" {
						failure = what
					}
					continue
				}
			}
			s.setNodeState(n.Name, m.done, "", "")
		case JobFailed:
			what := fmt.Sprintf("%s on node %s failed", m.what, n.Name)
			if m.describeEach {
				described := s.jobFailure(ctx, what, j, reason, msg)
				s.setNodeState(n.Name, m.failed, reason, described)
				failure = cmp.Or(failure, described)
				continue
			}
			s.setNodeState(n.Name, m.failed, reason, msg)
			if failure == "" {
				failure = s.jobFailure(ctx, what, j, reason, msg)
			}
		default:
			s.setNodeState(n.Name, m.running, "", "")
		}
	}
	if failure != "" {
		return Fail("%s", failure), nil
	}
	var pending []string
	for i := range nodes {
		n := &nodes[i]
		if s.nodeState(n.Name) != m.done {
			pending = append(pending, n.Name)
		}
	}
	if len(pending) == 0 {
		s.Kept.Forget(sucJobs.Key())
		return Done(), nil
	}
	return Wait("%s: %d of %d nodes done; waiting for %s", m.what, len(nodes)-len(pending), len(nodes), list(pending)), nil
}

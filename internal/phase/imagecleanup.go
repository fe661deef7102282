package phase

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// The image cleanup removes, from each node, the previous release's
// container images the new one no longer uses. It is off the critical
// path: a node is cleaned as soon as its upgrade is verified, while the
// others still upgrade (cleanEarly, from NodeUpgrade), by the one
// system-upgrade-controller Plan whose node selector takes the upgraded
// nodes only, spec.imageCleanupOption.concurrency at a time; the phase
// ImageCleanup then takes every node and waits for the last ones.

// checkStaleImages records, once per plan, what the cleanup removes:
// Pending while there are images to remove, Passed once every node is
// clean or when there is nothing to remove, Warning when the repo's image
// lists cannot be used (nothing is removed).
const checkStaleImages preflight.Reason = "StaleImages"

// CheckStaleImages is checkStaleImages's name in status.checks.
const CheckStaleImages = v1beta1.StepImageCleanup + "/" + string(checkStaleImages)

// cleanupStates maps the cleanup Plan's Jobs to node states.
var cleanupStates = nodePlanStates{
	component: v1beta1.ComponentImageCleanup,
	running:   v1beta1.NodeStateImageCleaning,
	done:      v1beta1.NodeStateImageCleaned,
	failed:    v1beta1.NodeStateImageCleanFailed,
	what:      "removing the previous release's images",
}

// ImageCleanup waits until every node not excluded has removed the
// previous release's images the new one no longer uses.
type ImageCleanup struct{}

// Name implements Phase.
func (ImageCleanup) Name() string { return v1beta1.StepImageCleanup }

// Run implements Phase.
func (ImageCleanup) Run(ctx context.Context, s *Scope) (Result, error) {
	if err := s.nodeReplicas(ctx); err != nil {
		return Result{}, err
	}
	wanted, wait, err := cleanupWanted(ctx, s, true)
	switch {
	case err != nil:
		return Result{}, err
	case wait != nil:
		return *wait, nil
	case !wanted:
		return Done(), nil
	}
	nodes, err := s.Kept.ManagedNodes(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	nodes, skip := s.withoutExcluded(nodes)
	if err := ensureCleanupPlan(ctx, s, nodeSelection{skip: skip}); err != nil {
		return Result{}, err
	}
	m := cleanupStates
	m.plan = names.ImageCleanupPlan(s.Plan.Name)
	r, err := trackNodePlan(ctx, s, nodes, m)
	if r.Failure != "" {
		r.Failure = "every node runs the new release, but " + r.Failure + "\nremove the old images by hand with `crictl rmi`"
	}
	if r.Done {
		if c := s.Plan.Check(CheckStaleImages); c != nil && c.Result == v1beta1.CheckPending {
			s.setCheck(CheckStaleImages, v1beta1.CheckPassed, fmt.Sprintf("%s; removed from %d nodes", c.Message, len(nodes)))
		}
	}
	return r, err
}

// cleanupEnded reports whether a node's image cleanup ended, well or not.
func cleanupEnded(st v1beta1.NodeUpgradeState) bool {
	return st == v1beta1.NodeStateImageCleaned || st == v1beta1.NodeStateImageCleanFailed
}

// upgradedNodes are the nodes whose upgrade is verified.
func upgradedNodes(s *Scope, nodes []corev1.Node) []corev1.Node {
	var out []corev1.Node
	for i := range nodes {
		if nodestate.Upgraded(s.nodeState(nodes[i].Name)) {
			out = append(out, nodes[i])
		}
	}
	return out
}

// cleanEarly, from NodeUpgrade, cleans each upgraded node (upgraded, as
// the status recorded them before the pass) while the others still
// upgrade: the cleanup Plan takes those nodes only, and their states
// follow its Jobs. A failed cleanup is recorded on its node and
// told once; it fails nothing now (the node is upgraded, and nothing is
// at risk): the phase ImageCleanup fails on it, and a retry runs it again.
// Nothing is done when no node is upgraded yet, or when the repo's image
// lists cannot be read now (the phase ImageCleanup waits for them).
func cleanEarly(ctx context.Context, s *Scope, upgraded []corev1.Node) error {
	// The Plan takes every upgraded node; its Jobs are read for those not
	// done with yet (a failed one is described once).
	// A paused or aborting plan starts no cleanup: the Plan leaves out the
	// nodes whose cleanup has not begun, and those under way finish.
	holding := s.Plan.IsPaused() || s.Plan.AbortRequested()
	var todo []corev1.Node
	var hosts, notBegun []string
	for i := range upgraded {
		st := s.nodeState(upgraded[i].Name)
		host := cluster.Hostname(&upgraded[i])
		hosts = append(hosts, host)
		if !cleanupEnded(st) {
			todo = append(todo, upgraded[i])
		}
		if holding && st != v1beta1.NodeStateImageCleaning && !cleanupEnded(st) {
			notBegun = append(notBegun, host)
		}
	}
	if len(hosts) == 0 {
		return nil
	}
	// Never the repo from here: a slow one must not slow the node upgrade.
	wanted, _, err := cleanupWanted(ctx, s, false)
	if err != nil || !wanted {
		return err
	}
	slices.Sort(hosts)
	slices.Sort(notBegun)
	if err := ensureCleanupPlan(ctx, s, nodeSelection{only: hosts, skip: notBegun}); err != nil {
		return err
	}
	if len(todo) == 0 {
		return nil
	}
	m := cleanupStates
	m.plan, m.describeEach = names.ImageCleanupPlan(s.Plan.Name), true
	if _, err := trackNodePlan(ctx, s, todo, m); err != nil {
		return err
	}
	for _, n := range todo {
		if st := s.Plan.Status.NodeUpgradeStatuses[n.Name]; st.State == m.failed {
			s.Event(corev1.EventTypeWarning, v1beta1.EventImageCleanupFailed,
				"%s; node %s is upgraded and the upgrade goes on: the phase ImageCleanup fails on it, and a retry runs it again", st.Message, n.Name)
		}
	}
	return nil
}

// ensureCleanupPlan creates the cleanup Plan, or brings it to the nodes it
// takes now.
func ensureCleanupPlan(ctx context.Context, s *Scope, sel nodeSelection) error {
	return ensureNodePlan(ctx, s, names.ImageCleanupPlan(s.Plan.Name), v1beta1.ComponentImageCleanup, images.AfterImport,
		int64(s.Plan.CleanupConcurrency()), jobspec.NodeCommand(jobspec.ImageCleanup), sel)
}

// cleanupWanted says whether the previous release's images are to be
// removed. It is decided once per plan (in MetadataPopulate), from the
// repo's image lists, and recorded (CheckStaleImages); a non-nil wait is
// how to wait for a repo that cannot be read now. Without readRepo, an
// undecided plan (one that passed MetadataPopulate under an older
// manager) is not decided now, and nothing is wanted yet.
func cleanupWanted(ctx context.Context, s *Scope, readRepo bool) (bool, *Result, error) {
	prev := s.Plan.Status.PreviousVersion
	if prev == nil {
		return false, nil, nil
	}
	if c := s.Plan.Check(CheckStaleImages); c != nil {
		return c.Result == v1beta1.CheckPending, nil, nil
	}
	found, err := s.get(ctx, cluster.CattleNamespace, names.ImageCleanupPlan(s.Plan.Name), &upgradev1.Plan{})
	if err != nil || found || !readRepo {
		// A Plan made before the decision was recorded: it was wanted.
		return found, nil, err
	}
	stale, wait, err := staleImages(ctx, s, *prev)
	if err != nil || wait != nil {
		return false, wait, err
	}
	if len(stale) == 0 {
		// Unless staleImages skipped the cleanup (it recorded why).
		if c := s.Plan.Check(CheckStaleImages); c == nil {
			s.setCheck(CheckStaleImages, v1beta1.CheckPassed, fmt.Sprintf("every image of %s is used by %s: nothing to remove", *prev, s.newRelease()))
		}
		return false, nil, nil
	}
	s.setCheck(CheckStaleImages, v1beta1.CheckPending, fmt.Sprintf("%d images of %s that %s no longer uses (%s)", len(stale), *prev, s.newRelease(), list(stale)))
	return true, nil, nil
}

// newRelease names the release the plan upgrades to.
func (s *Scope) newRelease() string {
	if rm := s.Plan.Status.ReleaseMetadata; rm != nil && rm.Harvester != "" {
		return rm.Harvester
	}
	return "the new release"
}

// withoutExcluded returns the nodes not excluded from the upgrade, and the
// hostname labels of those that are: they are down, and nothing more is
// done on them.
func (s *Scope) withoutExcluded(nodes []corev1.Node) (kept []corev1.Node, excluded []string) {
	for i := range nodes {
		n := &nodes[i]
		if s.nodeState(n.Name) != v1beta1.NodeStateExcluded {
			kept = append(kept, *n)
			continue
		}
		excluded = append(excluded, cluster.Hostname(n))
	}
	return kept, excluded
}

// staleImages returns the previous release's images the new one does not
// use. Lists the repo does not have, or that cannot be parsed, skip the
// cleanup (a Warning check and an event); a repo that cannot be read gives
// how to wait for it.
func staleImages(ctx context.Context, s *Scope, previous string) ([]string, *Result, error) {
	c, err := s.repoClient()
	if err != nil {
		return nil, nil, err
	}
	prevList, err := c.ImageList(ctx, previous)
	var curList []string
	if err == nil {
		curList, err = c.ImageList(ctx, release.CurrentImageList)
	}
	skip := func(what string) {
		msg := fmt.Sprintf("%s; skipping stale image cleanup (%v)", what, err)
		s.setCheck(CheckStaleImages, v1beta1.CheckWarning, msg+": no image is removed; remove the old ones by hand with `crictl rmi`")
		s.Event(corev1.EventTypeWarning, v1beta1.EventImageCleanupSkipped, "%s", msg)
	}
	switch {
	case errors.Is(err, release.ErrNotFound):
		skip("Image list not available in upgrade repository")
		return nil, nil, nil
	case errors.Is(err, release.ErrMalformed):
		skip("Image list in the upgrade repository is unreadable")
		return nil, nil, nil
	case err != nil:
		r := s.boundedWait(s.Config.Deadlines.Metadata,
			"reading the image lists from the repo: "+err.Error(),
			"could not read the image lists from the repo: "+err.Error())
		r = r.After(min(r.RequeueAfter, repoPoll))
		return nil, &r, nil //nolint:nilerr // an unreachable repo is waited for, not a reconcile error
	}
	return release.StaleImages(prevList, curList, release.RetainedImageNames), nil, nil
}

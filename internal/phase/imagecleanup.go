package phase

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// ImageCleanup removes, from every node, the container images of the previous
// release that the new one no longer uses, one node at a time.
type ImageCleanup struct{}

// Name implements Phase.
func (ImageCleanup) Name() string { return v1beta1.StepImageCleanup }

// Run implements Phase.
func (ImageCleanup) Run(ctx context.Context, s *Scope) (Result, error) {
	if err := s.nodeReplicas(ctx); err != nil {
		return Result{}, err
	}
	prev := s.Plan.Status.PreviousVersion
	if prev == nil {
		return Done(), nil
	}
	planName := names.ImageCleanupPlan(s.Plan.Name)
	found, err := s.get(ctx, cluster.CattleNamespace, planName, &upgradev1.Plan{})
	if err != nil {
		return Result{}, err
	}
	if !found {
		// Decide once, before the Plan exists, whether there is anything to
		// remove; the node Jobs compute the same list themselves.
		stale, res, err := staleImages(ctx, s, *prev)
		if err != nil || res != nil {
			return *res, err
		}
		if len(stale) == 0 {
			return Done(), nil
		}
	}
	if err := ensureNodePlan(ctx, s, planName, v1beta1.ComponentImageCleanup, images.AfterImport, 1,
		jobspec.NodeCommand(jobspec.ImageCleanup)); err != nil {
		return Result{}, err
	}
	nodes, err := s.Kept.ManagedNodes(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	r, err := trackNodePlan(ctx, s, nodes, nodePlanStates{
		plan:      planName,
		component: v1beta1.ComponentImageCleanup,
		running:   v1beta1.NodeStateImageCleaning,
		done:      v1beta1.NodeStateImageCleaned,
		failed:    v1beta1.NodeStateImageCleanFailed,
		what:      "removing the previous release's images",
	})
	if r.Failure != "" {
		r.Failure = "every node runs the new release, but " + r.Failure + "\nremove the old images by hand with `crictl rmi`"
	}
	return r, err
}

// staleImages returns the previous release's images the new one does not
// use; a nil result with a non-nil Result means the phase ends or waits.
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
	switch {
	case errors.Is(err, release.ErrNotFound):
		s.Event(corev1.EventTypeWarning, v1beta1.EventImageCleanupSkipped,
			"Image list not available in upgrade repository; skipping stale image cleanup (%v)", err)
		return nil, &Result{Done: true}, nil
	case errors.Is(err, release.ErrMalformed):
		s.Event(corev1.EventTypeWarning, v1beta1.EventImageCleanupSkipped,
			"Image list in the upgrade repository is unreadable; skipping stale image cleanup (%v)", err)
		return nil, &Result{Done: true}, nil
	case err != nil:
		r := s.boundedWait(s.Config.Deadlines.Metadata,
			"reading the image lists from the repo: "+err.Error(),
			"could not read the image lists from the repo: "+err.Error())
		r = r.After(min(r.RequeueAfter, repoPoll))
		return nil, &r, nil //nolint:nilerr // an unreachable repo is waited for, not a reconcile error
	}
	return release.StaleImages(prevList, curList, release.RetainedImageNames), nil, nil
}

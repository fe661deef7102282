package nodejob

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/internal/release"
)

// removeStaleImages removes the previous release's images that the new one
// no longer uses, as the manager computed when it decided to clean up: by
// release.StaleImages over the repo's image lists, among those the node
// has. An image that cannot be
// removed (a workload still uses it) is logged and left; the job fails only
// when no image could be removed at all.
func (j *Job) removeStaleImages(ctx context.Context, s *state) error {
	logger := log.FromContext(ctx)
	if err := j.readPlan(ctx, s); err != nil {
		return err
	}
	prev := s.plan.Status.PreviousVersion
	if prev == nil {
		logger.Info("the plan does not record the previous version: no image list to compare, nothing removed")
		return nil
	}
	previous, err := s.repo.ImageList(ctx, *prev)
	var current []string
	if err == nil {
		current, err = s.repo.ImageList(ctx, release.CurrentImageList)
	}
	if errors.Is(err, release.ErrNotFound) {
		logger.Info("the repo has no image list to compare, nothing removed", "reason", err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the image lists: %w", err)
	}
	have, err := j.presentImages(ctx)
	if err != nil {
		return err
	}
	var stale []string
	for _, ref := range release.StaleImages(previous, current, release.RetainedImageNames) {
		if have[ref] {
			stale = append(stale, ref)
		}
	}
	var failed []error
	for _, ref := range stale {
		if err := j.Host.RemoveImage(ctx, ref); err != nil {
			logger.Info("image not removed", "image", ref, "reason", err.Error())
			failed = append(failed, err)
		}
	}
	logger.Info("removed the previous release's images", "removed", len(stale)-len(failed), "kept", len(failed))
	if len(stale) > 0 && len(failed) == len(stale) {
		return fmt.Errorf("none of the %d images of %s could be removed: %w", len(stale), *prev, errors.Join(failed...))
	}
	return nil
}

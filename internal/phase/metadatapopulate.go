package phase

import (
	"context"
	"errors"
	"time"

	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// repoPoll is how often an unreachable repo is tried again: HTTP cannot be
// watched.
const repoPoll = 10 * time.Second

// MetadataPopulate reads the release's harvester-release.yaml from the repo
// into status.releaseMetadata, then checks that every workload of the
// upgrade will find its image (checkImages).
type MetadataPopulate struct{}

// Name implements Phase.
func (MetadataPopulate) Name() string { return v1beta1.StepMetadataPopulate }

// Run implements Phase.
func (MetadataPopulate) Run(ctx context.Context, s *Scope) (Result, error) {
	c, err := s.repoClient()
	if err != nil {
		return Result{}, err
	}
	rel, err := c.Release(ctx)
	switch {
	case errors.Is(err, release.ErrMalformed):
		return FailFinal("the release ISO is not usable: %v; create a new plan with a good ISO", err), nil
	case err != nil:
		r := s.boundedWait(s.Config.Deadlines.Metadata,
			"reading the release metadata from the repo: "+err.Error(),
			"could not read the release metadata from the repo: "+err.Error())
		return r.After(min(r.RequeueAfter, repoPoll)), nil //nolint:nilerr // an unreachable repo is waited for
	}
	s.Plan.Status.ReleaseMetadata = rel.Metadata()
	r, err := checkImages(ctx, s, c)
	if err != nil || !r.Done {
		return r, err
	}
	// What the image cleanup removes is decided while the repo is known to
	// serve: the node upgrade then cleans each node without reading it.
	if _, wait, err := cleanupWanted(ctx, s, true); err != nil || wait != nil {
		return ptr.Deref(wait, Result{}), err
	}
	return r, nil
}

// repoClient reaches the plan's repo. A reconcile must not block: each
// request is tried once, and the phase comes back later.
func (s *Scope) repoClient() (*release.Client, error) {
	return release.NewClient(s.Config.RepoURL(cluster.HarvesterNamespace, names.Repo(s.Plan.Name)),
		release.WithRetries(1, 0), release.WithRequestTimeout(10*time.Second))
}

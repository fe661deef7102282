package nodejob

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get

// waitRepo waits until the upgrade repo serves the release, then reads the
// release and its bundle metadata.
func (j *Job) waitRepo(ctx context.Context, s *state) error {
	repo, err := release.NewClient(j.repoURL(), release.WithRetries(1, 0))
	if err != nil {
		return err
	}
	dep := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(j.Plan)}
	w := waitfor.Wait{
		What:     "the upgrade repo " + j.repoURL() + " to serve the release",
		Timeout:  j.Timeouts.Repo,
		Interval: j.Timeouts.Interval,
		Hint:     fmt.Sprintf("check the repo's pods (kubectl -n %s describe deployment %s)", dep.Namespace, dep.Name),
	}
	err = w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		rel, err := repo.Release(ctx)
		if err == nil {
			s.release = rel
			return true, "", nil
		}
		return false, repoStatus(ctx, j.Client, dep) + err.Error(), nil
	})
	if err != nil {
		return err
	}
	// From here on the repo serves: keep the client's retries for hiccups.
	if s.repo, err = release.NewClient(j.repoURL()); err != nil {
		return err
	}
	if s.bundle, err = s.repo.BundleMetadata(ctx); err != nil {
		return fmt.Errorf("reading the release's bundle metadata: %w", err)
	}
	return nil
}

// repoStatus describes the repo Deployment's availability for a wait's
// status, "" when it cannot be read.
func repoStatus(ctx context.Context, c client.Reader, key client.ObjectKey) string {
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, key, dep); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("Deployment %s does not exist; ", key)
		}
		return ""
	}
	for _, cond := range dep.Status.Conditions {
		if cond.Type == appsv1.DeploymentAvailable && cond.Status != corev1.ConditionTrue {
			return fmt.Sprintf("Deployment %s is not available (%s); ", key, cond.Message)
		}
	}
	return ""
}

package clusterupgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
)

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;patch
// +kubebuilder:rbac:groups=catalog.cattle.io,resources=clusterrepos,verbs=get;patch

// upgradeClusterRepo serves the release's charts: the harvester-cluster-repo
// Deployment runs the release's image, then Rancher re-reads the
// harvester-charts index from it (spec.forceUpdate), so that the
// ManagedCharts find the new chart versions.
func (u *Upgrade) upgradeClusterRepo(ctx context.Context, r *run) error {
	key := client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.HarvesterClusterRepoDeployment}
	image := cluster.HarvesterClusterRepoImage + ":" + r.rel.OSVersion()
	d := &appsv1.Deployment{}
	if err := u.Client.Get(ctx, key, d); err != nil {
		return fmt.Errorf("reading Deployment %s: %w", key, err)
	}
	current := ""
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == cluster.HarvesterClusterRepoContainer {
			current = c.Image
		}
	}
	if current != image {
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []map[string]any{{"name": cluster.HarvesterClusterRepoContainer, "image": image}},
		}}}})
		if err := u.Client.Patch(ctx, d, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
			return fmt.Errorf("setting the image of Deployment %s to %s: %w", key, image, err)
		}
	}
	if err := u.waitDeployment(ctx, key, u.Timeouts.ClusterRepo); err != nil {
		return err
	}
	return u.refreshClusterRepo(ctx, cluster.HarvesterChartsRepo)
}

// refreshClusterRepo asks Rancher to download a ClusterRepo's index again
// and waits until it did. Rancher downloads when spec.forceUpdate is later
// than the last download and already past. A ClusterRepo Rancher is about
// to recreate (after its upgrade) is waited for, and so is its first
// download.
func (u *Upgrade) refreshClusterRepo(ctx context.Context, name string) error {
	key := client.ObjectKey{Name: name}
	repo := &catalogv1.ClusterRepo{}
	w := u.wait("Rancher to create and index ClusterRepo "+name, u.Timeouts.ClusterRepo,
		fmt.Sprintf("check Rancher's logs (kubectl -n %s logs -l app=rancher)", cluster.CattleNamespace))
	if err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		if err := u.Client.Get(ctx, key, repo); err != nil {
			return false, "", err
		}
		return !repo.Status.DownloadTime.IsZero(), "not downloaded yet", nil
	}); err != nil {
		return err
	}
	requested := repo.Spec.ForceUpdate
	if requested == nil || !requested.After(repo.Status.DownloadTime.Time) {
		at := metav1.NewTime(ForceUpdateTime(repo.Status.DownloadTime.Time, u.Now()))
		requested = &at
		patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"forceUpdate": at}})
		if err := u.Client.Patch(ctx, repo, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("asking Rancher to re-read ClusterRepo %s: %w", key.Name, err)
		}
	}
	w = u.wait("Rancher to re-read the chart index of ClusterRepo "+key.Name, u.Timeouts.ClusterRepo,
		fmt.Sprintf("check the ClusterRepo (kubectl get clusterrepo %s -o yaml) and Rancher's logs", key.Name))
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		if err := u.Client.Get(ctx, key, repo); err != nil {
			return false, "", err
		}
		last := repo.Status.DownloadTime.Time
		return !last.Before(requested.Time), fmt.Sprintf("last download %s, requested %s", last.UTC().Format(time.RFC3339), requested.UTC().Format(time.RFC3339)), nil
	})
}

// ForceUpdateTime is the forceUpdate to ask for: a second after the last
// download (timestamps have whole seconds), and not in the future.
func ForceUpdateTime(lastDownload, now time.Time) time.Time {
	t := lastDownload.Truncate(time.Second).Add(time.Second)
	if n := now.Truncate(time.Second); n.After(t) {
		return n
	}
	return t
}

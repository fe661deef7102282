package clusterupgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/host"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// The values of jobspec.ProgressRancher: whether this upgrade upgrades
// Rancher, decided before anything changes, so that the steps after
// Rancher's upgrade run exactly when it was upgraded. The Rancher steps also
// keep, under jobspec.ProgressFleetSaved, fleet-controller's apiServerURL
// and apiServerCA as the old Rancher had them (harvester/harvester#6851).
const (
	rancherUpgrading = "upgrading"
	rancherCurrent   = "current"
)

// +kubebuilder:rbac:groups=management.cattle.io,resources=settings,verbs=get

// rancherVersion is the version the running Rancher reports.
func (u *Upgrade) rancherVersion(ctx context.Context) (string, error) {
	s := &managementv3.Setting{}
	if err := u.Client.Get(ctx, client.ObjectKey{Name: cluster.RancherServerVersionSetting}, s); err != nil {
		return "", fmt.Errorf("reading Rancher's setting %s: %w", cluster.RancherServerVersionSetting, err)
	}
	return s.Value, nil
}

// rancherUpgraded reports whether this upgrade upgrades Rancher.
func rancherUpgraded(r *run) bool {
	v, _ := r.progress.value(jobspec.ProgressRancher)
	return v == rancherUpgrading
}

// upgradeRancher upgrades the embedded Rancher unless it runs the release's
// version: it waits for Rancher's CAPI cluster to settle, deletes what
// Rancher must recreate in its new version, saves fleet-controller's
// settings the new Fleet may lose, upgrades Rancher's Helm release and
// waits until the new Rancher reports the release's version.
func (u *Upgrade) upgradeRancher(ctx context.Context, r *run) error {
	logger := log.FromContext(ctx)
	want := r.rel.Rancher
	running, err := u.rancherVersion(ctx)
	if err != nil {
		return err
	}
	decision, err := r.progress.once(ctx, jobspec.ProgressRancher, func() (string, error) {
		if running == want {
			return rancherCurrent, nil
		}
		return rancherUpgrading, nil
	})
	if err != nil {
		return err
	}
	if ok, _ := AppliesTo(actionCleanLegacyCAPIWebhooks, r.previous(), r.rel.Harvester); ok {
		if err := u.cleanLegacyCAPIWebhooks(ctx); err != nil {
			return err
		}
	}
	if decision == rancherCurrent {
		logger.Info("Rancher runs the release's version already", "version", want)
		return nil
	}
	if running != want {
		if u.Rancher == nil {
			return fmt.Errorf("the embedded Rancher runs %s and must be upgraded to %s, but the job has no way to upgrade it", running, want)
		}
		if err := u.waitCAPICluster(ctx, "before Rancher's upgrade"); err != nil {
			return err
		}
		if err := u.deleteRancherRecreated(ctx); err != nil {
			return err
		}
		if err := u.saveFleetConfig(ctx, r); err != nil {
			return err
		}
		var nodes corev1.NodeList
		if err := u.Client.List(ctx, &nodes); err != nil {
			return fmt.Errorf("listing the nodes: %w", err)
		}
		if err := u.Rancher.Upgrade(ctx, r.rel, RancherOptions{Replicas: RancherReplicas(nodes.Items)}); err != nil {
			return fmt.Errorf("upgrading Rancher from %s to %s: %w", running, want, err)
		}
	}
	w := u.wait("Rancher to report version "+want, u.Timeouts.Rancher,
		fmt.Sprintf("check Rancher's pods (kubectl -n %s get pods -l app=rancher) and the Helm release (helm -n %s history rancher)", cluster.CattleNamespace, cluster.CattleNamespace))
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		v, err := u.rancherVersion(ctx)
		return v == want, "Rancher reports " + v, err
	})
}

// RancherReplicas is the replica count Rancher's release gets: -2 (one
// replica per node but two) on a three-node cluster with a witness node,
// which must not run Rancher; nil keeps the release's.
func RancherReplicas(nodes []corev1.Node) *int {
	witnesses := 0
	for i := range nodes {
		if cluster.IsWitness(&nodes[i]) {
			witnesses++
		}
	}
	if witnesses > 0 && len(nodes) == 3 {
		return ptr.To(-2)
	}
	return nil
}

// +kubebuilder:rbac:groups=catalog.cattle.io,resources=clusterrepos,verbs=delete

// deleteRancherRecreated deletes Rancher's own chart repositories and its
// chart-default-branch setting, which the new Rancher recreates with its
// new defaults (rancher/rancher#36914).
func (u *Upgrade) deleteRancherRecreated(ctx context.Context) error {
	objs := []client.Object{
		&managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ChartDefaultBranchSetting}},
	}
	for _, name := range []string{cluster.RancherChartsRepo, cluster.RancherRKE2ChartsRepo, cluster.RancherPartnerChartsRepo} {
		objs = append(objs, &catalogv1.ClusterRepo{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	for _, obj := range objs {
		if err := client.IgnoreNotFound(u.Client.Delete(ctx, obj)); err != nil {
			return fmt.Errorf("deleting %s %s, which the new Rancher recreates: %w", u.kindName(obj), obj.GetName(), err)
		}
	}
	return nil
}

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=delete

// cleanLegacyCAPIWebhooks deletes the webhook configurations the CAPI of
// Harvester v1.7 left behind.
func (u *Upgrade) cleanLegacyCAPIWebhooks(ctx context.Context) error {
	for _, obj := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cluster.LegacyCAPIMutatingWebhook}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cluster.LegacyCAPIValidatingWebhook}},
	} {
		if err := client.IgnoreNotFound(u.Client.Delete(ctx, obj)); err != nil {
			return fmt.Errorf("deleting the legacy CAPI %s %s: %w", u.kindName(obj), obj.GetName(), err)
		}
	}
	return nil
}

// +kubebuilder:rbac:groups=cluster.x-k8s.io,namespace=fleet-local,resources=clusters,verbs=get

// CAPIClusterSettled judges Rancher's CAPI Cluster: provisioned, with its
// latest generation reconciled.
func CAPIClusterSettled(c *capiv1beta1.Cluster) (bool, string) {
	status := fmt.Sprintf("phase %s, generation %d, observed %d", orNone(c.Status.Phase), c.Generation, c.Status.ObservedGeneration)
	return c.Status.Phase == cluster.CAPIClusterPhaseProvisioned && c.Status.ObservedGeneration == c.Generation, status
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// waitCAPICluster waits until the CAPI Cluster fleet-local/local settled
// and stayed settled for Timeouts.CAPIStable: Rancher's controllers
// reconcile it in bursts.
func (u *Upgrade) waitCAPICluster(ctx context.Context, when string) error {
	key := client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}
	settled := settling{need: u.Timeouts.CAPIStable}
	w := u.wait(fmt.Sprintf("the CAPI Cluster %s to be provisioned and settled %s", key, when), u.Timeouts.CAPI,
		fmt.Sprintf("check Rancher's logs and the cluster (kubectl -n %s get clusters.cluster.x-k8s.io %s -o yaml)", key.Namespace, key.Name))
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		c := &capiv1beta1.Cluster{}
		if err := u.Client.Get(ctx, key, c); err != nil {
			settled.reset()
			return false, "", err
		}
		ok, status := settled.held(CAPIClusterSettled(c))
		return ok, status, nil
	})
}

// fleetConfig is what the upgrade keeps of fleet-controller's config.
type fleetConfig struct {
	APIServerURL string `json:"apiServerURL,omitempty"`
	APIServerCA  string `json:"apiServerCA,omitempty"`
}

// +kubebuilder:rbac:groups="",namespace=cattle-fleet-system,resources=configmaps,verbs=get;patch

// readFleetConfig reads fleet-controller's config, nil when it has none.
func (u *Upgrade) readFleetConfig(ctx context.Context) (*corev1.ConfigMap, map[string]any, error) {
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerConfigMap}
	if err := u.Client.Get(ctx, key, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("reading ConfigMap %s: %w", key, err)
	}
	config := map[string]any{}
	if err := yaml.Unmarshal([]byte(cm.Data[cluster.FleetControllerConfigKey]), &config); err != nil {
		return nil, nil, fmt.Errorf("reading the config of ConfigMap %s: %w", key, err)
	}
	return cm, config, nil
}

// saveFleetConfig records fleet-controller's API server URL and CA before
// the new Rancher brings a new Fleet, which may reset them.
func (u *Upgrade) saveFleetConfig(ctx context.Context, r *run) error {
	_, err := r.progress.once(ctx, jobspec.ProgressFleetSaved, func() (string, error) {
		_, config, err := u.readFleetConfig(ctx)
		if err != nil {
			return "", err
		}
		saved := fleetConfig{}
		saved.APIServerURL, _ = config["apiServerURL"].(string)
		saved.APIServerCA, _ = config["apiServerCA"].(string)
		b, err := json.Marshal(saved)
		return string(b), err
	})
	return err
}

// HelmRancher upgrades Rancher as Harvester's upgrade does: the Rancher
// chart and a helm binary come from the rancher/system-agent-installer-rancher
// image of the release's agent image archives, which wharfie extracts
// without a container runtime; the release keeps Rancher's values, with the
// new image tag (RancherValues), and without extraEnv (which would override
// settings such as the shell image). Helm acts with the job's service
// account, which must be allowed to install Rancher's chart (in practice
// cluster-admin, which Harvester's "harvester" service account is).
type HelmRancher struct {
	// Repo is the upgrade repo.
	Repo *release.Client
	// Run runs wharfie and helm in the job's container.
	Run host.Runner
	// WorkDir is a scratch directory.
	WorkDir string
}

// InstallerImage is the image that carries the Rancher chart of a version.
func InstallerImage(version string) string {
	return "rancher/system-agent-installer-rancher:" + version
}

// Upgrade implements RancherUpgrader.
func (h *HelmRancher) Upgrade(ctx context.Context, rel *release.Release, opts RancherOptions) error {
	images := filepath.Join(h.WorkDir, "images")
	chartDir := filepath.Join(h.WorkDir, "rancher")
	if err := os.MkdirAll(images, 0o755); err != nil {
		return err
	}
	bundle, err := h.Repo.BundleMetadata(ctx)
	if err != nil {
		return err
	}
	for _, a := range bundle.Images.Agent {
		for _, p := range []string{a.ListPath(), a.ArchivePath()} {
			if err := h.download(ctx, p, filepath.Join(images, path.Base(p))); err != nil {
				return err
			}
		}
	}
	if err := os.RemoveAll(chartDir); err != nil {
		return err
	}
	if _, err := h.Run.Run(ctx, host.Command{Name: "wharfie", Args: []string{"--images-dir", images, InstallerImage(rel.Rancher), chartDir}}); err != nil {
		return fmt.Errorf("extracting the Rancher chart from %s: %w", InstallerImage(rel.Rancher), err)
	}
	helm := filepath.Join(chartDir, "helm")
	out, err := h.Run.Run(ctx, host.Command{Name: helm, Args: []string{"get", "values", cluster.RancherRelease, "--namespace", cluster.CattleNamespace, "--output", "yaml"}})
	if err != nil {
		return fmt.Errorf("reading the values of the Rancher release: %w", err)
	}
	values, err := RancherValues(out, rel.Rancher, rel.Harvester, opts)
	if err != nil {
		return err
	}
	valuesFile := filepath.Join(h.WorkDir, "values.yaml")
	if err := os.WriteFile(valuesFile, values, 0o600); err != nil {
		return err
	}
	charts, err := filepath.Glob(filepath.Join(chartDir, "*.tgz"))
	if err != nil || len(charts) != 1 {
		return fmt.Errorf("expected one Rancher chart (*.tgz) in %s, found %v", InstallerImage(rel.Rancher), charts)
	}
	_, err = h.Run.Run(ctx, host.Command{Name: helm, Args: []string{
		"upgrade", cluster.RancherRelease, charts[0], "--namespace", cluster.CattleNamespace,
		"--values", valuesFile, "--wait", "--timeout", "15m",
	}})
	return err
}

// rancherFeatures are the Rancher features Harvester turns off: Harvester
// manages no other cluster and upgrades itself; Rancher v2.15's token
// rotation (from Harvester v1.9) breaks Harvester's long-lived tokens.
func rancherFeatures(target string) string {
	features := []string{"multi-cluster-management=false", "multi-cluster-management-agent=false", "managed-system-upgrade-controller=false"}
	if ok, _ := AppliesTo(actionTokenRotationOff, "", target); ok {
		features = append(features, "crt-token-ttl-rotation=false")
	}
	return strings.Join(features, ",")
}

// RancherValues turns the running release's values (helm get values) into
// the new release's for Rancher version and Harvester target: the same,
// with Harvester's features, opts' replicas and the new image tag.
// (extraEnv stays: Harvester's upgrade dropped it for the upgrades to v1.4,
// whose older values set the shell image there, and stopped doing so once
// no supported path had such values; an operator's extraEnv, such as a
// proxy, must survive the upgrade.) Values of the legacy layout (rancherImage,
// rancherImagePullPolicy, rancherImageTag) move to image.repository,
// image.pullPolicy and image.tag, which Rancher's newer charts read.
func RancherValues(current []byte, version, target string, opts RancherOptions) ([]byte, error) {
	values := map[string]any{}
	if err := yaml.Unmarshal(current, &values); err != nil {
		return nil, fmt.Errorf("reading the Rancher release's values: %w", err)
	}
	if values == nil {
		values = map[string]any{}
	}
	image, _ := values["image"].(map[string]any)
	switch {
	case values["rancherImageTag"] != nil:
		repository := "rancher/rancher"
		if r, ok := values["rancherImage"].(string); ok && r != "" {
			repository = r
		}
		delete(values, "rancherImage")
		delete(values, "rancherImagePullPolicy")
		delete(values, "rancherImageTag")
		image = map[string]any{"repository": repository, "pullPolicy": "IfNotPresent"}
	case image == nil || image["tag"] == nil:
		return nil, fmt.Errorf("the Rancher release's values have neither rancherImageTag nor image.tag: this is not Harvester's embedded Rancher")
	}
	image["tag"] = version
	values["image"] = image
	values["features"] = rancherFeatures(target)
	if opts.Replicas != nil {
		values["replicas"] = *opts.Replicas
	}
	return yaml.Marshal(values)
}

// download copies a repo file to the work directory unless it is there.
func (h *HelmRancher) download(ctx context.Context, repoPath, file string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	body, err := h.Repo.Open(ctx, repoPath)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	tmp := file + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(body); err != nil {
		_ = f.Close()
		return fmt.Errorf("downloading %s: %w", repoPath, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

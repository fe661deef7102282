package clusterupgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// skipUnlessRancherUpgraded logs and reports true when this upgrade did not
// upgrade Rancher: then Rancher's dependencies and Fleet did not change
// either, as in Harvester's upgrade_rancher, which returns early.
func skipUnlessRancherUpgraded(ctx context.Context, r *run) bool {
	if rancherUpgraded(r) {
		return false
	}
	log.FromContext(ctx).Info("Rancher was not upgraded: nothing of its dependencies changed")
	return true
}

// HelmReleaseAt judges a Helm release's newest revision against the chart
// (<chart>-<version>) and app version it must have, deployed.
func HelmReleaseAt(r *cluster.HelmRelease, chart, app string) (bool, string) {
	if r == nil {
		return false, "the release does not exist"
	}
	status := fmt.Sprintf("revision %d is %s (app %s), %s", r.Revision, r.ChartRef(), r.Chart.Metadata.AppVersion, r.Info.Status)
	return r.ChartRef() == chart && r.Chart.Metadata.AppVersion == app && r.Info.Status == cluster.HelmStatusDeployed, status
}

// +kubebuilder:rbac:groups="",namespace=cattle-system,resources=secrets,verbs=get;list;create
// +kubebuilder:rbac:groups="",namespace=cattle-fleet-system,resources=secrets,verbs=list

// waitRancherDependencies waits for what the new Rancher brings: its own
// chart index (for upgrades to v1.9), the Helm releases of Fleet, Fleet's
// CRDs and Rancher's webhook at the release's versions, Rancher,
// fleet-controller and the webhook rolled out, the Secret its
// system-agent-upgrader Plan needs, and Fleet's agent.
func (u *Upgrade) waitRancherDependencies(ctx context.Context, r *run) error {
	if skipUnlessRancherUpgraded(ctx, r) {
		return nil
	}
	if ok, _ := AppliesTo(actionForceRefreshRancherChart, r.previous(), r.rel.Harvester); ok {
		if err := u.refreshClusterRepo(ctx, cluster.RancherChartsRepo); err != nil {
			return err
		}
	}
	deps := r.rel.RancherDependencies
	for _, d := range []struct {
		namespace, name string
		version         release.ChartVersion
	}{
		{cluster.FleetSystemNamespace, cluster.FleetRelease, deps.Fleet},
		{cluster.FleetSystemNamespace, cluster.FleetCRDRelease, deps.FleetCRD},
		{cluster.CattleNamespace, cluster.RancherWebhookRelease, deps.RancherWebhook},
	} {
		chart := d.name + "-" + d.version.Chart
		w := u.wait(fmt.Sprintf("Helm release %s/%s to be %s (app %s), deployed", d.namespace, d.name, chart, d.version.App), u.Timeouts.Dependencies,
			fmt.Sprintf("Rancher installs it after its own upgrade: check Rancher's logs and the release (helm -n %s history %s)", d.namespace, d.name))
		if err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
			rel, err := cluster.LatestHelmRelease(ctx, u.Client, d.namespace, d.name)
			if err != nil {
				return false, "", err
			}
			ok, status := HelmReleaseAt(rel, chart, d.version.App)
			return ok, status, nil
		}); err != nil {
			return err
		}
	}
	for _, d := range []client.ObjectKey{
		{Namespace: cluster.CattleNamespace, Name: cluster.RancherDeployment},
		{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerDeployment},
		{Namespace: cluster.CattleNamespace, Name: cluster.RancherWebhookDeployment},
	} {
		if err := u.waitDeployment(ctx, d, u.Timeouts.Dependencies); err != nil {
			return err
		}
	}
	if err := u.ensureSTVAggregation(ctx); err != nil {
		return err
	}
	return u.waitDeployment(ctx, client.ObjectKey{Namespace: cluster.FleetLocalSystemNamespace, Name: cluster.FleetAgentDeployment}, u.Timeouts.Fleet)
}

// ensureSTVAggregation creates the empty Secret cattle-system/stv-aggregation
// that Rancher's system-agent-upgrader Plan waits for.
func (u *Upgrade) ensureSTVAggregation(ctx context.Context) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.CattleNamespace, Name: cluster.STVAggregationSecret}}
	err := u.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
	if apierrors.IsNotFound(err) {
		err = client.IgnoreAlreadyExists(u.Client.Create(ctx, s))
	}
	if err != nil {
		return fmt.Errorf("ensuring Secret %s/%s: %w", cluster.CattleNamespace, cluster.STVAggregationSecret, err)
	}
	return nil
}

// +kubebuilder:rbac:groups=fleet.cattle.io,namespace=fleet-local,resources=clusters,verbs=get;patch

// fleetCluster reads the fleet Cluster fleet-local/local.
func (u *Upgrade) fleetCluster(ctx context.Context) (*fleetv1alpha1.Cluster, error) {
	fc := &fleetv1alpha1.Cluster{}
	key := client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}
	if err := u.Client.Get(ctx, key, fc); err != nil {
		return nil, fmt.Errorf("reading the fleet Cluster %s: %w", key, err)
	}
	return fc, nil
}

// redeployFleetAgent makes Fleet deploy its agent again once Rancher's CAPI
// cluster settled after the upgrade, as Harvester's upgrade does because
// the new fleet-controller may keep the old agent: it raises the fleet
// Cluster's redeployAgentGeneration above the deployed one (the target and
// the time are recorded first) and waits until Fleet deployed that
// generation with a fleet-agent Deployment created after the request, and
// the agent rolled out.
func (u *Upgrade) redeployFleetAgent(ctx context.Context, r *run) error {
	if skipUnlessRancherUpgraded(ctx, r) {
		return nil
	}
	if err := u.waitCAPICluster(ctx, "after Rancher's upgrade"); err != nil {
		return err
	}
	fc, err := u.fleetCluster(ctx)
	if err != nil {
		return err
	}
	target, err := r.progress.once(ctx, jobspec.ProgressFleetGeneration, func() (string, error) {
		return strconv.FormatInt(ptr.Deref(fc.Status.AgentDeployedGeneration, 0)+1, 10), nil
	})
	if err != nil {
		return err
	}
	at, err := r.progress.once(ctx, jobspec.ProgressFleetRedeployAt, func() (string, error) { return u.Now().UTC().Format(time.RFC3339), nil })
	if err != nil {
		return err
	}
	generation, err := strconv.ParseInt(target, 10, 64)
	if err != nil {
		return fmt.Errorf("the recorded redeployAgentGeneration is %q: %w", target, err)
	}
	requested, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return fmt.Errorf("the recorded time of the agent's redeployment is %q: %w", at, err)
	}
	if fc.Spec.RedeployAgentGeneration < generation {
		if err := u.mergePatch(ctx, fc, map[string]any{"spec": map[string]any{"redeployAgentGeneration": generation}}, false); err != nil {
			return err
		}
	}
	agent := client.ObjectKey{Namespace: cluster.FleetLocalSystemNamespace, Name: cluster.FleetAgentDeployment}
	w := u.wait(fmt.Sprintf("Fleet to redeploy its agent (generation %d, Deployment %s created after %s)", generation, agent, at), u.Timeouts.Fleet,
		fmt.Sprintf("check fleet-controller's logs (kubectl -n %s logs deployment/%s) and the fleet Cluster (kubectl -n %s get clusters.fleet.cattle.io %s -o yaml)",
			cluster.FleetSystemNamespace, cluster.FleetControllerDeployment, cluster.FleetLocalNamespace, cluster.LocalClusterName))
	if err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		fc, err := u.fleetCluster(ctx)
		if err != nil {
			return false, "", err
		}
		deployed := ptr.Deref(fc.Status.AgentDeployedGeneration, 0)
		if deployed < generation {
			return false, fmt.Sprintf("Fleet deployed agent generation %d", deployed), nil
		}
		d := &appsv1.Deployment{}
		if err := u.Client.Get(ctx, agent, d); err != nil {
			return false, "", err
		}
		created := d.CreationTimestamp.Time
		return !created.Before(requested), fmt.Sprintf("the agent's Deployment was created %s", created.UTC().Format(time.RFC3339)), nil
	}); err != nil {
		return err
	}
	return u.waitDeployment(ctx, agent, u.Timeouts.Fleet)
}

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get

// hasStatusField reports whether some version of a CRD has field in its
// status schema.
func hasStatusField(crd *apiextensionsv1.CustomResourceDefinition, field string) bool {
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		if st, ok := v.Schema.OpenAPIV3Schema.Properties["status"]; ok {
			if _, ok := st.Properties[field]; ok {
				return true
			}
		}
	}
	return false
}

// waitFleet waits until the new Fleet took Harvester's cluster back: its
// CRDs and configuration are the new Fleet's, fleet-controller's API server
// settings are what they were before Rancher's upgrade, the fleet Cluster
// is imported; the fleet Cluster's Ready is waited for a while and
// reported.
func (u *Upgrade) waitFleet(ctx context.Context, r *run) error {
	if skipUnlessRancherUpgraded(ctx, r) {
		return nil
	}
	field := cluster.FleetAgentTLSModeField
	w := u.wait(fmt.Sprintf("the new Fleet's CRD %s and fleet-controller's config to have %s", cluster.FleetClusterCRD, field), u.Timeouts.Fleet,
		fmt.Sprintf("Rancher installs the new Fleet: check the fleet-crd and fleet releases (helm -n %s history fleet-crd)", cluster.FleetSystemNamespace))
	if err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := u.Client.Get(ctx, client.ObjectKey{Name: cluster.FleetClusterCRD}, crd); err != nil {
			return false, "", err
		}
		if !hasStatusField(crd, field) {
			return false, "the CRD has no " + field, nil
		}
		_, config, err := u.readFleetConfig(ctx)
		if err != nil || config == nil {
			return false, "fleet-controller has no config", err
		}
		_, ok := config[field]
		return ok, "fleet-controller's config has no " + field, nil
	}); err != nil {
		return err
	}
	if err := u.restoreFleetConfig(ctx, r); err != nil {
		return err
	}
	// Fleet redeployed its agent on a request made after fleet-controller's
	// rollout (step redeploy-fleet-agent), so the new fleet-controller has
	// seen the cluster; it must still call it imported.
	w = u.wait(fmt.Sprintf("the fleet Cluster %s/%s to be imported", cluster.FleetLocalNamespace, cluster.LocalClusterName), u.Timeouts.Fleet,
		fmt.Sprintf("check fleet-controller's logs (kubectl -n %s logs deployment/%s)", cluster.FleetSystemNamespace, cluster.FleetControllerDeployment))
	if err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		fc, err := u.fleetCluster(ctx)
		if err != nil {
			return false, "", err
		}
		imported := common.FindCondition(fc.Status.Conditions, cluster.ConditionImported)
		if imported == nil {
			return false, "no Imported condition", nil
		}
		return imported.Status == "True", fmt.Sprintf("Imported=%s %s", imported.Status, imported.Message), nil
	}); err != nil {
		return err
	}
	w = u.wait(fmt.Sprintf("the fleet Cluster %s/%s to be Ready", cluster.FleetLocalNamespace, cluster.LocalClusterName), u.Timeouts.FleetReady, "")
	if err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		fc, err := u.fleetCluster(ctx)
		if err != nil {
			return false, "", err
		}
		return common.IsTrue(fc.Status.Conditions, cluster.ConditionReady), "not Ready", nil
	}); err != nil {
		// As in Harvester's upgrade: the charts' own waits catch a Fleet that
		// does not deploy.
		log.FromContext(ctx).Info("the fleet Cluster is not Ready; the upgrade goes on", "reason", err.Error())
	}
	return nil
}

// restoreFleetConfig puts back the API server URL and CA fleet-controller
// had before Rancher's upgrade, when the new Fleet changed them.
func (u *Upgrade) restoreFleetConfig(ctx context.Context, r *run) error {
	raw, ok := r.progress.value(jobspec.ProgressFleetSaved)
	if !ok {
		return nil
	}
	saved := fleetConfig{}
	if err := json.Unmarshal([]byte(raw), &saved); err != nil {
		return fmt.Errorf("the recorded fleet-controller settings are %q: %w", raw, err)
	}
	cm, config, err := u.readFleetConfig(ctx)
	if err != nil || cm == nil {
		return err
	}
	changed := false
	for k, v := range map[string]string{"apiServerURL": saved.APIServerURL, "apiServerCA": saved.APIServerCA} {
		if v != "" && config[k] != v {
			config[k], changed = v, true
		}
	}
	if !changed {
		return nil
	}
	out, err := yaml.Marshal(config)
	if err != nil {
		return err
	}
	log.FromContext(ctx).Info("restoring fleet-controller's API server settings", "configMap", cluster.FleetSystemNamespace+"/"+cluster.FleetControllerConfigMap)
	return u.mergePatch(ctx, cm, map[string]any{"data": map[string]string{cluster.FleetControllerConfigKey: string(out)}}, false)
}

// waitFleetBundles waits a while for every Fleet Bundle to be ready and
// reports the ones that are not (cluster.WaitBundles).
func (u *Upgrade) waitFleetBundles(ctx context.Context, _ *run) error {
	return cluster.WaitBundles(ctx, u.Client, u.Timeouts.Bundles, u.Timeouts.Interval)
}

package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/clusterupgrade"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// Rancher's chart and the new Rancher, as the cluster upgrade sees them:
//
//	helm upgrade   (RancherChart, the cluster-upgrade Job's RancherUpgrader)
//	               a new revision of the rancher release, Rancher's
//	               Deployment runs the new image; returns once it rolled
//	               out, as `helm upgrade --wait`
//	new Rancher    once its Deployment runs a version the server-version
//	               setting does not say: it reports it, recreates its own
//	               chart repositories and chart-default-branch, installs
//	               Fleet, Fleet's CRDs and its webhook at the release's
//	               versions (whose Deployments roll; the new Fleet drops
//	               fleet-controller's apiServerURL, harvester/harvester#6851),
//	               and its CAPI controllers re-provision the CAPI Cluster for
//	               Timing.DrainStep
//	catalog        a ClusterRepo whose forceUpdate is later than its last
//	               download and past is downloaded again

// RancherChart is the simulator's stand-in for Helm upgrading Rancher's
// chart (clusterupgrade.HelmRancher runs wharfie and helm, which need a
// container runtime's images and a real Rancher).
type RancherChart struct{ s *Sim }

// Upgrade implements clusterupgrade.RancherUpgrader.
func (r RancherChart) Upgrade(ctx context.Context, rel *release.Release, opts clusterupgrade.RancherOptions) error {
	s := r.s
	if err := s.upgradeHelmRelease(ctx, cluster.CattleNamespace, cluster.RancherRelease, strings.TrimPrefix(rel.Rancher, "v"), rel.Rancher, nil); err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.RancherDeployment}
	if err := s.setDeploymentImage(ctx, key, "rancher/rancher:"+rel.Rancher); err != nil {
		return err
	}
	// helm --wait: until the Deployment rolled out.
	return s.poll(ctx, func() bool {
		d := &appsv1.Deployment{}
		if s.reader.Get(ctx, key, d) != nil {
			return false
		}
		ok, _ := clusterupgrade.DeploymentRolledOut(d)
		return ok && d.Spec.Template.Spec.Containers[0].Image == "rancher/rancher:"+rel.Rancher
	})
}

// setDeploymentImage sets the image of a Deployment's first container.
func (s *Sim) setDeploymentImage(ctx context.Context, key client.ObjectKey, image string) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	return s.mutate(ctx, d, false, func() bool {
		if d.Spec.Template.Spec.Containers[0].Image == image {
			return false
		}
		d.Spec.Template.Spec.Containers[0].Image = image
		return true
	})
}

// setDaemonSetImage sets the image of a DaemonSet's first container.
func (s *Sim) setDaemonSetImage(ctx context.Context, key client.ObjectKey, image string) error {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	err := s.mutate(ctx, ds, false, func() bool {
		if ds.Spec.Template.Spec.Containers[0].Image == image {
			return false
		}
		ds.Spec.Template.Spec.Containers[0].Image = image
		return true
	})
	return client.IgnoreNotFound(err)
}

func (s *Sim) setupRancherServer(mgr ctrl.Manager) error {
	rancher := client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.RancherDeployment}
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-rancher-server").
		For(&appsv1.Deployment{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.NamespacedName != rancher {
				return reconcile.Result{}, nil
			}
			return reconcile.Result{}, s.reconcileNewRancher(ctx)
		})); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-rancher-catalog").
		For(&catalogv1.ClusterRepo{}).
		Complete(reconcile.Func(s.reconcileClusterRepo)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-rancher-capi").
		For(&capiv1beta1.Cluster{}).
		Watches(&managementv3.Setting{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}}}
		})).
		Complete(reconcile.Func(s.reconcileCAPICluster))
}

// rancherRecreated are the objects Rancher creates at its start when they
// are missing.
func rancherRecreated() []client.Object {
	objs := []client.Object{&managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ChartDefaultBranchSetting}}}
	for _, name := range []string{cluster.RancherChartsRepo, cluster.RancherRKE2ChartsRepo, cluster.RancherPartnerChartsRepo} {
		objs = append(objs, &catalogv1.ClusterRepo{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	return objs
}

// reconcileNewRancher is the new Rancher starting (see the top of the
// file).
func (s *Sim) reconcileNewRancher(ctx context.Context) error {
	d := &appsv1.Deployment{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.RancherDeployment}, d); err != nil {
		return client.IgnoreNotFound(err)
	}
	version, _ := strings.CutPrefix(d.Spec.Template.Spec.Containers[0].Image, "rancher/rancher:")
	if ok, _ := clusterupgrade.DeploymentRolledOut(d); !ok || version == "" {
		return nil
	}
	sv := &managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.RancherServerVersionSetting}}
	if err := s.reader.Get(ctx, client.ObjectKeyFromObject(sv), sv); err != nil || sv.Value == version {
		return client.IgnoreNotFound(err)
	}
	for _, obj := range rancherRecreated() {
		if err := s.c.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
			return err
		}
	}
	if t := s.target; t != nil && t.Rancher == version {
		deps := t.RancherDependencies
		for _, r := range []struct {
			namespace, name   string
			v                 release.ChartVersion
			deployment, image string
		}{
			{cluster.FleetSystemNamespace, cluster.FleetRelease, deps.Fleet, cluster.FleetControllerDeployment, "rancher/fleet"},
			{cluster.FleetSystemNamespace, cluster.FleetCRDRelease, deps.FleetCRD, "", ""},
			{cluster.CattleNamespace, cluster.RancherWebhookRelease, deps.RancherWebhook, cluster.RancherWebhookDeployment, "rancher/rancher-webhook"},
		} {
			if err := s.upgradeHelmRelease(ctx, r.namespace, r.name, r.v.Chart, r.v.App, nil); err != nil {
				return err
			}
			if r.deployment != "" {
				if err := s.setDeploymentImage(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.deployment}, fmt.Sprintf("%s:v%s", r.image, r.v.App)); client.IgnoreNotFound(err) != nil {
					return err
				}
			}
		}
		if err := s.dropFleetAPIServerURL(ctx); err != nil {
			return err
		}
	}
	// The new Rancher's CAPI controllers take the cluster over.
	capi := &capiv1beta1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}}
	if err := s.mutate(ctx, capi, true, func() bool {
		capi.Status.Phase = "Provisioning"
		return true
	}); client.IgnoreNotFound(err) != nil {
		return err
	}
	sv.Value = version
	return s.c.Update(ctx, sv)
}

// dropFleetAPIServerURL is the new Fleet's config without the API server
// URL the old one had.
func (s *Sim) dropFleetAPIServerURL(ctx context.Context) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerConfigMap}}
	err := s.mutate(ctx, cm, false, func() bool {
		config := map[string]any{}
		if yaml.Unmarshal([]byte(cm.Data[cluster.FleetControllerConfigKey]), &config) != nil || config["apiServerURL"] == nil {
			return false
		}
		delete(config, "apiServerURL")
		out, _ := yaml.Marshal(config)
		cm.Data[cluster.FleetControllerConfigKey] = string(out)
		return true
	})
	return client.IgnoreNotFound(err)
}

// reconcileCAPICluster is Rancher's CAPI controllers finishing a
// re-provisioning after Timing.DrainStep.
func (s *Sim) reconcileCAPICluster(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	capi := &capiv1beta1.Cluster{}
	if err := s.c.Get(ctx, req.NamespacedName, capi); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if capi.Status.Phase == cluster.CAPIClusterPhaseProvisioned && capi.Status.ObservedGeneration == capi.Generation {
		return reconcile.Result{}, nil
	}
	step := fmt.Sprintf("capi/%s", capi.UID)
	if wait := s.steps.remaining(step, s.cfg.Timing.DrainStep); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	s.steps.forget(step)
	capi.Status.Phase, capi.Status.ObservedGeneration = cluster.CAPIClusterPhaseProvisioned, capi.Generation
	return reconcile.Result{}, s.c.Status().Update(ctx, capi)
}

// reconcileClusterRepo is Rancher's catalog downloading an index when
// asked (and the first time).
func (s *Sim) reconcileClusterRepo(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	repo := &catalogv1.ClusterRepo{}
	if err := s.c.Get(ctx, req.NamespacedName, repo); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	last := repo.Status.DownloadTime.Time
	force := repo.Spec.ForceUpdate
	switch {
	case last.IsZero():
	case force != nil && force.After(last):
		if wait := time.Until(force.Time); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	default:
		return reconcile.Result{}, nil
	}
	repo.Status.DownloadTime = metav1.NewTime(time.Now().Truncate(time.Second))
	if !repo.Status.DownloadTime.After(last) {
		repo.Status.DownloadTime = metav1.NewTime(last.Add(time.Second))
	}
	err := s.c.Status().Update(ctx, repo)
	if apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: pollInterval}, nil
	}
	return reconcile.Result{}, err
}

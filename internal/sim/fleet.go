package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
)

// Rancher and Fleet deploy the ManagedCharts as they do in a cluster:
//
//	Rancher   writes a ManagedChart's chart, version, options, values and
//	          pause into the Bundle fleet-local/mcc-<chart> (a change of them
//	          is a new generation of the Bundle), and copies the Bundle's
//	          status into the ManagedChart's
//	Fleet     processes a new generation: observedGeneration moves and the
//	          summary counts the deployment waiting to be applied; a paused
//	          Bundle keeps what it deployed; after Timing.ChartDeploy the
//	          deployment is ready, unless Fleet is unresponsive (a fault)
//
// Deploying the harvester chart at the release's chart version has what the
// chart brings happen: its Helm release's new revision, Harvester reporting
// the new version, KubeVirt and Longhorn's manager rolling to the release.

func (s *Sim) setupFleet(mgr ctrl.Manager) error {
	toChart := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name, ok := strings.CutPrefix(o.GetName(), cluster.ManagedChartBundlePrefix)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	})
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-rancher-managedchart").
		For(&managementv3.ManagedChart{}).
		Watches(&fleetv1alpha1.Bundle{}, toChart).
		Complete(reconcile.Func(s.reconcileManagedChart)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-fleet-bundle").
		For(&fleetv1alpha1.Bundle{}).
		Complete(reconcile.Func(s.reconcileBundle)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-fleet-agent").
		For(&fleetv1alpha1.Cluster{}).
		Complete(reconcile.Func(s.reconcileFleetCluster))
}

// reconcileManagedChart is Rancher's ManagedChart controller.
func (s *Sim) reconcileManagedChart(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mc := &managementv3.ManagedChart{}
	if err := s.c.Get(ctx, req.NamespacedName, mc); err != nil || mc.DeletionTimestamp != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	b := &fleetv1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: cluster.ManagedChartBundlePrefix + mc.Name}}
	want := cluster.ManagedChartBundleSpec(mc)
	err := s.c.Get(ctx, client.ObjectKeyFromObject(b), b)
	switch {
	case apierrors.IsNotFound(err):
		b.Spec = want
		b.OwnerReferences = []metav1.OwnerReference{{APIVersion: managementv3.GroupVersion.String(), Kind: "ManagedChart", Name: mc.Name, UID: mc.UID}}
		return reconcile.Result{}, client.IgnoreAlreadyExists(s.c.Create(ctx, b))
	case err != nil:
		return reconcile.Result{}, err
	case !cluster.SameBundleSpec(b.Spec, want):
		b.Spec = want
		return reconcile.Result{}, s.c.Update(ctx, b)
	case !equality.Semantic.DeepEqual(mc.Status, b.Status):
		mc.Status = *b.Status.DeepCopy()
		return reconcile.Result{}, s.c.Status().Update(ctx, mc)
	}
	return reconcile.Result{}, nil
}

// reconcileBundle is Fleet deploying a Bundle.
func (s *Sim) reconcileBundle(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	b := &fleetv1alpha1.Bundle{}
	if err := s.c.Get(ctx, req.NamespacedName, b); err != nil || b.DeletionTimestamp != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	st := b.Status
	step := fmt.Sprintf("bundle/%s/%d", b.UID, b.Generation)
	switch {
	case st.ObservedGeneration < b.Generation && b.Spec.Paused:
		// A paused bundle keeps what it deployed.
		st.ObservedGeneration = b.Generation
		if st.Summary.DesiredReady == 0 {
			st = deployedBundleStatus(b.Generation)
		}
	case st.ObservedGeneration < b.Generation:
		st.ObservedGeneration = b.Generation
		st.Summary = fleetv1alpha1.BundleSummary{DesiredReady: 1, WaitApplied: 1}
		st.Display = fleetv1alpha1.BundleDisplay{ReadyClusters: "0/1", State: "WaitApplied"}
		st.Conditions = []common.Condition{{Type: cluster.ConditionReady, Status: "False", Message: "WaitApplied(1) [Cluster fleet-local/local]", LastUpdateTime: wranglerNow()}}
		s.steps.forget(step)
	case b.Spec.Paused || st.Summary.Ready > 0 || s.faults.unresponsive(ComponentFleet):
		return reconcile.Result{}, nil
	default:
		if wait := s.steps.remaining(step, s.cfg.Timing.ChartDeploy); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		if err := s.chartDeployed(ctx, b); err != nil {
			return reconcile.Result{}, err
		}
		st = deployedBundleStatus(b.Generation)
	}
	if equality.Semantic.DeepEqual(st, b.Status) {
		return reconcile.Result{}, nil
	}
	b.Status = st
	// The status update brings the Bundle back for its next state.
	return reconcile.Result{}, s.c.Status().Update(ctx, b)
}

// chartDeployed has what a deployed chart brings happen; only the harvester
// chart at the release's chart version brings anything the simulator
// models.
func (s *Sim) chartDeployed(ctx context.Context, b *fleetv1alpha1.Bundle) error {
	t := s.target
	if b.Name != cluster.ManagedChartBundlePrefix+cluster.HarvesterManagedChart || t == nil || b.Spec.Helm == nil || b.Spec.Helm.Version != t.HarvesterChart {
		return nil
	}
	if err := s.upgradeHelmRelease(ctx, cluster.HarvesterNamespace, cluster.HarvesterRelease, t.HarvesterChart, t.Harvester, harvesterValues(longhornToTag)); err != nil {
		return err
	}
	// Harvester's new pods report the new version, unless they never
	// become ready (FaultSet.StuckVersion).
	setting := &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ServerVersionSetting}}
	if err := s.mutate(ctx, setting, false, func() bool {
		if setting.Value == t.Harvester || s.faults.versionStuck() {
			return false
		}
		setting.Value = t.Harvester
		return true
	}); err != nil {
		return err
	}
	// virt-operator rolls KubeVirt to the chart's version (reconcileKubeVirt).
	kv := &kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}}
	if err := s.mutate(ctx, kv, true, func() bool {
		if kv.Status.TargetKubeVirtVersion == t.KubeVirt {
			return false
		}
		kv.Status.TargetKubeVirtVersion, kv.Status.Phase = t.KubeVirt, "Deploying"
		return true
	}); client.IgnoreNotFound(err) != nil {
		return err
	}
	// The chart's new Longhorn manager (reconcileLonghornManager).
	return s.setDaemonSetImage(ctx, client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornManagerDaemonSet}, longhornManagerRepo+":"+longhornToTag)
}

// upgradeHelmRelease writes the next revision of a Helm release, deployed,
// and marks the previous one superseded, as Helm does.
func (s *Sim) upgradeHelmRelease(ctx context.Context, namespace, name, chart, app string, values map[string]any) error {
	cur, err := cluster.LatestHelmRelease(ctx, s.reader, namespace, name)
	if err != nil {
		return err
	}
	rev := 1
	if cur != nil {
		if cur.Chart.Metadata.Version == chart && cur.Chart.Metadata.AppVersion == app && cur.Info.Status == cluster.HelmStatusDeployed {
			return nil
		}
		rev = cur.Revision + 1
	}
	next, err := cluster.HelmReleaseSecret(&cluster.HelmRelease{Name: name, Namespace: namespace, Revision: rev,
		Info:  cluster.HelmReleaseInfo{Status: cluster.HelmStatusDeployed, LastDeployed: time.Now()},
		Chart: cluster.HelmChart{Metadata: cluster.HelmChartMetadata{Name: name, Version: chart, AppVersion: app}, Values: values}})
	if err != nil {
		return err
	}
	return client.IgnoreAlreadyExists(s.c.Create(ctx, next))
}

// rawValues is a chart's values as a ManagedChart holds them.
func rawValues(values map[string]any) *runtime.RawExtension {
	raw, _ := json.Marshal(values)
	return &runtime.RawExtension{Raw: raw}
}

// fleetVersion is the version of Fleet's controller: its Deployment's image
// tag, without its "v".
func (s *Sim) fleetVersion(ctx context.Context) (string, error) {
	d := &appsv1.Deployment{}
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: cluster.FleetSystemNamespace, Name: cluster.FleetControllerDeployment}, d); err != nil {
		return "", err
	}
	_, tag, _ := strings.Cut(d.Spec.Template.Spec.Containers[0].Image, ":")
	return strings.TrimPrefix(tag, "v"), nil
}

// reconcileFleetCluster is Fleet's agent management: a fleet Cluster asked
// for a new agent generation gets a new fleet-agent Deployment, is imported
// again and records the generation.
func (s *Sim) reconcileFleetCluster(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	fc := &fleetv1alpha1.Cluster{}
	if err := s.c.Get(ctx, req.NamespacedName, fc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if fc.Spec.RedeployAgentGeneration <= ptr.Deref(fc.Status.AgentDeployedGeneration, 0) || s.faults.unresponsive(ComponentFleetAgent) {
		return reconcile.Result{}, nil
	}
	step := fmt.Sprintf("fleet-agent/%d", fc.Spec.RedeployAgentGeneration)
	if wait := s.steps.remaining(step, s.cfg.Timing.DrainStep); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	version, err := s.fleetVersion(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	agent := s.fleetAgent(fc.Spec.RedeployAgentGeneration, version).obj
	if err := client.IgnoreNotFound(s.c.Delete(ctx, agent.DeepCopyObject().(client.Object))); err != nil {
		return reconcile.Result{}, err
	}
	if err := s.c.Create(ctx, agent); err != nil {
		// The old one is still being deleted: try again.
		return reconcile.Result{RequeueAfter: pollInterval}, client.IgnoreAlreadyExists(err)
	}
	s.steps.forget(step)
	fc.Status.AgentDeployedGeneration = ptr.To(fc.Spec.RedeployAgentGeneration)
	common.SetCondition(&fc.Status.Conditions, common.Condition{Type: cluster.ConditionImported, Status: "True", LastUpdateTime: wranglerNow(), Message: "agent redeployed"})
	return reconcile.Result{}, s.c.Status().Update(ctx, fc)
}

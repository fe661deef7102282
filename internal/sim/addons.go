package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
)

// Harvester's add-on controller, virt-operator and Longhorn's manager, as
// the cluster upgrade sees them:
//
//	add-ons       an enabled add-on whose spec changed after it was deployed
//	              is redeployed as Harvester does it: InProgress (the status
//	              still says AddonDeploySuccessful), then AddonUpdating while
//	              its chart's job runs (Timing.ChartDeploy), then
//	              AddonDeploySuccessful with Completed
//	virt-operator KubeVirt reaches the version the harvester chart targets
//	              after Timing.DeploymentReady, phase Deployed
//	longhorn      the manager DaemonSet rolls out on every workload node after
//	              Timing.DeploymentReady; a new manager brings its instance
//	              managers on every node
//
// Each can be made unresponsive with FaultSet.Unresponsive.

func (s *Sim) setupComponents(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-harvester-addon").
		For(&harvesterv1beta1.Addon{}).
		Complete(reconcile.Func(s.reconcileAddon)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-virt-operator").
		For(&kubevirtv1.KubeVirt{}).
		Complete(reconcile.Func(s.reconcileKubeVirtVersion)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-longhorn-manager").
		For(&appsv1.DaemonSet{}).
		Complete(reconcile.Func(s.reconcileLonghornManager))
}

// addonSpecHash is what Harvester's chart of an add-on was deployed from.
func addonSpecHash(a *harvesterv1beta1.Addon) string {
	b, _ := json.Marshal(a.Spec)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// annotationDeployedSpec is where the simulated controller remembers the
// spec it deployed (Harvester compares the add-on with its HelmChart).
const annotationDeployedSpec = "sim.upgrade-toolkit.harvesterhci.io/deployed-spec"

func (s *Sim) reconcileAddon(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	a := &harvesterv1beta1.Addon{}
	if err := s.c.Get(ctx, req.NamespacedName, a); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	spec := addonSpecHash(a)
	deployed := a.Annotations[annotationDeployedSpec]
	if deployed == "" {
		// As the cluster had it before anything changed.
		if a.Annotations == nil {
			a.Annotations = map[string]string{}
		}
		a.Annotations[annotationDeployedSpec] = spec
		return reconcile.Result{}, s.c.Update(ctx, a)
	}
	if !a.Spec.Enabled || deployed == spec || a.Status.Status != cluster.AddonStateDeployed && a.Status.Status != cluster.AddonStateUpdating ||
		s.faults.unresponsive(ComponentAddons) {
		return reconcile.Result{}, nil
	}
	now := wranglerNow()
	switch {
	case !common.IsTrue(a.Status.Conditions, cluster.AddonConditionInProgress):
		common.SetCondition(&a.Status.Conditions, common.Condition{Type: cluster.AddonConditionInProgress, Status: "True", LastUpdateTime: now})
		common.SetCondition(&a.Status.Conditions, common.Condition{Type: cluster.AddonConditionCompleted, Status: "False", LastUpdateTime: now})
	case a.Status.Status != cluster.AddonStateUpdating:
		a.Status.Status = cluster.AddonStateUpdating
	default:
		step := fmt.Sprintf("addon/%s/%s", a.UID, spec)
		if wait := s.steps.remaining(step, s.cfg.Timing.ChartDeploy); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		s.steps.forget(step)
		a.Status.Status = cluster.AddonStateDeployed
		common.SetCondition(&a.Status.Conditions, common.Condition{Type: cluster.AddonConditionInProgress, Status: "False", LastUpdateTime: now})
		common.SetCondition(&a.Status.Conditions, common.Condition{Type: cluster.AddonConditionCompleted, Status: "True", LastUpdateTime: now})
		if err := s.c.Status().Update(ctx, a); err != nil {
			return reconcile.Result{}, err
		}
		a.Annotations[annotationDeployedSpec] = spec
		return reconcile.Result{}, s.c.Update(ctx, a)
	}
	return reconcile.Result{}, s.c.Status().Update(ctx, a)
}

// reconcileKubeVirtVersion is virt-operator rolling KubeVirt to its target
// version.
func (s *Sim) reconcileKubeVirtVersion(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	kv := &kubevirtv1.KubeVirt{}
	if err := s.c.Get(ctx, req.NamespacedName, kv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	target := kv.Status.TargetKubeVirtVersion
	if target == "" || target == kv.Status.ObservedKubeVirtVersion || s.faults.unresponsive(ComponentKubeVirt) {
		return reconcile.Result{}, nil
	}
	step := "kubevirt/" + target
	if wait := s.steps.remaining(step, s.cfg.Timing.DeploymentReady); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	s.steps.forget(step)
	kv.Status.ObservedKubeVirtVersion, kv.Status.Phase = target, "Deployed"
	return reconcile.Result{}, s.c.Status().Update(ctx, kv)
}

// reconcileLonghornManager is the DaemonSet controller and Longhorn for
// Longhorn's manager.
func (s *Sim) reconcileLonghornManager(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Namespace != cluster.LonghornNamespace || req.Name != cluster.LonghornManagerDaemonSet {
		return reconcile.Result{}, nil
	}
	ds := &appsv1.DaemonSet{}
	if err := s.c.Get(ctx, req.NamespacedName, ds); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	nodes := int32(len(s.cfg.nodeNames()))
	if ds.Status.ObservedGeneration == ds.Generation && ds.Status.NumberReady == nodes {
		return reconcile.Result{}, nil
	}
	if s.faults.unresponsive(ComponentLonghorn) && ds.Status.ObservedGeneration > 0 {
		return reconcile.Result{}, nil
	}
	step := fmt.Sprintf("daemonset/%s/%d", ds.UID, ds.Generation)
	if wait := s.steps.remaining(step, s.cfg.Timing.DeploymentReady); wait > 0 && ds.Status.ObservedGeneration > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	s.steps.forget(step)
	image := ds.Spec.Template.Spec.Containers[0].Image
	if tag, ok := strings.CutPrefix(image, longhornManagerRepo+":"); ok {
		for _, n := range s.cfg.nodeNames() {
			im := instanceManager(n, longhornInstanceMgrRepo+":"+tag)
			if err := s.c.Create(ctx, im.obj); apierrors.IsAlreadyExists(err) {
				continue
			} else if err != nil {
				return reconcile.Result{}, err
			}
			im.status(im.obj)
			if err := s.c.Status().Update(ctx, im.obj); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: nodes, CurrentNumberScheduled: nodes,
		UpdatedNumberScheduled: nodes, NumberAvailable: nodes, NumberReady: nodes}
	return reconcile.Result{}, s.c.Status().Update(ctx, ds)
}

package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
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
//	              after Timing.ChartDeploy, phase Deployed
//	longhorn      once the real DaemonSet controller rolled the manager out on
//	              every node (kwok runs its pods), the new manager brings its
//	              instance managers on every node; an unresponsive Longhorn's
//	              new manager pods crash and never become ready
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
	if err := ctrl.NewControllerManagedBy(mgr).Named("sim-longhorn-manager").
		For(&appsv1.DaemonSet{}).
		Complete(reconcile.Func(s.reconcileLonghornManager)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-longhorn-manager-pods").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == cluster.LonghornNamespace && o.GetLabels()["app"] == cluster.LonghornManagerDaemonSet
		}))).
		Complete(reconcile.Func(s.reconcileLonghornManagerPod))
}

// reconcileLonghornManagerPod makes the new manager's pods of an
// unresponsive Longhorn crash: their container is not ready and restarts,
// so the real DaemonSet controller never finishes the rollout.
func (s *Sim) reconcileLonghornManagerPod(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if !s.faults.unresponsive(ComponentLonghorn) {
		return reconcile.Result{}, nil
	}
	pod := &corev1.Pod{}
	if err := s.c.Get(ctx, req.NamespacedName, pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if len(pod.Spec.Containers) == 0 || !strings.HasSuffix(pod.Spec.Containers[0].Image, ":"+longhornToTag) ||
		len(pod.Status.ContainerStatuses) == 0 || !pod.Status.ContainerStatuses[0].Ready {
		return reconcile.Result{}, nil
	}
	cs := &pod.Status.ContainerStatuses[0]
	cs.Ready, cs.Started, cs.RestartCount = false, ptr.To(false), cs.RestartCount+1
	cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
		Message: "back-off restarting failed container longhorn-manager"}}
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status, c.Reason = corev1.ConditionFalse, "ContainersNotReady"
		}
	}
	return reconcile.Result{}, s.c.Status().Update(ctx, pod)
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
	if wait := s.steps.remaining(step, s.cfg.Timing.ChartDeploy); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	s.steps.forget(step)
	kv.Status.ObservedKubeVirtVersion, kv.Status.Phase = target, "Deployed"
	return reconcile.Result{}, s.c.Status().Update(ctx, kv)
}

// reconcileLonghornManager is Longhorn's manager: once the real DaemonSet
// controller has rolled a new manager out on every node, the manager brings
// an instance manager of its version on every node.
func (s *Sim) reconcileLonghornManager(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Namespace != cluster.LonghornNamespace || req.Name != cluster.LonghornManagerDaemonSet || s.faults.unresponsive(ComponentLonghorn) {
		return reconcile.Result{}, nil
	}
	ds := &appsv1.DaemonSet{}
	if err := s.c.Get(ctx, req.NamespacedName, ds); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	st := ds.Status
	if st.ObservedGeneration != ds.Generation || st.DesiredNumberScheduled == 0 ||
		st.UpdatedNumberScheduled != st.DesiredNumberScheduled || st.NumberReady != st.DesiredNumberScheduled {
		return reconcile.Result{}, nil
	}
	tag, ok := strings.CutPrefix(ds.Spec.Template.Spec.Containers[0].Image, longhornManagerRepo+":")
	if !ok {
		return reconcile.Result{}, nil
	}
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
	return reconcile.Result{}, nil
}

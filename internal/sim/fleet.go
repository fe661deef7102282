package sim

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
)

// The simulated Fleet deploys every change of a ManagedChart that is not
// paused at once: it observes the new generation and reports Ready. Once the
// harvester chart runs, Harvester reports the chart's version in its
// server-version Setting, as the new harvester pods do when they start
// (unless FaultSet.StuckVersion keeps them from starting).

func (s *Sim) setupFleet(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-fleet").
		For(&managementv3.ManagedChart{}).
		Complete(reconcile.Func(s.reconcileManagedChart))
}

func (s *Sim) reconcileManagedChart(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mc := &managementv3.ManagedChart{}
	if err := s.c.Get(ctx, req.NamespacedName, mc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if mc.Spec.Paused {
		return reconcile.Result{}, nil
	}
	if mc.Status.ObservedGeneration != mc.Generation || !common.IsTrue(mc.Status.Conditions, "Ready") {
		mc.Status.ObservedGeneration = mc.Generation
		common.SetCondition(&mc.Status.Conditions, readyTrue())
		if err := s.c.Status().Update(ctx, mc); err != nil {
			return reconcile.Result{}, err
		}
	}
	if mc.Name != cluster.HarvesterManagedChart || s.faults.versionStuck() {
		return reconcile.Result{}, nil
	}
	version := harvesterVersion(mc.Spec.Version)
	setting := &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ServerVersionSetting}}
	return reconcile.Result{}, s.mutate(ctx, setting, false, func() bool {
		if setting.Value == version {
			return false
		}
		setting.Value = version
		return true
	})
}

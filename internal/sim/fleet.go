package sim

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
)

// The simulated Fleet deploys every change of a ManagedChart at once: it
// observes the new generation and reports Ready.

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
	if mc.Status.ObservedGeneration == mc.Generation && common.IsTrue(mc.Status.Conditions, "Ready") {
		return reconcile.Result{}, nil
	}
	mc.Status.ObservedGeneration = mc.Generation
	common.SetCondition(&mc.Status.Conditions, readyTrue())
	return reconcile.Result{}, s.c.Status().Update(ctx, mc)
}

package clusterupgrade

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// DeploymentRolledOut judges a Deployment as `kubectl rollout status` does:
// the controller saw the latest spec, and every replica is updated and
// available, with no old one left.
func DeploymentRolledOut(d *appsv1.Deployment) (bool, string) {
	want := ptr.Deref(d.Spec.Replicas, 1)
	st := d.Status
	status := fmt.Sprintf("%d of %d replicas updated, %d available, %d in all", st.UpdatedReplicas, want, st.AvailableReplicas, st.Replicas)
	if st.ObservedGeneration < d.Generation {
		return false, "the Deployment controller has not seen the latest spec yet"
	}
	return st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want, status
}

// DaemonSetRolledOut judges a DaemonSet as `kubectl rollout status` does.
func DaemonSetRolledOut(ds *appsv1.DaemonSet) (bool, string) {
	st := ds.Status
	status := fmt.Sprintf("%d of %d pods updated, %d available", st.UpdatedNumberScheduled, st.DesiredNumberScheduled, st.NumberAvailable)
	if st.ObservedGeneration < ds.Generation {
		return false, "the DaemonSet controller has not seen the latest spec yet"
	}
	return st.UpdatedNumberScheduled == st.DesiredNumberScheduled && st.NumberAvailable == st.DesiredNumberScheduled, status
}

// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get

// waitDeployment waits, at most timeout, until the Deployment rolled out.
func (u *Upgrade) waitDeployment(ctx context.Context, key client.ObjectKey, timeout time.Duration) error {
	w := u.wait("Deployment "+key.String()+" to roll out", timeout,
		fmt.Sprintf("check its pods (kubectl -n %s describe deployment %s)", key.Namespace, key.Name))
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		d := &appsv1.Deployment{}
		if err := u.Client.Get(ctx, key, d); err != nil {
			return false, "", err
		}
		ok, status := DeploymentRolledOut(d)
		return ok, status, nil
	})
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=kubevirts,verbs=get

// waitKubeVirt waits until KubeVirt runs the release's version: the
// Harvester chart upgraded it.
func (u *Upgrade) waitKubeVirt(ctx context.Context, r *run) error {
	w := u.wait("KubeVirt to run "+r.rel.KubeVirt, u.Timeouts.KubeVirt,
		fmt.Sprintf("check KubeVirt (kubectl -n %s get kubevirt %s -o yaml) and virt-operator's logs", cluster.HarvesterNamespace, cluster.KubeVirtName))
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		kv, err := cluster.KubeVirtObject(ctx, u.Client)
		if err != nil {
			return false, "", err
		}
		ready, status := cluster.KubeVirtReady(kv)
		return ready && kv.Status.ObservedKubeVirtVersion == r.rel.KubeVirt, status, nil
	})
}

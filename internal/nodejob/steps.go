package nodejob

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// The steps of each job, in order.

// prepareSteps: the image-preload Job on every managed node, before the
// cluster's components are upgraded.
func (j *Job) prepareSteps() []step {
	return []step{
		{"check the upgrade eligibility", j.checkEligibility},
		{"wait for the upgrade repo", j.waitRepo},
		{"import the release's images", j.importImages},
		{"stage the RKE2 and agent archives", j.stageArchives},
		{"keep RKE2 running while Rancher is upgraded", j.holdRKE2Restart},
	}
}

// preDrainSteps: before Rancher drains the node.
func (j *Job) preDrainSteps() []step {
	return []step{
		{"let rancher-system-agent restart RKE2 again", j.releaseHold},
		{"wait for Longhorn volumes", j.waitLonghorn},
		{"check that every VM can leave the node", j.refuseStuckVMs},
		{"record and stop the VMs that cannot live-migrate", j.shutDownNonMigratable},
		{"taint the node for KubeVirt's evacuation", j.taintNode},
		{"wait for the VMs to leave", j.waitVMsGone(true)},
		{"wait for the evacuation PodDisruptionBudgets", j.waitEvacuationPDBs},
		{"remove the old canal configuration", j.removeCanalConfig},
		{"disable RKE2's snapshot charts", j.disableRKE2Charts},
		{"switch RKE2's ingress controller to Traefik", j.switchIngress},
	}
}

// postDrainSteps: after Rancher upgraded RKE2 on the drained node.
func (j *Job) postDrainSteps() []step {
	return []step{
		{"wait for the upgrade repo", j.waitRepo},
		{"configure the kubelet", j.configureKubelet},
		{"wait for the new RKE2", j.waitKubelet},
		{"remove the staged RKE2 archives", j.cleanRKE2Archives},
		{"remove the evacuation taint", j.untaintNode},
		{"upgrade the OS and reboot", j.upgradeOS},
	}
}

// singleNodeSteps: the whole upgrade of a one-node cluster, where nothing
// can move away and Rancher runs no drain hooks.
func (j *Job) singleNodeSteps() []step {
	return []step{
		{"let rancher-system-agent restart RKE2 again", j.releaseHold},
		{"wait for the upgrade repo", j.waitRepo},
		{"remove the old canal configuration", j.removeCanalConfig},
		{"disable RKE2's snapshot charts", j.disableRKE2Charts},
		// The repo runs on this node too: fetch the OS before stopping things.
		{"download the new OS image", j.downloadRootfs},
		{"record and stop the VMs", j.shutDownNonMigratable},
		{"wait for the VMs to stop", j.waitVMsGone(false)},
		// Fleet is left to finish the cluster upgrade's charts before RKE2
		// restarts under it.
		{"wait for Fleet's bundles", j.waitBundles},
		{"configure the kubelet", j.configureKubelet},
		{"switch RKE2's ingress controller to Traefik", j.switchIngress},
		{"upgrade RKE2", j.upgradeRKE2},
		{"wait for the new RKE2", j.waitKubelet},
		{"remove the staged RKE2 archives", j.cleanRKE2Archives},
		{"upgrade the OS and reboot", j.upgradeOS},
	}
}

// imageCleanupSteps: after every node runs the new release.
func (j *Job) imageCleanupSteps() []step {
	return []step{
		{"wait for the upgrade repo", j.waitRepo},
		{"remove the previous release's images", j.removeStaleImages},
	}
}

// +kubebuilder:rbac:groups=provisioning.cattle.io,resources=clusters,verbs=get;patch

// upgradeRKE2 has Rancher move the single node to the release's Kubernetes
// version: kubernetesVersion and an rkeConfig, without drain hooks.
func (j *Job) upgradeRKE2(ctx context.Context, s *state) error {
	cl, err := cluster.LocalCluster(ctx, j.Client)
	if err != nil {
		return err
	}
	if cl.Spec.KubernetesVersion == s.release.Kubernetes && cl.Spec.RKEConfig != nil {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{
		"kubernetesVersion": s.release.Kubernetes,
		"rkeConfig":         map[string]any{},
	}})
	if err != nil {
		return err
	}
	target := &provisioningv1.Cluster{}
	target.SetNamespace(cl.Namespace)
	target.SetName(cl.Name)
	if err := j.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting kubernetesVersion %s on the provisioning Cluster %s/%s: %w", s.release.Kubernetes, cl.Namespace, cl.Name, err)
	}
	return nil
}

// +kubebuilder:rbac:groups=fleet.cattle.io,resources=bundles,verbs=list
// +kubebuilder:rbac:groups=management.cattle.io,resources=managedcharts,verbs=list

// waitBundles waits a while for Fleet's bundles to be ready and reports
// the ones that are not (cluster.WaitBundles): they do not hold up the
// node's upgrade.
func (j *Job) waitBundles(ctx context.Context, _ *state) error {
	return cluster.WaitBundles(ctx, j.Client, j.Timeouts.Bundles, j.Timeouts.Interval)
}

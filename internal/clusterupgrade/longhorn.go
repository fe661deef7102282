package clusterupgrade

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
)

// LonghornImages returns the images of Longhorn's manager and instance
// manager in the harvester chart's computed values: longhorn.image.longhorn
// .<component>.{repository,tag}, prefixed with longhorn.global.imageRegistry
// or else the component's registry when set. ok is false when the values
// do not name them.
func LonghornImages(values map[string]any) (manager, instanceManager string, ok bool) {
	lh, _ := values["longhorn"].(map[string]any)
	global, _ := lh["global"].(map[string]any)
	globalRegistry, _ := global["imageRegistry"].(string)
	images, _ := lh["image"].(map[string]any)
	longhorn, _ := images["longhorn"].(map[string]any)
	image := func(component string) string {
		c, _ := longhorn[component].(map[string]any)
		repo, _ := c["repository"].(string)
		tag, _ := c["tag"].(string)
		if repo == "" || tag == "" {
			return ""
		}
		registry := globalRegistry
		if registry == "" {
			registry, _ = c["registry"].(string)
		}
		if registry != "" {
			return strings.TrimSuffix(registry, "/") + "/" + repo + ":" + tag
		}
		return repo + ":" + tag
	}
	manager, instanceManager = image("manager"), image("instanceManager")
	return manager, instanceManager, manager != "" && instanceManager != ""
}

// InstanceManagerImageLabel is the value Longhorn gives the
// longhorn.io/instance-manager-image label of the instance managers of an
// image: "imi-" and the first 8 hex digits of the SHA-512 of the image's
// name with every ':' and '/' made '-'.
func InstanceManagerImageLabel(image string) string {
	canonical := strings.NewReplacer(":", "-", "/", "-").Replace(strings.TrimSpace(image))
	sum := sha512.Sum512([]byte(canonical))
	return cluster.LonghornInstanceManagerImagePref + hex.EncodeToString(sum[:])[:8]
}

// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=secrets,verbs=list
// +kubebuilder:rbac:groups=longhorn.io,resources=nodes;instancemanagers,verbs=list
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list

// waitLonghorn waits until Longhorn runs the release's version, which the
// harvester chart brought: its manager DaemonSet runs the image of the
// chart's values and has stayed ready on every managed non-witness node for
// Timeouts.LonghornStable (a manager that crashes after it starts is ready
// for moments between its restarts), and, with
// two nodes or more, every Longhorn node has one running instance manager
// of the new image (for the v2 data engine too when Harvester enables it).
func (u *Upgrade) waitLonghorn(ctx context.Context, _ *run) error {
	rel, err := cluster.LatestHelmRelease(ctx, u.Client, cluster.HarvesterNamespace, cluster.HarvesterRelease)
	if err != nil {
		return err
	}
	if rel == nil {
		return fmt.Errorf("the Helm release %s/%s of the harvester chart does not exist: Fleet has not deployed Harvester", cluster.HarvesterNamespace, cluster.HarvesterRelease)
	}
	manager, instanceManager, ok := LonghornImages(rel.Values())
	if !ok {
		return fmt.Errorf("the values of Helm release %s/%s (%s) do not name Longhorn's images (longhorn.image.longhorn.manager and .instanceManager)",
			cluster.HarvesterNamespace, cluster.HarvesterRelease, rel.ChartRef())
	}
	nodes, err := u.workloadNodes(ctx)
	if err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornManagerDaemonSet}
	settled := settling{need: u.Timeouts.LonghornStable}
	w := u.wait(fmt.Sprintf("Longhorn's manager DaemonSet %s to run %s on %d nodes and stay ready", key, manager, nodes), u.Timeouts.Longhorn,
		fmt.Sprintf("check its pods (kubectl -n %s describe daemonset %s)", key.Namespace, key.Name))
	if err := w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		ds := &appsv1.DaemonSet{}
		if err := u.Client.Get(ctx, key, ds); err != nil {
			settled.reset()
			return false, "", err
		}
		ok, status := settled.held(LonghornManagerReady(ds, manager, nodes))
		return ok, status, nil
	}); err != nil {
		return err
	}
	if nodes < 2 {
		return nil
	}
	engines := []string{cluster.LonghornDataEngineV1}
	v2 := &harvesterv1beta1.Setting{}
	if err := u.Client.Get(ctx, client.ObjectKey{Name: cluster.LonghornV2DataEngineSetting}, v2); err == nil && v2.Value == "true" {
		engines = append(engines, cluster.LonghornDataEngineV2)
	}
	label := InstanceManagerImageLabel(instanceManager)
	w = u.wait(fmt.Sprintf("every Longhorn node to run an instance manager of %s (%s %s)", instanceManager, cluster.LabelInstanceManagerImage, label), u.Timeouts.Longhorn,
		fmt.Sprintf("check the instance managers (kubectl -n %s get instancemanagers.longhorn.io)", cluster.LonghornNamespace))
	return w.Until(ctx, func(ctx context.Context) (bool, string, error) {
		missing, err := u.missingInstanceManagers(ctx, label, engines)
		return len(missing) == 0 && err == nil, strings.Join(missing, ", "), err
	})
}

// LonghornManagerReady judges the longhorn-manager DaemonSet: it runs image
// and its pods of that spec are ready on nodes nodes. (Harvester's script
// counts ready pods only, which the old pods are while the new spec rolls
// out: the DaemonSet controller must also have seen the spec and updated
// the pods.)
func LonghornManagerReady(ds *appsv1.DaemonSet, image string, nodes int) (bool, string) {
	running := ""
	if cs := ds.Spec.Template.Spec.Containers; len(cs) > 0 {
		running = cs[0].Image
	}
	st := ds.Status
	status := fmt.Sprintf("image %s, %d of %d nodes updated, %d ready", running, st.UpdatedNumberScheduled, nodes, st.NumberReady)
	if st.ObservedGeneration < ds.Generation {
		return false, status + "; the DaemonSet controller has not seen the latest spec yet"
	}
	return running == image && int(st.UpdatedNumberScheduled) >= nodes && int(st.NumberReady) >= nodes, status
}

// workloadNodes counts the managed nodes that are not witness nodes.
func (u *Upgrade) workloadNodes(ctx context.Context) (int, error) {
	var nodes corev1.NodeList
	if err := u.Client.List(ctx, &nodes, client.MatchingLabels{cluster.LabelManagedNode: "true"}); err != nil {
		return 0, fmt.Errorf("listing the managed nodes: %w", err)
	}
	n := 0
	for i := range nodes.Items {
		if !cluster.IsWitness(&nodes.Items[i]) {
			n++
		}
	}
	return n, nil
}

// missingInstanceManagers names each Longhorn node and data engine without
// exactly one running aio instance manager of the image.
func (u *Upgrade) missingInstanceManagers(ctx context.Context, imageLabel string, engines []string) ([]string, error) {
	var lhNodes longhornv1beta2.NodeList
	if err := u.Client.List(ctx, &lhNodes, client.InNamespace(cluster.LonghornNamespace)); err != nil {
		return nil, fmt.Errorf("listing Longhorn's nodes: %w", err)
	}
	var missing []string
	for _, n := range lhNodes.Items {
		for _, engine := range engines {
			var ims longhornv1beta2.InstanceManagerList
			if err := u.Client.List(ctx, &ims, client.InNamespace(cluster.LonghornNamespace), client.MatchingLabels{
				cluster.LabelLonghornNode: n.Name, cluster.LabelInstanceManagerType: cluster.InstanceManagerTypeAIO,
				cluster.LabelInstanceManagerDataEngine: engine, cluster.LabelInstanceManagerImage: imageLabel,
			}); err != nil {
				return nil, fmt.Errorf("listing the instance managers of node %s: %w", n.Name, err)
			}
			switch {
			case len(ims.Items) != 1:
				missing = append(missing, fmt.Sprintf("%s (%s): %d instance managers", n.Name, engine, len(ims.Items)))
			case ims.Items[0].Status.CurrentState != cluster.InstanceManagerStateRunning:
				missing = append(missing, fmt.Sprintf("%s (%s): %s", n.Name, engine, orNone(ims.Items[0].Status.CurrentState)))
			}
		}
	}
	sort.Strings(missing)
	return missing, nil
}

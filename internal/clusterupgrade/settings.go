package clusterupgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/helmv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// The small steps: one setting, label or annotation each.

// mergePatch merge-patches obj (whose namespace and name are set) with
// body, on the object or on its status subresource.
func (u *Upgrade) mergePatch(ctx context.Context, obj client.Object, body map[string]any, status bool) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	patch := client.RawPatch(types.MergePatchType, raw)
	if status {
		err = u.Client.Status().Patch(ctx, obj, patch)
	} else {
		err = u.Client.Patch(ctx, obj, patch)
	}
	if err != nil {
		return fmt.Errorf("patching %s %s with %s: %w", u.kindName(obj), client.ObjectKeyFromObject(obj), raw, err)
	}
	return nil
}

// annotate sets one annotation unless it has that value.
func (u *Upgrade) annotate(ctx context.Context, obj client.Object, key, value string) error {
	if err := u.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return fmt.Errorf("reading %s %s: %w", u.kindName(obj), client.ObjectKeyFromObject(obj), err)
	}
	if obj.GetAnnotations()[key] == value {
		return nil
	}
	return u.mergePatch(ctx, obj, map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}}, false)
}

// kindName is obj's kind, for messages.
func (u *Upgrade) kindName(obj client.Object) string {
	if gvk, err := apiutil.GVKForObject(obj, u.Client.Scheme()); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", obj)
}

// +kubebuilder:rbac:groups=helm.cattle.io,resources=helmchartconfigs,verbs=get;create;patch

// multusFailurePolicy makes RKE2 abort, not reinstall, a failed upgrade of
// its multus chart: a reinstall deletes the NetworkAttachmentDefinition CRD
// and with it every VM network.
func (u *Upgrade) multusFailurePolicy(ctx context.Context, _ *run) error {
	hcc := &helmv1.HelmChartConfig{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.KubeSystemNamespace, Name: cluster.RKE2MultusChartConfig}}
	err := u.Client.Get(ctx, client.ObjectKeyFromObject(hcc), hcc)
	switch {
	case apierrors.IsNotFound(err):
		hcc.Spec.FailurePolicy = cluster.HelmFailurePolicyAbort
		return client.IgnoreAlreadyExists(u.Client.Create(ctx, hcc))
	case err != nil:
		return fmt.Errorf("reading HelmChartConfig %s: %w", client.ObjectKeyFromObject(hcc), err)
	case hcc.Spec.FailurePolicy == cluster.HelmFailurePolicyAbort:
		return nil
	}
	return u.mergePatch(ctx, hcc, map[string]any{"spec": map[string]any{"failurePolicy": cluster.HelmFailurePolicyAbort}}, false)
}

// traefikValues are the values Harvester gives RKE2's Traefik: access logs,
// a LoadBalancer Service and half-hour timeouts for long uploads.
func traefikValues() string {
	v := map[string]any{
		"logs":    map[string]any{"access": map[string]any{"enabled": "true"}},
		"service": map[string]any{"spec": map[string]any{"type": "LoadBalancer"}},
		"additionalArguments": []string{
			"--entryPoints.websecure.transport.respondingTimeouts.readTimeout=30m",
			"--entryPoints.websecure.transport.respondingTimeouts.writeTimeout=30m",
		},
	}
	out, _ := yaml.Marshal(v)
	return string(out)
}

// traefikConfig gives RKE2's Traefik chart Harvester's values, unless the
// cluster has a configuration for it already (which is then the operator's
// or a newer Harvester's).
func (u *Upgrade) traefikConfig(ctx context.Context, _ *run) error {
	hcc := &helmv1.HelmChartConfig{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.KubeSystemNamespace, Name: cluster.RKE2TraefikChartConfig}}
	err := u.Client.Get(ctx, client.ObjectKeyFromObject(hcc), hcc)
	if err == nil {
		log.FromContext(ctx).Info("RKE2's Traefik has a configuration already; it is kept", "helmChartConfig", client.ObjectKeyFromObject(hcc).String())
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading HelmChartConfig %s: %w", client.ObjectKeyFromObject(hcc), err)
	}
	hcc.Spec.ValuesContent = traefikValues()
	return client.IgnoreAlreadyExists(u.Client.Create(ctx, hcc))
}

// +kubebuilder:rbac:groups=harvesterhci.io,resources=settings,verbs=get;patch

// preserveOvercommit pins the overcommit-config a cluster runs with when
// nobody set it: its value is empty, so the default applies, and the new
// release's default is lower.
func (u *Upgrade) preserveOvercommit(ctx context.Context, _ *run) error {
	s := &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.OvercommitConfigSetting}}
	if err := u.Client.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("Harvester has no overcommit-config setting: nothing to keep")
			return nil
		}
		return fmt.Errorf("reading Harvester's setting %s: %w", s.Name, err)
	}
	if s.Value != "" || s.Default == "" {
		return nil
	}
	return u.mergePatch(ctx, s, map[string]any{"value": s.Default}, false)
}

// +kubebuilder:rbac:groups=management.cattle.io,resources=clusters,verbs=get;patch

// disableVersionManagement turns off Rancher's management of the local
// cluster's Kubernetes version, as the public toolkit's upgrade does.
func (u *Upgrade) disableVersionManagement(ctx context.Context, _ *run) error {
	return u.annotate(ctx, &managementv3.Cluster{ObjectMeta: metav1.ObjectMeta{Name: cluster.LocalClusterName}},
		cluster.AnnotationImportedVersionManagement, "false")
}

// provisioningAdministrated marks the local cluster as administrated by
// Rancher's provisioning, which Rancher v2.15's system-agent-upgrader needs.
func (u *Upgrade) provisioningAdministrated(ctx context.Context, _ *run) error {
	return u.annotate(ctx, &managementv3.Cluster{ObjectMeta: metav1.ObjectMeta{Name: cluster.LocalClusterName}},
		cluster.AnnotationProvisioningAdministrated, "true")
}

// +kubebuilder:rbac:groups=management.cattle.io,resources=settings,verbs=get;create;patch;delete

// tlsInternalCNAllowedServices tells Rancher which services serve its
// internal certificate.
func (u *Upgrade) tlsInternalCNAllowedServices(ctx context.Context, _ *run) error {
	s := &managementv3.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.TLSInternalCNAllowedServicesSetting}}
	err := u.Client.Get(ctx, client.ObjectKeyFromObject(s), s)
	switch {
	case apierrors.IsNotFound(err):
		s.Value = cluster.TLSInternalCNAllowedServices
		return client.IgnoreAlreadyExists(u.Client.Create(ctx, s))
	case err != nil:
		return fmt.Errorf("reading Rancher's setting %s: %w", s.Name, err)
	case s.Value == cluster.TLSInternalCNAllowedServices:
		return nil
	}
	return u.mergePatch(ctx, s, map[string]any{"value": cluster.TLSInternalCNAllowedServices}, false)
}

// +kubebuilder:rbac:groups=provisioning.cattle.io,resources=clusters,verbs=get;patch
// +kubebuilder:rbac:groups=provisioning.cattle.io,resources=clusters/status,verbs=patch

// patchLocalCluster gives the provisioning Cluster the details Rancher
// v2.8.1 expects and a fresh installation gets from rancherd: its
// management cluster's name and its Fleet workspace.
func (u *Upgrade) patchLocalCluster(ctx context.Context, _ *run) error {
	cl, err := cluster.LocalCluster(ctx, u.Client)
	if err != nil {
		return err
	}
	if cl.Labels[cluster.LabelManagementClusterName] != cluster.LocalClusterName {
		body := map[string]any{"metadata": map[string]any{"labels": map[string]string{cluster.LabelManagementClusterName: cluster.LocalClusterName}}}
		if err := u.mergePatch(ctx, cl, body, false); err != nil {
			return err
		}
	}
	if cl.Status.FleetWorkspaceName == cluster.FleetLocalNamespace {
		return nil
	}
	return u.mergePatch(ctx, cl, map[string]any{"status": map[string]any{"fleetWorkspaceName": cluster.FleetLocalNamespace}}, true)
}

// +kubebuilder:rbac:groups="",namespace=fleet-local,resources=secrets,verbs=get

// checkLocalRKEState refuses a local-rke-state Secret of the type Rancher
// used before v2.7: Harvester's upgrade to v1.2 converted it, so a cluster
// that still has one took a path the toolkit does not support, and
// recreating the Secret that holds the cluster's RKE state is not a thing
// to do from a Job that may be killed between the delete and the create.
func (u *Upgrade) checkLocalRKEState(ctx context.Context, _ *run) error {
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalRKEStateSecret}
	if err := u.Client.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("the local cluster has no RKE state Secret: nothing to check", "secret", key.String())
			return nil
		}
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if s.Type == corev1.SecretTypeOpaque {
		return fmt.Errorf("the Secret %s is of type %s, which Rancher v2.7 and newer cannot use (they need %s): Harvester's upgrade to v1.2 converts it, and this cluster never went through it; "+
			"convert it as Harvester's upgrade_manifests.sh update_local_rke_state_secret does (scale Rancher to 0, recreate the Secret with the new type, scale Rancher back), then run the upgrade again",
			key, s.Type, cluster.LocalRKEStateSecretType)
	}
	return nil
}

// syncContainerdRegistry has Harvester copy its containerd-registry setting
// into Rancher's registries of the local cluster, unless Rancher has
// registries already: Harvester syncs the setting when it sees the
// annotation change.
func (u *Upgrade) syncContainerdRegistry(ctx context.Context, r *run) error {
	cl, err := cluster.LocalCluster(ctx, u.Client)
	if err != nil {
		return err
	}
	if HasRegistries(cl) {
		log.FromContext(ctx).Info("Rancher has the registries of the local cluster already")
		return nil
	}
	s := &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ContainerdRegistrySetting}}
	if err := u.annotate(ctx, s, cluster.AnnotationUpgradePatched, r.rel.Harvester); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("Harvester has no containerd-registry setting: nothing to sync")
			return nil
		}
		return err
	}
	return nil
}

// HasRegistries reports whether the cluster's RKE configuration has any
// registries configuration.
func HasRegistries(cl *provisioningv1.Cluster) bool {
	if cl.Spec.RKEConfig == nil || cl.Spec.RKEConfig.Registries == nil {
		return false
	}
	var m map[string]any
	return json.Unmarshal(cl.Spec.RKEConfig.Registries.Raw, &m) == nil && len(m) > 0
}

// +kubebuilder:rbac:groups=networking.k8s.io,namespace=cattle-system,resources=ingresses,verbs=get;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingressclasses,verbs=list

// ensureIngressClass gives Rancher's rancher-expose Ingress an ingress class
// when it has none: newer ingress controllers ignore an Ingress without one.
func (u *Upgrade) ensureIngressClass(ctx context.Context, _ *run) error {
	ing := &networkingv1.Ingress{}
	key := client.ObjectKey{Namespace: cluster.CattleNamespace, Name: cluster.RancherExposeIngress}
	if err := u.Client.Get(ctx, key, ing); err != nil {
		if apierrors.IsNotFound(err) {
			log.FromContext(ctx).Info("Rancher has no rancher-expose Ingress: nothing to do", "ingress", key.String())
			return nil
		}
		return fmt.Errorf("reading Ingress %s: %w", key, err)
	}
	if ing.Spec.IngressClassName != nil && *ing.Spec.IngressClassName != "" {
		return nil
	}
	var classes networkingv1.IngressClassList
	if err := u.Client.List(ctx, &classes); err != nil {
		return fmt.Errorf("listing the IngressClasses: %w", err)
	}
	return u.mergePatch(ctx, ing, map[string]any{"spec": map[string]any{"ingressClassName": DefaultIngressClass(classes.Items)}}, false)
}

// DefaultIngressClass is the oldest IngressClass marked as the default (any
// value of the annotation counts, as for Harvester's upgrade), else RKE2's
// nginx.
func DefaultIngressClass(classes []networkingv1.IngressClass) string {
	var marked []networkingv1.IngressClass
	for _, c := range classes {
		if _, ok := c.Annotations[cluster.AnnotationDefaultIngressClass]; ok {
			marked = append(marked, c)
		}
	}
	if len(marked) == 0 {
		return cluster.DefaultIngressClassName
	}
	sort.SliceStable(marked, func(i, j int) bool {
		a, b := marked[i].CreationTimestamp, marked[j].CreationTimestamp
		if a.Equal(&b) {
			return marked[i].Name < marked[j].Name
		}
		return a.Before(&b)
	})
	return marked[0].Name
}

package phase

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/upgradelog"
)

// createdKinds are the kinds of the objects a plan creates, with the
// namespaces they live in. The restore-vm ConfigMap is not labelled with the
// plan, only owned by it: it is the record of the VMs the upgrade shut down,
// kept as long as the plan.
var createdKinds = []struct {
	list      client.ObjectList
	obj       client.Object
	namespace string
}{
	{&harvesterv1beta1.VirtualMachineImageList{}, &harvesterv1beta1.VirtualMachineImage{}, cluster.HarvesterNamespace},
	{&appsv1.DeploymentList{}, &appsv1.Deployment{}, cluster.HarvesterNamespace},
	{&corev1.ServiceList{}, &corev1.Service{}, cluster.HarvesterNamespace},
	{&corev1.ConfigMapList{}, &corev1.ConfigMap{}, cluster.HarvesterNamespace},
	{&batchv1.JobList{}, &batchv1.Job{}, cluster.HarvesterNamespace},
	// A SUC Plan before its Jobs: system-upgrade-controller makes again
	// the Jobs of a Plan that still exists (a plan aborted or failed while
	// its images were preloaded).
	{&upgradev1.PlanList{}, &upgradev1.Plan{}, cluster.CattleNamespace},
	{&batchv1.JobList{}, &batchv1.Job{}, cluster.CattleNamespace},
}

// Cleanup deletes the plan's objects by label, a collection at a time.
//
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=services;configmaps,verbs=deletecollection
// +kubebuilder:rbac:groups=apps,namespace=harvester-system,resources=deployments,verbs=deletecollection
// +kubebuilder:rbac:groups=batch,namespace=harvester-system,resources=jobs,verbs=deletecollection
// +kubebuilder:rbac:groups=harvesterhci.io,namespace=harvester-system,resources=virtualmachineimages,verbs=deletecollection
// +kubebuilder:rbac:groups=batch,namespace=cattle-system,resources=jobs,verbs=deletecollection
// +kubebuilder:rbac:groups=upgrade.cattle.io,namespace=cattle-system,resources=plans,verbs=deletecollection

// Cleanup undoes what a finished or deleted plan created and changed: it
// deletes every object carrying the plan's label, unmarks the nodes, and
// puts back each setting it recorded, clearing the record once the API
// server holds the original value again, so that each is restored exactly
// once. It is done when nothing is left.
func Cleanup(ctx context.Context, s *Scope) (Result, error) {
	r, err := cleanup(ctx, s)
	switch {
	case err != nil:
		return Result{}, err
	case len(r.unsettled) > 0:
		return Wait("cleaning up: %s", strings.Join(r.unsettled, "; ")).After(restoreRetry), nil
	case len(r.left) > 0:
		w := Wait("cleaning up: waiting for %s to be deleted", list(r.left))
		if r.unwatched {
			// No event comes when they go.
			w = w.After(unwatchedPoll)
		}
		return w, nil
	}
	return Done(), nil
}

// restoreRetry is how soon a setting whose restore did not hold is written
// again.
const restoreRetry = 5 * time.Second

// unwatchedPoll is how often a cleanup that waits for pods outside the
// cache (those the log capture let go) asks the API server about them.
const unwatchedPoll = 5 * time.Second

// cleanupReport is what one cleanup pass did and what is left.
type cleanupReport struct {
	// left names the plan's objects still being deleted.
	left []string
	// unwatched: some of left are outside the cache.
	unwatched bool
	// restored says which settings this pass put back, as read back from
	// the API server.
	restored []string
	// unsettled says which settings were written back, but the API server
	// shows another value (something changed them again).
	unsettled []string
}

func cleanup(ctx context.Context, s *Scope) (cleanupReport, error) {
	var r cleanupReport
	sel := client.MatchingLabels{v1beta1.LabelUpgradePlan: s.Plan.Name}
	for _, k := range createdKinds {
		// Only the names are read: the cache's objects, not copies (at the
		// end of a large upgrade, thousands of Jobs on every pass).
		if err := s.Client.List(ctx, k.list, client.InNamespace(k.namespace), sel, client.UnsafeDisableDeepCopy); err != nil {
			if meta.IsNoMatchError(err) {
				continue
			}
			return r, err
		}
		items, err := meta.ExtractList(k.list)
		if err != nil {
			return r, err
		}
		if len(items) == 0 {
			continue
		}
		for _, o := range items {
			mo := o.(client.Object)
			r.left = append(r.left, fmt.Sprintf("%T %s/%s", mo, mo.GetNamespace(), mo.GetName()))
		}
		if err := deleteCollection(ctx, s, k.obj, k.namespace, sel); err != nil && !meta.IsNoMatchError(err) {
			return r, fmt.Errorf("deleting the plan's %T objects in %s: %w", k.obj, k.namespace, err)
		}
	}
	pods, err := podsLeft(ctx, s, sel)
	if err != nil {
		return r, err
	}
	r.left = append(r.left, pods...)
	if len(r.left) == 0 {
		// Last, when nothing in the cache is left: the Jobs are gone, and
		// the garbage collector deletes their pods.
		if r.left, err = podsLetGo(ctx, s, sel); err != nil {
			return r, err
		}
		r.unwatched = len(r.left) > 0
	}
	if err := unmarkNodes(ctx, s); err != nil {
		return r, err
	}
	r.restored, r.unsettled, err = restoreSettings(ctx, s)
	return r, err
}

// deleteCollection deletes the plan's objects of a kind in a namespace. The
// API server answers with every object it deleted, megabytes of Jobs at the
// end of a large upgrade (7.3 MiB for 2,500 Jobs at 500 nodes, when the
// manager's memory peaks): that answer is read and dropped as it arrives,
// not held whole.
func deleteCollection(ctx context.Context, s *Scope, obj client.Object, namespace string, sel client.MatchingLabels) error {
	if _, isJob := obj.(*batchv1.Job); !isJob {
		return s.Client.DeleteAllOf(ctx, obj, client.InNamespace(namespace), sel, client.PropagationPolicy(metav1.DeletePropagationBackground))
	}
	answer, err := s.Kube.BatchV1().RESTClient().Delete().Namespace(namespace).Resource("jobs").
		VersionedParams(&metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set(sel)).String()}, scheme.ParameterCodec).
		Body(&metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}).
		Stream(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = answer.Close() }()
	_, err = io.Copy(io.Discard, answer)
	return err
}

// The cleanup waits for the plan's pods, and lets go of those a log capture
// held when it no longer runs.
//
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=pods,verbs=watch;patch

// podsLeft names the plan's pods a cleanup waits for. They go with their
// Jobs and the repo's Deployment (the garbage collector deletes them): a
// pod not yet deleted is waited for, and so is a deleted one the log
// capture still holds, so that a plan ends with each log kept and none of
// its pods left. A deleted pod waiting only for its kubelet is not: on a
// node that is down it would wait for ever. With the capture off nothing
// else would let a held pod go (a manager restarted without it): the
// cleanup releases it.
func podsLeft(ctx context.Context, s *Scope, sel client.MatchingLabels) ([]string, error) {
	var left []string
	for _, ns := range podNamespaces(s) {
		var pods corev1.PodList
		// The cache's own pods, read only; a copy is made to write.
		if err := s.Client.List(ctx, &pods, client.InNamespace(ns), sel, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing the plan's pods in %s: %w", ns, err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			held := controllerutil.ContainsFinalizer(p, v1beta1.FinalizerLogCapture)
			if held && !s.Config.UpgradeLog {
				if err := upgradelog.Release(ctx, s.Client, p.DeepCopy()); err != nil {
					return nil, fmt.Errorf("releasing pod %s/%s: %w", p.Namespace, p.Name, err)
				}
				held = false
			}
			switch {
			case held:
				left = append(left, fmt.Sprintf("pod %s/%s (its log is being kept)", p.Namespace, p.Name))
			case p.DeletionTimestamp == nil:
				left = append(left, fmt.Sprintf("pod %s/%s", p.Namespace, p.Name))
			}
		}
	}
	return left, nil
}

// podsLetGo names the plan's pods the log capture let go that are not being
// deleted yet. The cache does not hold them (v1beta1.LabelLogCaptureDone):
// the API server is asked, for their metadata, a page at a time, so that
// thousands of finished pods at the end of a large upgrade are never held at
// once.
func podsLetGo(ctx context.Context, s *Scope, sel client.MatchingLabels) ([]string, error) {
	done := client.HasLabels{v1beta1.LabelLogCaptureDone}
	var left []string
	for _, ns := range podNamespaces(s) {
		page := &metav1.PartialObjectMetadataList{}
		page.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		for {
			if err := s.APIReader.List(ctx, page, client.InNamespace(ns), sel, done, client.Limit(podPage), client.Continue(page.Continue)); err != nil {
				return nil, fmt.Errorf("listing the plan's pods in %s whose logs are kept: %w", ns, err)
			}
			for i := range page.Items {
				if p := &page.Items[i]; p.DeletionTimestamp == nil {
					left = append(left, fmt.Sprintf("pod %s/%s", p.Namespace, p.Name))
				}
			}
			if page.Continue == "" {
				break
			}
		}
	}
	return left, nil
}

// podNamespaces are where the plan's pods are cached: system-upgrade-
// controller's only for the log capture.
func podNamespaces(s *Scope) []string {
	if s.Config.UpgradeLog {
		return upgradelog.Namespaces
	}
	return []string{cluster.HarvesterNamespace}
}

// podPage is how many pods' metadata podsLetGo reads at a time.
const podPage = 500

// unmarkNodes removes the plan's marks from the nodes: the pending OS image
// annotation and the KubeVirt drain taint the pre-drain work puts on.
func unmarkNodes(ctx context.Context, s *Scope) error {
	var nodes corev1.NodeList
	// The cache's own nodes, read only: most carry no mark, and a copy is
	// made of those that do.
	if err := s.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for i := range nodes.Items {
		before := &nodes.Items[i]
		_, annotated := before.Annotations[v1beta1.AnnotationPendingOSImage]
		taints := without(before.Spec.Taints, cluster.TaintKubeVirtDrain, cluster.KubeVirtDrainTaintValue)
		if !annotated && len(taints) == len(before.Spec.Taints) {
			continue
		}
		n := before.DeepCopy()
		delete(n.Annotations, v1beta1.AnnotationPendingOSImage)
		n.Spec.Taints = taints
		if err := s.Client.Patch(ctx, n, client.MergeFrom(before)); err != nil {
			return fmt.Errorf("unmarking node %s: %w", n.Name, client.IgnoreNotFound(err))
		}
	}
	return nil
}

func without(taints []corev1.Taint, key, value string) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range taints {
		if t.Key != key || t.Value != value {
			out = append(out, t)
		}
	}
	return out
}

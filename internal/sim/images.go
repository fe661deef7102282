package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// The world's container images. Each node's containerd holds the images of
// the release the cluster runs (that release's image_list_all.txt, as the
// release ISO's images-lists-archive keeps it) and the operator's own
// (Config.NodeImages); a node job's image import adds an archive's images
// (the release's bundle lists say which) and its image removal takes one
// away. The cluster is air-gapped: the only registries the nodes reach are
// those of Config.RegistryImages, directly or through the mirrors of
// Harvester's containerd-registry setting. As a kubelet does, the world
// starts a pod's containers only once their images are on its node, pulling
// what a reachable registry holds; a pod whose image is neither waits with
// ErrImagePull, then ImagePullBackOff, and is tried again now and then.

// nodeImages is what each node's containerd holds.
type nodeImages struct {
	mu   sync.Mutex
	have map[string]map[string]bool
	// archives are the images each archive of the release adds when a node
	// job imports it, by the archive's file name (as the jobs name it).
	archives map[string][]string
}

// newNodeImages fills every node with the running release's images, read
// from the release tree, and the operator's own.
func newNodeImages(tree fs.FS, running string, nodes, extra []string) (*nodeImages, error) {
	n := &nodeImages{have: map[string]map[string]bool{}, archives: map[string][]string{}}
	var base []string
	switch data, err := fs.ReadFile(tree, release.ImageListPath(running)); {
	case err == nil:
		if base, err = release.ParseImageList(data); err != nil {
			return nil, fmt.Errorf("sim: the release tree's image list of %s: %w", running, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("sim: reading the image list of %s: %w", running, err)
	}
	for _, ref := range extra {
		base = append(base, images.Normalize(ref))
	}
	for _, node := range nodes {
		n.have[node] = map[string]bool{}
		for _, ref := range base {
			n.have[node][ref] = true
		}
	}
	if data, err := fs.ReadFile(tree, release.BundleMetadataFile); err == nil {
		if bundle, err := release.ParseBundleMetadata(data); err == nil {
			for _, a := range slices.Concat(bundle.Images.Common, bundle.Images.RKE2, bundle.Images.Agent) {
				data, err := fs.ReadFile(tree, a.ListPath())
				if err != nil {
					continue
				}
				list, err := release.ParseImageList(data)
				if err != nil {
					continue
				}
				n.archives[path.Base(a.Archive)] = list
			}
		}
	}
	return n, nil
}

// has reports whether a node's containerd holds an image.
func (n *nodeImages) has(node, ref string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.have[node][images.Normalize(ref)]
}

// add puts an image on a node (a pull).
func (n *nodeImages) add(node, ref string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.have[node] == nil {
		n.have[node] = map[string]bool{}
	}
	n.have[node][images.Normalize(ref)] = true
}

// list returns a node's images, sorted.
func (n *nodeImages) list(node string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.have[node]))
	for ref := range n.have[node] {
		out = append(out, ref)
	}
	slices.Sort(out)
	return out
}

// observe plays on a node what a node job did to its containerd, as the
// job's fake host records it: "import-images <archive>" or "remove-image
// <ref>".
func (n *nodeImages) observe(node, op string) {
	verb, arg, _ := strings.Cut(op, " ")
	n.mu.Lock()
	defer n.mu.Unlock()
	switch verb {
	case "import-images":
		for _, ref := range n.archives[arg] {
			n.have[node][ref] = true
		}
	case "remove-image":
		delete(n.have[node], images.Normalize(arg))
	}
}

// Images returns the images a node's containerd holds, sorted.
func (s *Sim) Images(node string) []string { return s.images.list(node) }

// available reports whether a node can run an image: its containerd holds
// it, or a registry the node reaches holds it (then the node pulls it).
// When not, why says what the kubelet would: containerd's error in an
// air-gapped cluster.
func (s *Sim) available(ctx context.Context, node, ref string) (ok bool, why string) {
	if s.images.has(node, ref) {
		return true, ""
	}
	norm := images.Normalize(ref)
	named, err := reference.ParseNormalizedNamed(norm)
	if err != nil {
		return false, fmt.Sprintf("Failed to apply default image tag %q: couldn't parse image name %q: %v", ref, ref, err)
	}
	domain, rest := reference.Domain(named), strings.TrimPrefix(norm, reference.Domain(named)+"/")
	hosts := []string{domain}
	hosts = append(hosts, s.registries(ctx).MirrorHosts(domain)...)
	for _, h := range hosts {
		if slices.Contains(s.cfg.RegistryImages, h+"/"+rest) {
			s.images.add(node, norm)
			return true, ""
		}
	}
	host := domain
	if host == "docker.io" {
		host = "registry-1.docker.io"
	}
	repo, tag := images.Split(norm)
	return false, fmt.Sprintf(`failed to pull and unpack image %q: failed to resolve reference %q: failed to do request: Head "https://%s/v2/%s/manifests/%s": dial tcp: lookup %s: no such host`,
		norm, norm, host, strings.TrimPrefix(repo, domain+"/"), tag, host)
}

// registries is Harvester's containerd-registry setting, as the nodes
// have it.
func (s *Sim) registries(ctx context.Context) images.Registries {
	setting := &harvesterv1beta1.Setting{}
	if err := s.c.Get(ctx, client.ObjectKey{Name: cluster.ContainerdRegistrySetting}, setting); err != nil {
		return images.Registries{}
	}
	value := setting.Value
	if value == "" {
		value = setting.Default
	}
	r, _ := images.ParseRegistries(value)
	return r
}

// pullRetry is how soon the world tries a failed pull again (the kubelet's
// back-off starts at 10 s).
const pullRetry = 2 * time.Second

// imagePullReasons are the kubelet's reasons of a container that waits for
// its image.
const (
	reasonErrImagePull     = "ErrImagePull"
	reasonImagePullBackOff = "ImagePullBackOff"
)

func (s *Sim) setupImagePuller(mgr ctrl.Manager) error {
	bound := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.Spec.NodeName != "" && p.Annotations[testenv.AnnotationImagesPulled] == "" && p.DeletionTimestamp == nil
	})
	return ctrl.NewControllerManagedBy(mgr).Named("sim-image-puller").
		For(&corev1.Pod{}, builder.WithPredicates(bound)).
		Complete(reconcile.Func(s.reconcilePull))
}

// reconcilePull plays the kubelet's image pull for a pod bound to a node:
// once every image is on the node, it lets the pod start (kwok starts it,
// testenv.AnnotationImagesPulled); otherwise the pod waits as the kubelet
// reports it, and the pull is tried again.
func (s *Sim) reconcilePull(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := s.c.Get(ctx, req.NamespacedName, pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || pod.Annotations[testenv.AnnotationImagesPulled] != "" {
		return reconcile.Result{}, nil
	}
	var missing []corev1.ContainerStatus
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if ok, why := s.available(ctx, pod.Spec.NodeName, c.Image); !ok {
			reason := reasonErrImagePull
			if prev := containerStatus(pod, c.Name); prev != nil && prev.State.Waiting != nil {
				reason = reasonImagePullBackOff
			}
			missing = append(missing, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: why}}})
		}
	}
	if len(missing) > 0 {
		return reconcile.Result{RequeueAfter: pullRetry}, s.patchPodStatus(ctx, pod, map[string]any{"containerStatuses": missing})
	}
	if pod.Status.ContainerStatuses != nil {
		// Pulled at last: the pod starts afresh (kwok starts a pod that has
		// no container status).
		if err := s.patchPodStatus(ctx, pod, map[string]any{"containerStatuses": nil, "initContainerStatuses": nil}); err != nil {
			return reconcile.Result{}, err
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{testenv.AnnotationImagesPulled: "true"}}})
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, client.IgnoreNotFound(s.c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)))
}

func (s *Sim) patchPodStatus(ctx context.Context, pod *corev1.Pod, status map[string]any) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(s.c.Status().Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)))
}

func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for i, cs := range pod.Status.ContainerStatuses {
		if cs.Name == name {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// RuleImageOnNode: no pod is made to run an image its node does not have
// and cannot pull (the world's kubelet reports it waiting in ErrImagePull or
// ImagePullBackOff). A pod of the upgrade that breaks it would never start
// on an air-gapped cluster.
const RuleImageOnNode = "image-on-node"

// observePodImages checks that no container of a pod waits for an image
// its node cannot get.
func (c *Checker) observePodImages(p *corev1.Pod) {
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		w := cs.State.Waiting
		if w == nil || (w.Reason != reasonErrImagePull && w.Reason != reasonImagePullBackOff) {
			continue
		}
		owner := ""
		if refs := p.OwnerReferences; len(refs) > 0 {
			owner = fmt.Sprintf(" (of %s %s)", refs[0].Kind, refs[0].Name)
		}
		c.mu.Lock()
		c.checked++
		c.report(Violation{Plan: p.Labels[v1beta1.LabelUpgradePlan], Rule: RuleImageOnNode, Message: fmt.Sprintf(
			"pod %s/%s%s on node %s runs image %s, which the node does not have and cannot pull (the kubelet: %s)",
			p.Namespace, p.Name, owner, p.Spec.NodeName, cs.Image, w.Message)})
		c.mu.Unlock()
	}
}

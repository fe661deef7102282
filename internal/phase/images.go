package phase

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// CheckImages names the pre-flight check of the workloads' images in
// status.checks: every image the upgrade runs is on the node that runs it
// when it runs, or a registry the nodes reach holds it.
const CheckImages = v1beta1.StepMetadataPopulate + "/" + string(preflight.ReasonImagesAvailable)

// checkImages judges, once the repo serves the release, where each
// workload of the upgrade gets its image (internal/images): from the
// running release's image list, the new release's archives, the mirror or
// Harvester's containerd-registry setting. It records the verdicts in
// status.checks; an image no node has and nothing pulls fails the plan
// before any workload runs on every node.
func checkImages(ctx context.Context, s *Scope, c images.Content) (Result, error) {
	f, verdicts, err := s.imageFacts(ctx)
	if err != nil {
		return Result{}, err
	}
	rel, err := images.Read(ctx, c, ptr.Deref(s.Plan.Status.PreviousVersion, ""))
	switch {
	case errors.Is(err, release.ErrMalformed):
		return FailFinal("the release ISO is not usable: %v; create a new plan with a good ISO", err), nil
	case err != nil:
		r := s.boundedWait(s.Config.Deadlines.Metadata,
			"reading the release's image lists from the repo: "+err.Error(),
			"could not read the release's image lists from the repo: "+err.Error())
		return r.After(min(r.RequeueAfter, repoPoll)), nil //nolint:nilerr // an unreachable repo is waited for
	}
	f.RunningImages, f.Archives = rel.Running, rel.Archives
	verdicts = append(preflight.Images(f, rel.Images()), verdicts...)
	result, msgs := v1beta1.CheckPassed, make([]string, 0, len(verdicts))
	for _, v := range verdicts {
		msgs = append(msgs, v.Message)
		switch {
		case v.Result == v1beta1.CheckFailed:
			result = v1beta1.CheckFailed
		case v.Result == v1beta1.CheckWarning && result == v1beta1.CheckPassed:
			result = v1beta1.CheckWarning
		}
	}
	s.setCheck(CheckImages, result, strings.Join(msgs, "; "))
	if failed := failures(verdicts); len(failed) > 0 {
		return FailFinal("pre-flight check failed: %s", strings.Join(failed, "; ")), nil
	}
	return Done(), nil
}

// +kubebuilder:rbac:groups=harvesterhci.io,resources=settings,resourceNames=containerd-registry,verbs=get

// imageFacts gathers what decides where the workloads' images come from,
// but for the release's lists: the toolkit image, whether the preload is
// skipped and Harvester's containerd-registry setting (read from the API
// server: the cache holds only the server-version setting). A setting that
// cannot be parsed is a warning, and judged as no registry configuration.
func (s *Scope) imageFacts(ctx context.Context) (images.Facts, []preflight.Verdict, error) {
	f := images.Facts{Toolkit: s.Config.Toolkit(s.Plan), PreloadSkipped: s.Plan.PreloadConcurrency() < 0}
	setting := &harvesterv1beta1.Setting{}
	err := s.APIReader.Get(ctx, client.ObjectKey{Name: cluster.ContainerdRegistrySetting}, setting)
	switch {
	case apierrors.IsNotFound(err):
		return f, nil, nil
	case err != nil:
		return f, nil, fmt.Errorf("reading Harvester's %s setting: %w", cluster.ContainerdRegistrySetting, err)
	}
	value := setting.Value
	if value == "" {
		value = setting.Default
	}
	if f.Registries, err = images.ParseRegistries(value); err != nil {
		return f, []preflight.Verdict{preflight.Warning(preflight.ReasonImagesAvailable, "%v; judged as if it configured no registry", err)}, nil
	}
	return f, nil, nil
}

// pullFailure says why a pod cannot start for want of an image (the
// kubelet's ErrImagePull, ImagePullBackOff, ErrImageNeverPull or
// InvalidImageName, with its message), naming the pod, its node and the
// image; "" when none of its containers waits for one.
func pullFailure(pod *corev1.Pod) string {
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		w := cs.State.Waiting
		if w == nil || !slices.Contains(imagePullReasons, w.Reason) {
			continue
		}
		return fmt.Sprintf("pod %s/%s on node %s cannot pull image %s (%s: %s)", pod.Namespace, pod.Name, pod.Spec.NodeName, cs.Image, w.Reason, w.Message)
	}
	return ""
}

// imagePullReasons are the kubelet's reasons of a container waiting for an
// image it cannot get.
var imagePullReasons = []string{"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"}

package phase

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/images"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/repo"
)

// RepoCreate runs the upgrade repo: a Deployment that serves the content of
// the release ISO, and its Service; it is done once the repo serves.
type RepoCreate struct{}

// Name implements Phase.
func (RepoCreate) Name() string { return v1beta1.StepRepoCreate }

// Run implements Phase.
func (RepoCreate) Run(ctx context.Context, s *Scope) (Result, error) {
	p := s.Plan
	nodes, err := s.Kept.ManagedNodes(ctx, s.Client)
	if err != nil {
		return Result{}, err
	}
	replicas := int32(0)
	for i := range nodes {
		if !cluster.IsWitness(&nodes[i]) {
			replicas++
		}
	}
	if replicas == 0 {
		return FailFinal("no managed node can run the upgrade repo: every node is a witness node"), nil
	}
	replicas = min(replicas, 2)
	checksum, err := isoChecksum(ctx, s)
	if err != nil {
		return Result{}, err
	}

	spec := repo.Spec{
		Plan:        p,
		Image:       s.Config.Toolkit(p).Image(images.BeforeImport),
		ISOPVCName:  ptr.Deref(p.Status.ISOImageID, names.ISOImage(p.Name)),
		ISOChecksum: checksum,
		Replicas:    replicas,
	}
	want := repo.Deployment(spec)
	dep := &appsv1.Deployment{}
	if err := s.ensure(ctx, want, dep, v1beta1.ComponentRepo, want.Spec, func() { dep.Spec = want.Spec }); err != nil {
		return Result{}, err
	}
	wantSvc := repo.Service(p)
	svc := &corev1.Service{}
	if err := s.ensure(ctx, wantSvc, svc, v1beta1.ComponentRepo, wantSvc.Spec, func() {
		// Only what the plan sets: the cluster IP and defaults stay.
		svc.Spec.Selector, svc.Spec.Ports = wantSvc.Spec.Selector, wantSvc.Spec.Ports
	}); err != nil {
		return Result{}, err
	}

	var pods corev1.PodList
	if err := s.Client.List(ctx, &pods, client.InNamespace(cluster.HarvesterNamespace), client.MatchingLabels(repo.Labels(p.Name))); err != nil {
		return Result{}, fmt.Errorf("listing the repo's pods: %w", err)
	}
	if msg := repoFailure(pods.Items); msg != "" {
		return Fail("the upgrade repo cannot serve the release ISO: %s", msg), nil
	}
	if dep.Status.AvailableReplicas < 1 {
		if r, stuck := s.repoCannotPull(ctx, pods.Items); stuck {
			return r, nil
		}
		return s.boundedWait(s.Config.Deadlines.Repo,
			fmt.Sprintf("waiting for the repo Deployment %s/%s: %d of %d replicas available", want.Namespace, want.Name, dep.Status.AvailableReplicas, replicas),
			fmt.Sprintf("the repo Deployment %s/%s has no available replica: check its pods (kubectl -n %s describe deployment %s)", want.Namespace, want.Name, want.Namespace, want.Name)), nil
	}
	ready, err := serviceHasReadyEndpoint(ctx, s, svc)
	if err != nil {
		return Result{}, err
	}
	if !ready {
		return s.boundedWait(s.Config.Deadlines.Repo,
			fmt.Sprintf("waiting for the repo Service %s/%s to have a ready endpoint", svc.Namespace, svc.Name),
			fmt.Sprintf("the repo Service %s/%s has no ready endpoint", svc.Namespace, svc.Name)), nil
	}
	return Done(), nil
}

// isoChecksum is the SHA-512 the ISO must have: the Version's, or the one
// the user gave their image. A failed read is an error, not an empty
// checksum, which would turn the verification off.
func isoChecksum(ctx context.Context, s *Scope) (string, error) {
	if v := s.Plan.Status.Version; v != nil {
		return v.ISOChecksum, nil
	}
	if s.Plan.Spec.Image == nil {
		return "", nil
	}
	img, err := cluster.ISOImageOf(ctx, s.Client, *s.Plan.Spec.Image)
	if err != nil {
		return "", err
	}
	return img.Spec.Checksum, nil
}

// repoFailure returns why the repo can never serve (a corrupt or truncated
// ISO), as one of its pods reported when it gave up, or "".
func repoFailure(pods []corev1.Pod) string {
	for i := range pods {
		if msg, terminal := repo.TerminalFailure(&pods[i]); terminal {
			return msg
		}
	}
	return ""
}

// repoCannotPull reports whether no repo pod can start because its node
// lacks the repo's image and cannot pull it. Without a mirror or a
// registry setting that pulls the image, no pull will ever succeed: the
// plan fails at once, saying what to do; otherwise the pull may yet work,
// and the plan waits for it until the repo's deadline.
func (s *Scope) repoCannotPull(ctx context.Context, pods []corev1.Pod) (Result, bool) {
	var stuck []string
	for i := range pods {
		if why := pullFailure(&pods[i]); why != "" {
			stuck = append(stuck, why)
		}
	}
	if len(stuck) == 0 || len(stuck) < len(pods) {
		return Result{}, false
	}
	t := s.Config.Toolkit(s.Plan)
	img := t.Source(images.BeforeImport)
	what := fmt.Sprintf("the repo cannot start: %s; the repo runs %s, the toolkit of the running release %s, which every node has when %[3]s ships it in its image list",
		strings.Join(stuck, "; "), img, ptr.Deref(s.Plan.Status.PreviousVersion, "(unknown)"))
	f, _, err := s.imageFacts(ctx)
	_, pulls := f.Registries.Pulls(img)
	if err == nil && t.Mirror.IsZero() && !pulls {
		return Fail("%s; no mirror is configured, so no node can pull it: copy it to a registry the nodes reach and set the manager's --image-mirror (chart value imageMirror), "+
			"or give Harvester's containerd-registry setting a mirror of its registry, or import it on every node (ctr -n k8s.io images import); then retry", what), true
	}
	return s.boundedWait(s.Config.Deadlines.Repo, "waiting for the repo's image to be pulled: "+what,
		what+": check that the mirror holds it (upgrade-toolkit images lists what it must hold)"), true
}

// serviceHasReadyEndpoint reports whether any EndpointSlice of the Service
// has a ready endpoint.
func serviceHasReadyEndpoint(ctx context.Context, s *Scope, svc *corev1.Service) (bool, error) {
	var slices discoveryv1.EndpointSliceList
	if err := s.Client.List(ctx, &slices, client.InNamespace(svc.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return false, fmt.Errorf("listing the EndpointSlices of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	for _, sl := range slices.Items {
		for _, e := range sl.Endpoints {
			if ptr.Deref(e.Conditions.Ready, false) {
				return true, nil
			}
		}
	}
	return false, nil
}

package phase

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
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
		Image:       s.Config.ToolkitImage(p),
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

	if msg, err := repoFailure(ctx, s); err != nil || msg != "" {
		return Fail("the upgrade repo cannot serve the release ISO: %s", msg), err
	}
	if dep.Status.AvailableReplicas < 1 {
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
func repoFailure(ctx context.Context, s *Scope) (string, error) {
	var pods corev1.PodList
	if err := s.Client.List(ctx, &pods, client.InNamespace(cluster.HarvesterNamespace), client.MatchingLabels(repo.Labels(s.Plan.Name))); err != nil {
		return "", fmt.Errorf("listing the repo's pods: %w", err)
	}
	for i := range pods.Items {
		if msg, terminal := repo.TerminalFailure(&pods.Items[i]); terminal {
			return msg, nil
		}
	}
	return "", nil
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

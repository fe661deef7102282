package phase

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// The node upgrade reads a machine-plan Secret whole (the cache holds their
// metadata only) to say how far Rancher's agent is with the node's plan.
//
// +kubebuilder:rbac:groups="",namespace=fleet-local,resources=secrets,verbs=get

// describeMachine says what Rancher reports of the machine behind a
// machine-plan Secret: one read of the Secret from the API server per
// version of it, for the node Rancher holds.
func describeMachine(ctx context.Context, s *Scope, sec client.Object) (string, error) {
	reader := s.PlanProgress
	if reader == nil {
		reader = &cluster.PlanProgressReader{Reader: s.APIReader}
	}
	progress, err := reader.Read(ctx, sec)
	if err != nil {
		return "", err
	}
	m := &capiv1beta1.Machine{}
	if found, err := s.get(ctx, cluster.FleetLocalNamespace, sec.GetLabels()[cluster.LabelMachineName], m); err != nil {
		return "", err
	} else if !found {
		m = nil
	}
	cl := &provisioningv1.Cluster{}
	if found, err := s.get(ctx, cluster.FleetLocalNamespace, cluster.LocalClusterName, cl); err != nil {
		return "", err
	} else if !found {
		cl = nil
	}
	return cluster.DescribeMachine(m, sec, &progress, cl), nil
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=list

// drainBlock says what keeps Rancher's drain of the node from evicting the
// pods its drain error names, "" without a drain error. It reads the pods
// and PodDisruptionBudgets from the API server: only while a drain fails.
func drainBlock(ctx context.Context, s *Scope, node string, sec client.Object) (string, error) {
	var blocks []string
	for _, key := range cluster.DrainErrorPods(sec.GetAnnotations()[cluster.AnnotationRancherDrainError]) {
		pod := &corev1.Pod{}
		if err := s.APIReader.Get(ctx, key, pod); apierrors.IsNotFound(err) {
			pod = nil
		} else if err != nil {
			return "", fmt.Errorf("reading pod %s, which Rancher's drain cannot evict: %w", key, err)
		}
		var pdbs policyv1.PodDisruptionBudgetList
		if err := s.APIReader.List(ctx, &pdbs, client.InNamespace(key.Namespace)); err != nil {
			return "", fmt.Errorf("listing the PodDisruptionBudgets of namespace %s: %w", key.Namespace, err)
		}
		blocks = append(blocks, cluster.DescribeDrainBlock(node, key, pod, pdbs.Items))
	}
	return strings.Join(blocks, "; "), nil
}

package repo

// WIP placeholder until the repo server's own builders land.

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

type Spec struct {
	Plan        *v1beta1.UpgradePlan
	Image       string
	ISOPVCName  string
	ISOChecksum string
	Replicas    int32
}

func labels(p *v1beta1.UpgradePlan) map[string]string {
	return map[string]string{v1beta1.LabelUpgradePlan: p.Name, v1beta1.LabelUpgradeComponent: v1beta1.ComponentRepo}
}

func Deployment(s Spec) *appsv1.Deployment {
	l := labels(s.Plan)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "harvester-system", Name: names.Repo(s.Plan.Name), Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: &s.Replicas,
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "repo", Image: s.Image,
					Command: []string{"upgrade-toolkit", "repo", "serve", "--iso", "/iso/disk.img", "--sha512", s.ISOChecksum, "--listen", ":8080"},
				}}},
			},
		},
	}
}

func Service(p *v1beta1.UpgradePlan) *corev1.Service {
	l := labels(p)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "harvester-system", Name: names.Repo(p.Name), Labels: l},
		Spec: corev1.ServiceSpec{
			Selector: l,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func Failure(context.Context, client.Reader, *v1beta1.UpgradePlan) string { return "" }

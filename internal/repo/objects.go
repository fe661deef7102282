package repo

import (
	"fmt"
	"path"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// Spec describes the repo Deployment of a plan.
type Spec struct {
	// Plan owns the Deployment and names it.
	Plan *v1beta1.UpgradePlan
	// Image is the upgrade-toolkit container image.
	Image string
	// ISOPVCName is the PVC that CDI filled with the ISO: it is named like
	// the ISO's VirtualMachineImage (status.isoImageID).
	ISOPVCName string
	// ISOChecksum is the ISO's expected SHA-512 in hex
	// (status.version.isoChecksum); empty serves the ISO unverified.
	ISOChecksum string
	// Replicas is the number of repo pods; they prefer different nodes.
	Replicas int32
}

// cdiGroup is the group CDI's importer (qemu, 107) writes disk.img as; the
// repo runs as another user and reads the image through it.
const cdiGroup = 107

// nonRootUser is the user the repo runs as: the toolkit image's user.
const nonRootUser = 1000

// Labels are the labels of the repo's objects and pods; they select the
// pods too.
func Labels(plan string) map[string]string {
	return map[string]string{
		v1beta1.LabelUpgradePlan:      plan,
		v1beta1.LabelUpgradeComponent: v1beta1.ComponentRepo,
	}
}

// command is the repo container's command line.
func command(checksum string) []string {
	cmd := []string{"upgrade-toolkit", "repo", "serve", "--iso", path.Join(ISOMountPath, ISOFileName)}
	if checksum != "" {
		cmd = append(cmd, "--sha512", checksum)
	}
	return append(cmd, "--listen", fmt.Sprintf(":%d", Port))
}

func objectMeta(plan *v1beta1.UpgradePlan) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            names.Repo(plan.Name),
		Namespace:       cluster.HarvesterNamespace,
		Labels:          Labels(plan.Name),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(plan, v1beta1.GroupVersion.WithKind("UpgradePlan"))},
	}
}

// Deployment is the repo Deployment <plan>-repo in harvester-system: the
// repo server with the ISO's PVC mounted read-only, as a non-root user with
// a read-only root file system and no capabilities.
func Deployment(s Spec) *appsv1.Deployment {
	labels := Labels(s.Plan.Name)
	httpGet := func(p string) corev1.ProbeHandler {
		return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: p, Port: intstr.FromString(PortName)}}
	}
	container := corev1.Container{
		Name:            ContainerName,
		Image:           s.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         command(s.ISOChecksum),
		Ports:           []corev1.ContainerPort{{Name: PortName, ContainerPort: Port, Protocol: corev1.ProtocolTCP}},
		VolumeMounts:    []corev1.VolumeMount{{Name: "iso", MountPath: ISOMountPath, ReadOnly: true}},
		// The server answers /healthz as soon as it listens, also while it
		// hashes the ISO, so neither the startup nor the liveness probe has
		// to wait for the hash: a slow volume never gets the pod restarted
		// mid-hash. /readyz gates traffic until the ISO is verified.
		StartupProbe:   &corev1.Probe{ProbeHandler: httpGet(HealthzPath), PeriodSeconds: 2, TimeoutSeconds: 2, FailureThreshold: 30},
		LivenessProbe:  &corev1.Probe{ProbeHandler: httpGet(HealthzPath), PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3},
		ReadinessProbe: &corev1.Probe{ProbeHandler: httpGet(ReadyzPath), PeriodSeconds: 5, TimeoutSeconds: 3, FailureThreshold: 2},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			// Memory does not grow with file sizes or clients beyond a few
			// MiB per hundred connections. No CPU limit: throttling would
			// slow every node's download.
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		// A failure message is written to the termination log; a crash
		// without one leaves the last log lines instead.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](nonRootUser),
			RunAsGroup:               ptr.To[int64](nonRootUser),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	return &appsv1.Deployment{
		ObjectMeta: objectMeta(s.Plan),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(s.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// Hashing a 6 GB ISO on a slow volume may take a while; the
			// plan, not the Deployment, decides when waiting is too long.
			ProgressDeadlineSeconds: ptr.To[int32](3600),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:                   []corev1.Container{container},
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:       ptr.To(true),
						RunAsUser:          ptr.To[int64](nonRootUser),
						RunAsGroup:         ptr.To[int64](nonRootUser),
						SupplementalGroups: []int64{cdiGroup},
						SeccompProfile:     &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Affinity: &corev1.Affinity{
						// Witness nodes run no workloads.
						NodeAffinity: &corev1.NodeAffinity{
							RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
								NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
									{Key: cluster.LabelWitnessNode, Operator: corev1.NodeSelectorOpDoesNotExist},
								}}},
							},
						},
						// Replicas on different nodes keep the repo up while
						// one node is drained.
						PodAntiAffinity: &corev1.PodAntiAffinity{
							PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
								Weight: 100,
								PodAffinityTerm: corev1.PodAffinityTerm{
									LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
									TopologyKey:   corev1.LabelHostname,
								},
							}},
						},
					},
					Volumes: []corev1.Volume{{
						Name: "iso",
						VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
							ClaimName: s.ISOPVCName,
							ReadOnly:  true,
						}},
					}},
				},
			},
		},
	}
}

// Service is the repo Service <plan>-repo in harvester-system: port 80 to
// the pods' port 8080.
func Service(plan *v1beta1.UpgradePlan) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: objectMeta(plan),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: Labels(plan.Name),
			Ports: []corev1.ServicePort{{
				Name:       PortName,
				Port:       ServicePort,
				TargetPort: intstr.FromString(PortName),
				Protocol:   corev1.ProtocolTCP,
			}},
		},
	}
}

// TerminalFailure reports whether a repo pod's container ended because the
// ISO cannot be served (it is corrupt, truncated or not an ISO), and why.
// Restarting does not help then: the RepoCreate phase should fail the plan
// with the message. Other exits (crashes, eviction) are not terminal.
func TerminalFailure(pod *corev1.Pod) (message string, terminal bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue
		}
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t == nil || (t.ExitCode != ExitCodeChecksumMismatch && t.ExitCode != ExitCodeInvalidISO) {
				continue
			}
			msg := strings.TrimSpace(t.Message)
			if msg == "" {
				msg = fmt.Sprintf("the repo container exited with code %d: the ISO cannot be served (see the logs of pod %s/%s)", t.ExitCode, pod.Namespace, pod.Name)
			}
			return msg, true
		}
	}
	return "", false
}

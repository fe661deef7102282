package repo_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/repo"
)

const checksum = "3a9d8b8c1f0e2d4c6b8a0f1e3d5c7b9a2c4e6f8a0b1d3f5e7a9c2b4d6f8e0a1c3b5d7f9e2a4c6b8d0f1e3a5c7b9d2f4e6a8c0b1d3e5f7a9c2e4b6d8f0a1c3e5"

func plan(name string) *v1beta1.UpgradePlan {
	return &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
	}
}

func spec(p *v1beta1.UpgradePlan) repo.Spec {
	return repo.Spec{Plan: p, Image: "rancher/harvester-upgrade-toolkit:v1.8.0", ISOPVCName: p.Name + "-iso", ISOChecksum: checksum, Replicas: 2}
}

func TestDeployment(t *testing.T) {
	p := plan("hvst-upgrade-864fh")
	d := repo.Deployment(spec(p))
	if d.Name != "hvst-upgrade-864fh-repo" || d.Namespace != cluster.HarvesterNamespace {
		t.Errorf("name %s/%s", d.Namespace, d.Name)
	}
	want := map[string]string{v1beta1.LabelUpgradePlan: p.Name, v1beta1.LabelUpgradeComponent: v1beta1.ComponentRepo}
	for what, got := range map[string]map[string]string{"labels": d.Labels, "selector": d.Spec.Selector.MatchLabels, "pod labels": d.Spec.Template.Labels} {
		if !maps.Equal(got, want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	checkOwner(t, d.OwnerReferences, p)
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d", *d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Name != "repo" || c.Image != "rancher/harvester-upgrade-toolkit:v1.8.0" {
		t.Errorf("container %s image %s", c.Name, c.Image)
	}
	wantCmd := "upgrade-toolkit repo serve --iso /iso/disk.img --sha512 " + checksum + " --listen :8080"
	if got := strings.Join(c.Command, " "); got != wantCmd {
		t.Errorf("command %q, want %q", got, wantCmd)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 || c.Ports[0].Name != "http" {
		t.Errorf("ports %v", c.Ports)
	}
	for probe, path := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz", c.StartupProbe: "/healthz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != path || probe.HTTPGet.Port.StrVal != "http" {
			t.Errorf("probe %+v, want GET %s on http", probe, path)
		}
	}
	// Restricted: non-root, read-only root, no capabilities, RuntimeDefault.
	sc := c.SecurityContext
	if !*sc.RunAsNonRoot || *sc.RunAsUser != 1000 || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation ||
		*sc.Privileged || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v", sc)
	}
	if psc := pod.SecurityContext; !*psc.RunAsNonRoot || *psc.RunAsUser != 1000 || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	if *pod.AutomountServiceAccountToken {
		t.Error("the repo needs no API token")
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].PersistentVolumeClaim.ClaimName != "hvst-upgrade-864fh-iso" || !pod.Volumes[0].PersistentVolumeClaim.ReadOnly {
		t.Errorf("volumes %+v", pod.Volumes)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/iso" || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].Name != pod.Volumes[0].Name {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	anti := pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(anti) != 1 || anti[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" || !maps.Equal(anti[0].PodAffinityTerm.LabelSelector.MatchLabels, want) {
		t.Errorf("anti-affinity %+v", anti)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}
}

func TestDeploymentWithoutChecksumSkipsVerification(t *testing.T) {
	s := spec(plan("p"))
	s.ISOChecksum = ""
	got := strings.Join(repo.Deployment(s).Spec.Template.Spec.Containers[0].Command, " ")
	if got != "upgrade-toolkit repo serve --iso /iso/disk.img --listen :8080" {
		t.Errorf("command %q", got)
	}
}

func TestService(t *testing.T) {
	p := plan("hvst-upgrade-864fh")
	s := repo.Service(p)
	if s.Name != "hvst-upgrade-864fh-repo" || s.Namespace != cluster.HarvesterNamespace {
		t.Errorf("name %s/%s", s.Namespace, s.Name)
	}
	if !maps.Equal(s.Spec.Selector, repo.Deployment(spec(p)).Spec.Template.Labels) {
		t.Errorf("selector %v does not select the pods", s.Spec.Selector)
	}
	if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 80 || s.Spec.Ports[0].TargetPort.StrVal != "http" {
		t.Errorf("ports %+v", s.Spec.Ports)
	}
	checkOwner(t, s.OwnerReferences, p)
}

func TestLongPlanNamesAreShortened(t *testing.T) {
	p := plan(strings.Repeat("a", 60))
	if d, s := repo.Deployment(spec(p)), repo.Service(p); len(d.Name) > 63 || d.Name != s.Name {
		t.Errorf("Deployment %q, Service %q", d.Name, s.Name)
	}
}

func TestTerminalFailure(t *testing.T) {
	terminated := func(code int32, msg string) *corev1.ContainerStateTerminated {
		return &corev1.ContainerStateTerminated{ExitCode: code, Message: msg}
	}
	for _, tc := range []struct {
		name     string
		status   corev1.ContainerStatus
		terminal bool
		msg      string
	}{
		{"running", corev1.ContainerStatus{Name: "repo", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}, false, ""},
		{"checksum mismatch, restarting", corev1.ContainerStatus{Name: "repo", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: terminated(3, "ISO checksum mismatch: expected SHA-512 aa, actual bb\n")}}, true, "ISO checksum mismatch: expected SHA-512 aa, actual bb"},
		{"truncated, just exited", corev1.ContainerStatus{Name: "repo", State: corev1.ContainerState{Terminated: terminated(4, "the ISO cannot be read: image is truncated")}}, true, "the ISO cannot be read: image is truncated"},
		{"invalid ISO without a message", corev1.ContainerStatus{Name: "repo", State: corev1.ContainerState{Terminated: terminated(4, "")}}, true, "exited with code 4"},
		{"a crash is not terminal", corev1.ContainerStatus{Name: "repo", LastTerminationState: corev1.ContainerState{Terminated: terminated(2, "panic")}}, false, ""},
		{"killed (OOM, eviction) is not terminal", corev1.ContainerStatus{Name: "repo", LastTerminationState: corev1.ContainerState{Terminated: terminated(137, "")}}, false, ""},
		{"another container", corev1.ContainerStatus{Name: "sidecar", State: corev1.ContainerState{Terminated: terminated(3, "x")}}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "harvester-system", Name: "p-repo-1"}, Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{tc.status}}}
			msg, terminal := repo.TerminalFailure(pod)
			if terminal != tc.terminal || !strings.Contains(msg, tc.msg) || (tc.terminal && strings.HasSuffix(msg, "\n")) {
				t.Errorf("TerminalFailure = %q, %v; want %v with %q", msg, terminal, tc.terminal, tc.msg)
			}
		})
	}
}

// TestObjectsAreAcceptedByTheAPIServer creates the objects on a real API
// server, and the Deployment's pod in a namespace that enforces the
// restricted Pod Security Standard.
func TestObjectsAreAcceptedByTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := env.Client
	p := plan("")
	p.GenerateName = "hvst-upgrade-"
	p.UID = ""
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	d, s := repo.Deployment(spec(p)), repo.Service(p)
	for _, obj := range []client.Object{d, s} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T: %v", obj, err)
		}
	}
	var got appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), &got); err != nil {
		t.Fatal(err)
	}
	checkOwner(t, got.OwnerReferences, p)
	if cmd := got.Spec.Template.Spec.Containers[0].Command; !slices.Equal(cmd, d.Spec.Template.Spec.Containers[0].Command) {
		t.Errorf("stored command %v", cmd)
	}

	// Pod Security admission: a namespace that enforces "restricted"
	// rejects a privileged pod (so the check is live) and accepts ours.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "restricted-", Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = warningRecorder(func(msg string) { warnings = append(warnings, msg) })
	wc, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	privileged := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "privileged"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}},
	}
	if err := wc.Create(ctx, privileged); !apierrors.IsForbidden(err) {
		t.Fatalf("a privileged pod in the restricted namespace: %v; Pod Security admission is not active, the test proves nothing", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "repo"}, Spec: d.Spec.Template.Spec}
	if err := wc.Create(ctx, pod); err != nil {
		t.Errorf("the repo pod is not accepted under the restricted Pod Security Standard: %v", err)
	}
	restrictedDeployment := d.DeepCopy()
	restrictedDeployment.Namespace = ns.Name
	restrictedDeployment.OwnerReferences = nil
	restrictedDeployment.ResourceVersion = ""
	if err := wc.Create(ctx, restrictedDeployment); err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings: %v", warnings)
	}
}

type warningRecorder func(string)

func (w warningRecorder) HandleWarningHeader(_ int, _ string, msg string) { w(msg) }

func checkOwner(t *testing.T, refs []metav1.OwnerReference, p *v1beta1.UpgradePlan) {
	t.Helper()
	if len(refs) != 1 || refs[0].Kind != "UpgradePlan" || refs[0].APIVersion != v1beta1.GroupVersion.String() ||
		refs[0].Name != p.Name || refs[0].UID != p.UID || !*refs[0].Controller {
		t.Errorf("owner references %+v, want the plan %s", refs, p.Name)
	}
}

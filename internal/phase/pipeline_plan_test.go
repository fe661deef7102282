package phase_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/repo"
)

func TestPlanReachesClusterUpgraded(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(3)
	h.Node("witness", "Harvester v1.7.1", cluster.LabelWitnessNode, "true")
	nodes = append(nodes, "witness")
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), ImagePreloadOption: &v1beta1.ImagePreloadOption{Concurrency: ptr.To(2)}},
		v1beta1.AnnotationUpgradeToolkitImage, "registry.example.com/toolkit")
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.SetImported(names.ISOImage(p.Name), "True", "", "")

	// RepoCreate: the repo runs the toolkit's server on the ISO's PVC.
	p = h.WaitProgressing(p.Name, "waiting for the repo Deployment")
	dep := &appsv1.Deployment{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(p.Name)}, dep)
	if ptr.Deref(dep.Spec.Replicas, 0) != 2 || dep.Labels[v1beta1.LabelUpgradeComponent] != v1beta1.ComponentRepo || len(dep.OwnerReferences) != 1 {
		t.Errorf("repo Deployment %+v", dep.ObjectMeta)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != "registry.example.com/toolkit:v0.0.0-test" {
		t.Errorf("repo image %q: before the release is known the tag is the manager's version", img)
	}
	h.ServeRepo(p.Name)

	// MetadataPopulate fills status.releaseMetadata from the repo, then the
	// preload Plan starts.
	p = h.WaitPhase(p.Name, v1beta1.PhaseImagePreloading)
	if rm := p.Status.ReleaseMetadata; rm == nil || rm.Harvester != "v1.8.0" || rm.OS != "Harvester v1.8.0" || rm.Kubernetes != "v1.35.2+rke2r1" {
		t.Errorf("release metadata %+v", rm)
	}
	suc := &upgradev1.Plan{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.CattleNamespace, Name: names.ImagePreloadPlan(p.Name)}, suc)
	if suc.Spec.Concurrency != 2 || suc.Spec.Version != "v1.8.0" || suc.Spec.Upgrade.Image != "registry.example.com/toolkit" ||
		!slices.Equal(suc.Spec.Upgrade.Command, []string{"upgrade-toolkit", "node", "prepare"}) ||
		suc.Spec.NodeSelector.MatchLabels[cluster.LabelManagedNode] != "true" || ptr.Deref(suc.Spec.JobActiveDeadlineSecs, 0) == 0 {
		t.Errorf("preload Plan spec %+v", suc.Spec)
	}
	j1 := h.SucJob(suc.Name, nodes[0])
	p = h.WaitNodeState(p.Name, nodes[0], v1beta1.NodeStateImagePreloading)
	h.FinishJob(cluster.CattleNamespace, j1, true)
	h.WaitNodeState(p.Name, nodes[0], v1beta1.NodeStateImagePreloaded)
	h.WaitProgressing(p.Name, "preloading images: 1 of 4 nodes done")
	// A node whose Job was already garbage-collected counts as done by the
	// label system-upgrade-controller leaves on it.
	suc.Status.LatestHash = "hash-1"
	h.Must(h.C.Status().Update(h.Ctx(), suc))
	n := &corev1.Node{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: nodes[1]}, n))
	n.Labels[cluster.LabelSUCPlanNode(suc.Name)] = "hash-1"
	h.Must(h.C.Update(h.Ctx(), n))
	h.WaitNodeState(p.Name, nodes[1], v1beta1.NodeStateImagePreloaded)
	h.Preload(p.Name, nodes[2:])

	// ClusterUpgrade: first KubeVirt is kept from migrating every VM.
	p = h.WaitPhase(p.Name, v1beta1.PhaseClusterUpgrading)
	job := &batchv1.Job{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeJob(p.Name)}, job)
	p = h.Get(p.Name)
	if kv := p.Status.SavedSettings.KubeVirt; kv == nil || !slices.Equal(ptr.Deref(kv.WorkloadUpdateMethods, nil), []string{"LiveMigrate"}) || !kv.ComparePatchAdded {
		t.Errorf("saved KubeVirt settings %+v", p.Status.SavedSettings)
	}
	kv := &kubevirtv1.KubeVirt{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}, kv))
	if m := kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods; m == nil || len(m) != 0 {
		t.Errorf("KubeVirt workload update methods %v, want []", m)
	}
	mc := &managementv3.ManagedChart{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart}, mc))
	if mc.Spec.Diff == nil || len(mc.Spec.Diff.ComparePatches) != 1 || mc.Spec.Diff.ComparePatches[0].JSONPointers[0] != cluster.WorkloadUpdateMethodsPointer {
		t.Errorf("ManagedChart diff %+v", mc.Spec.Diff)
	}
	c := job.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example.com/toolkit:v1.8.0" || !slices.Equal(c.Command, []string{"upgrade-toolkit", "cluster-upgrade"}) ||
		job.Spec.Template.Spec.ServiceAccountName != "harvester" || ptr.Deref(c.SecurityContext.RunAsUser, -1) != 0 ||
		job.Labels[v1beta1.LabelUpgradeComponent] != v1beta1.ComponentClusterUpgrade || ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0) == 0 {
		t.Errorf("cluster-upgrade Job %+v\n%+v", job.ObjectMeta, c)
	}
	h.ClusterUpgraded(p.Name)
	p = h.WaitPhase(p.Name, v1beta1.PhaseNodeUpgrading)

	var phases []string
	for _, e := range p.Status.PhaseTransitionTimestamps {
		phases = append(phases, string(e.Phase))
	}
	want := "Initializing Initialized ISODownloading ISODownloaded RepoCreating RepoCreated MetadataPopulating MetadataPopulated ImagePreloading ImagePreloaded ClusterUpgrading ClusterUpgraded NodeUpgrading"
	if got := strings.Join(phases, " "); got != want {
		t.Errorf("history\n got %s\nwant %s", got, want)
	}
	for _, step := range []string{"ISODownload", "RepoCreate", "MetadataPopulate", "ImagePreload", "ClusterUpgrade"} {
		h.WaitEvent(p.Name, "PhaseCompleted: Completed phase "+step)
	}
	if c := p.Condition(v1beta1.ConditionDegraded); c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v", c)
	}
}

func TestPipelineFailures(t *testing.T) {
	tests := []struct {
		name string
		spec v1beta1.UpgradePlanSpec
		// breakRepo changes the release before the plan reads it.
		breakRepo func(h *plantest.Harness)
		// act plays the foreign side up to the failure.
		act  func(h *plantest.Harness, plan string, nodes []string)
		want string
	}{
		{name: "malformed release metadata",
			breakRepo: func(h *plantest.Harness) { h.Repo.Release.Kubernetes = "latest" },
			want:      "harvester-release.yaml",
		},
		{name: "downgrade",
			breakRepo: func(h *plantest.Harness) { h.Repo.Release.Harvester = "v1.6.0"; h.Repo.Release.OS = "Harvester v1.6.0" },
			want:      "v1.6.0",
		},
		{name: "below the minimum",
			breakRepo: func(h *plantest.Harness) { h.Repo.Release.MinUpgradableVersion = "v1.7.2" },
			want:      "v1.7.2",
		},
		{name: "preload Job fails",
			act: func(h *plantest.Harness, plan string, nodes []string) {
				h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImagePreloadPlan(plan), nodes[1]), false)
			},
			want: "preloading images on node node-2 failed: Job cattle-system/apply-",
		},
		{name: "cluster-upgrade Job fails",
			act: func(h *plantest.Harness, plan string, nodes []string) {
				h.Preload(plan, nodes)
				h.WaitPhase(plan, v1beta1.PhaseClusterUpgrading)
				h.FinishJob(cluster.HarvesterNamespace, names.ClusterUpgradeJob(plan), false)
			},
			want: "upgrading the cluster's components failed: Job harvester-system/",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := plantest.New(t)
			nodes := h.Harvester(2)
			if tt.breakRepo != nil {
				tt.breakRepo(h)
				files := h.Repo.Files()
				h.Files.Store(&files)
			}
			p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
			h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
			h.SetImported(names.ISOImage(p.Name), "True", "", "")
			h.ServeRepo(p.Name)
			if tt.act != nil {
				h.WaitPhase(p.Name, v1beta1.PhaseImagePreloading)
				tt.act(h, p.Name, nodes)
			}
			p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
			if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, tt.want) {
				t.Errorf("failure %q does not mention %q", c.Message, tt.want)
			}
		})
	}
}

func TestForceSkipsTheEligibilityCheck(t *testing.T) {
	h := plantest.New(t)
	h.Harvester(1)
	h.Repo.Release.Harvester, h.Repo.Release.OS = "v1.6.0", "Harvester v1.6.0"
	files := h.Repo.Files()
	h.Files.Store(&files)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Force: ptr.To(true),
		ImagePreloadOption: &v1beta1.ImagePreloadOption{Concurrency: ptr.To(-1)}})
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.SetImported(names.ISOImage(p.Name), "True", "", "")
	h.ServeRepo(p.Name)
	// A negative concurrency skips the image import, not the preparation of
	// each node (the hold on RKE2's restart): the Plan runs on every node at
	// once.
	h.WaitEvent(p.Name, "ImagePreloadSkipped")
	plan := &upgradev1.Plan{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.CattleNamespace, Name: names.ImagePreloadPlan(p.Name)}, plan)
	if plan.Spec.Concurrency != 1 {
		t.Errorf("preload Plan concurrency %d, want every node (1)", plan.Spec.Concurrency)
	}
	h.Preload(p.Name, []string{"node-1"})
	h.WaitPhase(p.Name, v1beta1.PhaseClusterUpgrading)
}

func TestRepoUnreachableIsRetriedThenFails(t *testing.T) {
	h := plantest.New(t)
	h.Harvester(1)
	h.Cfg.RepoURL = func(string, string) string { return "http://127.0.0.1:1" + release.RepoRoot }
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.SetImported(names.ISOImage(p.Name), "True", "", "")
	h.ServeRepo(p.Name)
	h.WaitProgressing(p.Name, "reading the release metadata from the repo")
	h.Clock.Step(h.Cfg.Deadlines.Metadata)
	h.Touch(p.Name)
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "could not read the release metadata from the repo") {
		t.Errorf("failure %q", c.Message)
	}
}

func TestRepoChecksumMismatchFailsThePlan(t *testing.T) {
	h := plantest.New(t)
	h.Harvester(2)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.SetImported(names.ISOImage(p.Name), "True", "", "")
	dep := &appsv1.Deployment{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(p.Name)}, dep)
	if got := strings.Join(dep.Spec.Template.Spec.Containers[0].Command, " "); !strings.Contains(got, "--sha512 abc123") {
		t.Errorf("repo command %q does not pass the Version's checksum", got)
	}
	// The repo's pod, as the kubelet reports it after the server refused the ISO.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: dep.Name + "-7d9f-x2x", Labels: repo.Labels(p.Name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: repo.ContainerName, Image: "x"}}},
	}
	h.Must(h.C.Create(h.Ctx(), pod))
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: repo.ContainerName, LastTerminationState: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{ExitCode: repo.ExitCodeChecksumMismatch, Message: "the ISO's SHA-512 is 1f2e..., expected abc123"}}}}
	h.Must(h.C.Status().Update(h.Ctx(), pod))
	t.Cleanup(func() { _ = h.C.Delete(h.Ctx(), pod) })
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "cannot serve the release ISO: the ISO's SHA-512 is 1f2e..., expected abc123") {
		t.Errorf("failure %q", c.Message)
	}
}

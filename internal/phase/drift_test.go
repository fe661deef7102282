package phase_test

import (
	"fmt"
	"maps"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestOwnedObjectsFollowThePlan: the repo's Deployment and Service and the
// preload Plan are brought back to what the plan wants when that changes,
// e.g. the toolkit image, or when they were changed behind its back.
func TestOwnedObjectsFollowThePlan(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(1)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.SetImported(names.ISOImage(p.Name), "True", "", "")
	repoKey := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(p.Name)}
	h.WaitProgressing(p.Name, "waiting for the repo Deployment")

	h.Annotate(p.Name, v1beta1.AnnotationUpgradeToolkitImage, "registry.example.com/toolkit")
	h.Eventually("the repo Deployment runs the new image", func() (bool, string) {
		dep := &appsv1.Deployment{}
		h.Must(h.C.Get(h.Ctx(), repoKey, dep))
		img := dep.Spec.Template.Spec.Containers[0].Image
		return img == "registry.example.com/toolkit:v0.0.0-test", img
	})

	// Someone rewrote the Service by hand, dropping the record of what the
	// plan last wrote.
	svc := &corev1.Service{}
	h.Must(h.C.Get(h.Ctx(), repoKey, svc))
	want := svc.Spec.Selector
	svc.Spec.Selector = map[string]string{"app": "something-else"}
	delete(svc.Annotations, v1beta1.Prefix+"spec-hash")
	h.Must(h.C.Update(h.Ctx(), svc))
	h.Touch(p.Name)
	h.Eventually("the repo Service selects the repo again", func() (bool, string) {
		h.Must(h.C.Get(h.Ctx(), repoKey, svc))
		return maps.Equal(svc.Spec.Selector, want), fmt.Sprint(svc.Spec.Selector)
	})

	h.ServeRepo(p.Name)
	h.WaitPhase(p.Name, v1beta1.PhaseImagePreloading)
	h.Annotate(p.Name, v1beta1.AnnotationUpgradeToolkitImage, "mirror.example.com/toolkit")
	h.Eventually("the preload Plan runs the new image", func() (bool, string) {
		plan := &upgradev1.Plan{}
		h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.CattleNamespace, Name: names.ImagePreloadPlan(p.Name)}, plan))
		return plan.Spec.Upgrade.Image == "mirror.example.com/toolkit", plan.Spec.Upgrade.Image
	})
	h.Preload(p.Name, nodes)
	h.WaitPhase(p.Name, v1beta1.PhaseClusterUpgrading)
}

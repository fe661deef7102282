package controller_test

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
)

// TestOwnedObjectsFollowThePlan: the repo's Deployment and Service and the
// preload Plan are brought back to what the plan wants when that changes,
// e.g. the toolkit image, or when they were changed behind its back.
func TestOwnedObjectsFollowThePlan(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(1)
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.waitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.setImported(names.ISOImage(p.Name), "True", "", "")
	repoKey := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(p.Name)}
	h.waitProgressing(p.Name, "waiting for the repo Deployment")

	h.annotate(p.Name, v1beta1.AnnotationUpgradeToolkitImage, "registry.example.com/toolkit")
	h.eventually("the repo Deployment runs the new image", func() (bool, string) {
		dep := &appsv1.Deployment{}
		h.must(h.c.Get(h.ctx(), repoKey, dep))
		img := dep.Spec.Template.Spec.Containers[0].Image
		return img == "registry.example.com/toolkit:v0.0.0-test", img
	})

	// Someone rewrote the Service by hand, dropping the record of what the
	// plan last wrote.
	svc := &corev1.Service{}
	h.must(h.c.Get(h.ctx(), repoKey, svc))
	want := svc.Spec.Selector
	svc.Spec.Selector = map[string]string{"app": "something-else"}
	delete(svc.Annotations, v1beta1.Prefix+"spec-hash")
	h.must(h.c.Update(h.ctx(), svc))
	h.touch(p.Name)
	h.eventually("the repo Service selects the repo again", func() (bool, string) {
		h.must(h.c.Get(h.ctx(), repoKey, svc))
		return maps.Equal(svc.Spec.Selector, want), fmt.Sprint(svc.Spec.Selector)
	})

	h.serveRepo(p.Name)
	h.waitPhase(p.Name, v1beta1.PhaseImagePreloading)
	h.annotate(p.Name, v1beta1.AnnotationUpgradeToolkitImage, "mirror.example.com/toolkit")
	h.eventually("the preload Plan runs the new image", func() (bool, string) {
		plan := &upgradev1.Plan{}
		h.must(h.c.Get(h.ctx(), client.ObjectKey{Namespace: cluster.CattleNamespace, Name: names.ImagePreloadPlan(p.Name)}, plan))
		return plan.Spec.Upgrade.Image == "mirror.example.com/toolkit", plan.Spec.Upgrade.Image
	})
	h.preload(p.Name, nodes)
	h.waitPhase(p.Name, v1beta1.PhaseClusterUpgrading)
}

// annotate sets an annotation of the plan.
func (h *harness) annotate(plan, key, value string) {
	h.t.Helper()
	p := h.get(plan)
	before := p.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[key] = value
	h.must(h.c.Patch(h.ctx(), p, client.MergeFrom(before)))
}

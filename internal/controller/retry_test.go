package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// retry sets the plan's retry annotation, as the operator does.
func (h *harness) retry(name, value string) {
	h.t.Helper()
	p := h.get(name)
	before := p.DeepCopy()
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, v1beta1.AnnotationRetry, value)
	h.must(h.c.Patch(h.ctx(), p, client.MergeFrom(before)))
}

// TestRetryAfterAFailedDownload: a failed ISO import keeps the plan and its
// image for the retry window; the retry deletes the failed image, the
// download runs again and the plan carries on; a second failure not
// retried in its window is cleaned up like any finished plan.
func TestRetryAfterAFailedDownload(t *testing.T) {
	h := newHarness(t)
	h.harvester(1)
	h.cfg.RetryWindow = time.Hour
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	iso := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ISOImage(p.Name)}
	h.waitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.setImported(iso.Name, "False", "True", "404 Not Found")
	p = h.waitPhase(p.Name, v1beta1.PhaseFailed)

	// Held: the finalizer, the image, the retry hint and its deadline.
	f := p.LastFailure()
	if f == nil || f.Phase != v1beta1.PhaseISODownloading || f.RetryDeadline == nil || !p.AwaitsRetry() {
		t.Fatalf("failure %+v; awaits retry %v", f, p.AwaitsRetry())
	}
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "404 Not Found") ||
		!strings.Contains(c.Message, `kubectl annotate upgradeplan `+p.Name+` management.harvesterhci.io/retry="$(date +%s)" --overwrite`) {
		t.Errorf("failure message %q does not say how to retry", c.Message)
	}
	if h.absent(iso, &harvesterv1beta1.VirtualMachineImage{}) {
		t.Error("the failed image was deleted before any retry")
	}
	// A value set before the failure is not a retry.
	if p.Status.ObservedRetry != "" {
		t.Errorf("observed retry %q", p.Status.ObservedRetry)
	}

	h.retry(p.Name, "first")
	h.waitEvent(p.Name, "UpgradeRetried: Retrying from phase ISODownloading (retry \"first\")")
	p = h.waitPhase(p.Name, v1beta1.PhaseISODownloading)
	if f := p.Status.Failures[0]; f.RetriedAt == nil || f.Retry != "first" || p.Status.ObservedRetry != "first" {
		t.Errorf("failure after the retry %+v, observed %q", f, p.Status.ObservedRetry)
	}
	// The image is made again, without the failure.
	h.eventually("a new image", func() (bool, string) {
		img := &harvesterv1beta1.VirtualMachineImage{}
		err := h.c.Get(h.ctx(), iso, img)
		return err == nil && len(img.Status.Conditions) == 0, fmt.Sprint(err, img.Status.Conditions)
	})

	// Fails again; this time nobody retries it within the window.
	h.setImported(iso.Name, "False", "True", "404 Not Found")
	p = h.waitPhase(p.Name, v1beta1.PhaseFailed)
	if len(p.Status.Failures) != 2 || !p.AwaitsRetry() {
		t.Fatalf("failures %+v", p.Status.Failures)
	}
	h.clock.Step(time.Hour)
	h.touch(p.Name)
	h.eventually("the plan cleaned up after its retry window", func() (bool, string) {
		p = h.get(p.Name)
		return !controllerutil.ContainsFinalizer(p, v1beta1.FinalizerCleanup), describe(p)
	})
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "not retried by") {
		t.Errorf("message after the window %q", c.Message)
	}
	if !h.absent(iso, &harvesterv1beta1.VirtualMachineImage{}) {
		t.Error("the image is left after the cleanup")
	}
	// Too late now: the annotation changes nothing.
	h.retry(p.Name, "late")
	h.wholePass(p.Name)
	if p = h.get(p.Name); p.Status.CurrentPhase != v1beta1.PhaseFailed || p.Status.ObservedRetry == "late" {
		t.Errorf("a retry after the cleanup moved the plan: %s", describe(p))
	}
}

// TestFinalFailureIsNotHeld: a failure no retry cures (a pre-flight check)
// has no retry deadline and is cleaned up at once, whatever the window.
func TestFinalFailureIsNotHeld(t *testing.T) {
	h := newHarness(t)
	h.harvester(1)
	h.cfg.RetryWindow = time.Hour
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")}, v1beta1.AnnotationSkipGCThresholdCheck, "maybe")
	h.eventually("the plan failed and cleaned up", func() (bool, string) {
		p = h.get(p.Name)
		return p.Status.CurrentPhase == v1beta1.PhaseFailed && len(p.Finalizers) == 0, describe(p)
	})
	if f := p.LastFailure(); f == nil || f.RetryDeadline != nil || p.AwaitsRetry() {
		t.Errorf("failure %+v", f)
	}
	if c := p.Condition(v1beta1.ConditionProgressing); strings.Contains(c.Message, v1beta1.AnnotationRetry) {
		t.Errorf("a final failure offers a retry: %q", c.Message)
	}
}

// TestRetryAfterFailedJobs: a failed system-upgrade-controller Job and a
// failed cluster-upgrade Job are deleted by the retry, so that SUC and the
// phase run them again; the plan carries on with the new ones.
func TestRetryAfterFailedJobs(t *testing.T) {
	h := newHarness(t)
	nodes := h.harvester(2)
	h.cfg.RetryWindow = time.Hour
	p := h.plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.waitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.setImported(names.ISOImage(p.Name), "True", "", "")
	h.serveRepo(p.Name)
	h.waitPhase(p.Name, v1beta1.PhaseImagePreloading)

	failed := h.finishJob(cluster.CattleNamespace, h.sucJob(names.ImagePreloadPlan(p.Name), nodes[1]), false)
	h.finishJob(cluster.CattleNamespace, h.sucJob(names.ImagePreloadPlan(p.Name), nodes[0]), true)
	p = h.waitPhase(p.Name, v1beta1.PhaseFailed)
	if st := p.Status.NodeUpgradeStatuses[nodes[1]].State; st != v1beta1.NodeStateImagePreloadFailed {
		t.Fatalf("node %s in %s", nodes[1], st)
	}
	h.retry(p.Name, "1")
	h.eventually("the failed preload Job deleted", func() (bool, string) {
		return h.absent(client.ObjectKeyFromObject(failed), &batchv1.Job{}), ""
	})
	p = h.waitPhase(p.Name, v1beta1.PhaseImagePreloading)
	want := v1beta1.NodeRetry{Node: nodes[1], From: v1beta1.NodeStateImagePreloadFailed, To: v1beta1.NodeStateImagePreloading}
	if f := p.LastFailure(); len(f.Nodes) != 1 || f.Nodes[0] != want {
		t.Errorf("nodes moved back %+v, want %+v", f.Nodes, want)
	}
	// SUC runs the node's Job again; the other node's stays done.
	h.finishJob(cluster.CattleNamespace, h.sucJob(names.ImagePreloadPlan(p.Name), nodes[1]), true)
	h.waitPhase(p.Name, v1beta1.PhaseClusterUpgrading)

	job := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeJob(p.Name)}
	first := h.finishJob(job.Namespace, job.Name, false)
	h.waitPhase(p.Name, v1beta1.PhaseFailed)
	h.retry(p.Name, "2")
	h.eventually("a new cluster-upgrade Job", func() (bool, string) {
		j := &batchv1.Job{}
		err := h.c.Get(h.ctx(), job, j)
		return err == nil && j.UID != first.UID, fmt.Sprint(err)
	})
	h.clusterUpgraded(p.Name)
	p = h.waitPhase(p.Name, v1beta1.PhaseNodeUpgrading)
	if len(p.Status.Failures) != 2 || p.Status.Failures[1].Retry != "2" || p.Status.Failures[1].Phase != v1beta1.PhaseClusterUpgrading {
		t.Errorf("failures %+v", p.Status.Failures)
	}
}

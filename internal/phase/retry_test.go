package phase_test

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
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestRetryAfterAFailedDownload: a failed ISO import keeps the plan and its
// image for the retry window; the retry deletes the failed image, the
// download runs again and the plan carries on; a second failure not
// retried in its window is cleaned up like any finished plan.
func TestRetryAfterAFailedDownload(t *testing.T) {
	h := plantest.New(t)
	h.Harvester(1)
	h.Cfg.RetryWindow = time.Hour
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	iso := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ISOImage(p.Name)}
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.SetImported(iso.Name, "False", "True", "404 Not Found")
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)

	// Held: the finalizer, the image, the retry hint and its deadline.
	f := p.LastFailure()
	if f == nil || f.Phase != v1beta1.PhaseISODownloading || f.RetryDeadline == nil || !p.AwaitsRetry() {
		t.Fatalf("failure %+v; awaits retry %v", f, p.AwaitsRetry())
	}
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "404 Not Found") ||
		!strings.Contains(c.Message, `kubectl annotate upgradeplan `+p.Name+` management.harvesterhci.io/retry="$(date +%s)" --overwrite`) {
		t.Errorf("failure message %q does not say how to retry", c.Message)
	}
	if h.Absent(iso, &harvesterv1beta1.VirtualMachineImage{}) {
		t.Error("the failed image was deleted before any retry")
	}
	// A value set before the failure is not a retry.
	if p.Status.ObservedRetry != "" {
		t.Errorf("observed retry %q", p.Status.ObservedRetry)
	}

	h.Retry(p.Name, "first")
	h.WaitEvent(p.Name, "UpgradeRetried: Retrying from phase ISODownloading (retry \"first\")")
	p = h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	if f := p.Status.Failures[0]; f.RetriedAt == nil || f.Retry != "first" || p.Status.ObservedRetry != "first" {
		t.Errorf("failure after the retry %+v, observed %q", f, p.Status.ObservedRetry)
	}
	// The image is made again, without the failure.
	h.Eventually("a new image", func() (bool, string) {
		img := &harvesterv1beta1.VirtualMachineImage{}
		err := h.C.Get(h.Ctx(), iso, img)
		return err == nil && len(img.Status.Conditions) == 0, fmt.Sprint(err, img.Status.Conditions)
	})

	// Fails again; this time nobody retries it within the window.
	h.SetImported(iso.Name, "False", "True", "404 Not Found")
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if len(p.Status.Failures) != 2 || !p.AwaitsRetry() {
		t.Fatalf("failures %+v", p.Status.Failures)
	}
	h.Clock.Step(time.Hour)
	h.Touch(p.Name)
	h.Eventually("the plan cleaned up after its retry window", func() (bool, string) {
		p = h.Get(p.Name)
		return !controllerutil.ContainsFinalizer(p, v1beta1.FinalizerCleanup), plantest.Describe(p)
	})
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "not retried by") {
		t.Errorf("message after the window %q", c.Message)
	}
	if !h.Absent(iso, &harvesterv1beta1.VirtualMachineImage{}) {
		t.Error("the image is left after the cleanup")
	}
	// Too late now: the annotation changes nothing.
	h.Retry(p.Name, "late")
	h.WholePass(p.Name)
	if p = h.Get(p.Name); p.Status.CurrentPhase != v1beta1.PhaseFailed || p.Status.ObservedRetry == "late" {
		t.Errorf("a retry after the cleanup moved the plan: %s", plantest.Describe(p))
	}
}

// TestFinalFailureIsNotHeld: a failure no retry cures (a pre-flight check)
// has no retry deadline and is cleaned up at once, whatever the window.
func TestFinalFailureIsNotHeld(t *testing.T) {
	h := plantest.New(t)
	h.Harvester(1)
	h.Cfg.RetryWindow = time.Hour
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")}, v1beta1.AnnotationSkipGCThresholdCheck, "maybe")
	h.Eventually("the plan failed and cleaned up", func() (bool, string) {
		p = h.Get(p.Name)
		return p.Status.CurrentPhase == v1beta1.PhaseFailed && len(p.Finalizers) == 0, plantest.Describe(p)
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
	h := plantest.New(t)
	nodes := h.Harvester(2)
	h.Cfg.RetryWindow = time.Hour
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	h.SetImported(names.ISOImage(p.Name), "True", "", "")
	h.ServeRepo(p.Name)
	h.WaitPhase(p.Name, v1beta1.PhaseImagePreloading)

	failed := h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImagePreloadPlan(p.Name), nodes[1]), false)
	h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImagePreloadPlan(p.Name), nodes[0]), true)
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if st := p.Status.NodeUpgradeStatuses[nodes[1]].State; st != v1beta1.NodeStateImagePreloadFailed {
		t.Fatalf("node %s in %s", nodes[1], st)
	}
	h.Retry(p.Name, "1")
	h.Eventually("the failed preload Job deleted", func() (bool, string) {
		return h.Absent(client.ObjectKeyFromObject(failed), &batchv1.Job{}), ""
	})
	p = h.WaitPhase(p.Name, v1beta1.PhaseImagePreloading)
	want := v1beta1.NodeRetry{Node: nodes[1], From: v1beta1.NodeStateImagePreloadFailed, To: v1beta1.NodeStateImagePreloading}
	if f := p.LastFailure(); len(f.Nodes) != 1 || f.Nodes[0] != want {
		t.Errorf("nodes moved back %+v, want %+v", f.Nodes, want)
	}
	// SUC runs the node's Job again; the other node's stays done.
	h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImagePreloadPlan(p.Name), nodes[1]), true)
	h.WaitPhase(p.Name, v1beta1.PhaseClusterUpgrading)

	job := client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ClusterUpgradeJob(p.Name)}
	first := h.FinishJob(job.Namespace, job.Name, false)
	h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	h.Retry(p.Name, "2")
	h.Eventually("a new cluster-upgrade Job", func() (bool, string) {
		j := &batchv1.Job{}
		err := h.C.Get(h.Ctx(), job, j)
		return err == nil && j.UID != first.UID, fmt.Sprint(err)
	})
	h.ClusterUpgraded(p.Name)
	p = h.WaitPhase(p.Name, v1beta1.PhaseNodeUpgrading)
	if len(p.Status.Failures) != 2 || p.Status.Failures[1].Retry != "2" || p.Status.Failures[1].Phase != v1beta1.PhaseClusterUpgrading {
		t.Errorf("failures %+v", p.Status.Failures)
	}
}

// TestLostWriteRaces: a step's write that loses a race (409 Conflict, as
// the API server answers a write of an object changed since it was read,
// or a create whose ResourceQuota admission lost one) is tried again at
// once, without a Degraded condition or a Warning event; a race lost pass
// after pass is something fighting the toolkit, and the plan says so.
func TestLostWriteRaces(t *testing.T) {
	t.Run("a few", func(t *testing.T) {
		h := plantest.New(t)
		h.Cluster(3)
		h.ConflictNext("create", "virtualmachineimages", 2)
		p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
		h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ISOImage(p.Name)}, &harvesterv1beta1.VirtualMachineImage{})
		p = h.WaitProgressing(p.Name, "importing the release ISO")
		for _, e := range h.Events(p.Name) {
			if strings.HasPrefix(e, v1beta1.EventReconcileError) {
				t.Errorf("two lost races reported: %s", e)
			}
		}
		if c := p.Condition(v1beta1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
			t.Errorf("Degraded %+v after two lost races", c)
		}
	})
	t.Run("pass after pass", func(t *testing.T) {
		h := plantest.New(t)
		h.Cluster(3)
		h.ConflictNext("create", "virtualmachineimages", 1000)
		p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
		h.WaitEvent(p.Name, v1beta1.EventReconcileError+": Pipeline error: ")
		if c := h.Get(p.Name).Condition(v1beta1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "the object has been modified") {
			t.Errorf("Degraded %+v, want the race lost pass after pass named", c)
		}
		h.ConflictNext("create", "virtualmachineimages", 0)
		h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ISOImage(p.Name)}, &harvesterv1beta1.VirtualMachineImage{})
		h.Eventually("Degraded cleared", func() (bool, string) {
			c := h.Get(p.Name).Condition(v1beta1.ConditionDegraded)
			return c != nil && c.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", c)
		})
	})
}

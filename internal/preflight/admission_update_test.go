package preflight

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

func TestAdmitUpdate(t *testing.T) {
	managed := []string{"n1", "n2", "n3"}
	running := func(p *v1beta1.UpgradePlan) { p.Status.CurrentPhase = v1beta1.PhaseImagePreloading }
	awaitingRetry := func(p *v1beta1.UpgradePlan) {
		p.Status.CurrentPhase = v1beta1.PhaseFailed
		p.Finalizers = []string{v1beta1.FinalizerCleanup}
		p.Annotations = map[string]string{v1beta1.AnnotationRetry: "1"}
		p.Status.ObservedRetry = "1"
		until := metav1.NewTime(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
		p.Status.Failures = []v1beta1.Failure{{Phase: v1beta1.PhaseNodeUpgrading, Message: "node-2 failed", RetryDeadline: &until}}
	}
	retry := func(v string) func(p *v1beta1.UpgradePlan) {
		return func(p *v1beta1.UpgradePlan) { metav1.SetMetaDataAnnotation(&p.ObjectMeta, v1beta1.AnnotationRetry, v) }
	}
	tests := []struct {
		name   string
		before func(p *v1beta1.UpgradePlan)
		change func(p *v1beta1.UpgradePlan)
		errs   []string
		warns  []string
	}{
		{"pause a managed node while running", running,
			func(p *v1beta1.UpgradePlan) {
				p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"n2"}}
			}, nil, nil},
		{"resume every node while running", func(p *v1beta1.UpgradePlan) {
			running(p)
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"n2", "n3"}}
		}, func(p *v1beta1.UpgradePlan) { p.Spec.NodeUpgradeOption = nil }, nil, nil},
		{"pause an unknown node", running,
			func(p *v1beta1.UpgradePlan) {
				p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"n1", "node-4"}}
			}, []string{`spec.nodeUpgradeOption.pauseNodes[1]: Not found: "node-4": is not a managed node of this cluster (managed nodes: n1, n2, n3)`}, nil},
		{"a paused node that has left the cluster does not block other changes", func(p *v1beta1.UpgradePlan) {
			running(p)
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"gone"}}
		}, func(p *v1beta1.UpgradePlan) {
			p.Spec.NodeUpgradeOption.PauseNodes = []string{"gone", "n1"}
			p.Finalizers = []string{v1beta1.FinalizerCleanup}
		}, nil, nil},
		{"pause and resume the plan while running", running, func(p *v1beta1.UpgradePlan) { p.Spec.Paused = ptr.To(true) }, nil, nil},
		{"pausing a finished plan warns", func(p *v1beta1.UpgradePlan) { p.Status.CurrentPhase = v1beta1.PhaseSucceeded },
			func(p *v1beta1.UpgradePlan) { p.Spec.Paused = ptr.To(true) }, nil, []string{"spec.paused has no effect: the plan has finished (phase Succeeded)"}},
		{"change restoreVM while running", running, func(p *v1beta1.UpgradePlan) { p.Spec.RestoreVM = ptr.To(true) },
			[]string{"spec.restoreVM: Forbidden: cannot be changed while the upgrade runs (phase ImagePreloading); only spec.paused, spec.nodeUpgradeOption.pauseNodes and the annotations can"}, nil},
		{"change force while running", running, func(p *v1beta1.UpgradePlan) { p.Spec.Force = ptr.To(true) },
			[]string{"spec.force: Forbidden: cannot be changed while the upgrade runs"}, []string{"spec.force is true"}},
		{"change preload concurrency while running", running, func(p *v1beta1.UpgradePlan) {
			p.Spec.ImagePreloadOption = &v1beta1.ImagePreloadOption{Concurrency: ptr.To(1)}
		}, []string{"spec.imagePreloadOption: Forbidden: cannot be changed while the upgrade runs"}, nil},
		{"change everything before it starts", nil, func(p *v1beta1.UpgradePlan) {
			p.Spec.RestoreVM = ptr.To(true)
			p.Spec.ImagePreloadOption = &v1beta1.ImagePreloadOption{Concurrency: ptr.To(1)}
		}, nil, nil},
		{"force before it starts warns", nil, func(p *v1beta1.UpgradePlan) { p.Spec.Force = ptr.To(true) }, nil, []string{"spec.force is true"}},
		{"anything goes once finished", func(p *v1beta1.UpgradePlan) { p.Status.CurrentPhase = v1beta1.PhaseFailed }, func(p *v1beta1.UpgradePlan) {
			p.Spec.RestoreVM = ptr.To(true)
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"gone"}}
		}, nil, nil},
		{"set a bad annotation", running, func(p *v1beta1.UpgradePlan) {
			p.Annotations = map[string]string{v1beta1.AnnotationAllowDeletion: "yes"}
		}, []string{`metadata.annotations[management.harvesterhci.io/allow-deletion]: Invalid value: "yes": must be "true" or "false"`}, nil},
		{"set allow-deletion", running, func(p *v1beta1.UpgradePlan) {
			p.Annotations = map[string]string{v1beta1.AnnotationAllowDeletion: "true"}
		}, nil, []string{"allow-deletion=true: this plan can be deleted while it runs"}},
		{"an old bad annotation is left alone", func(p *v1beta1.UpgradePlan) {
			running(p)
			p.Annotations = map[string]string{v1beta1.AnnotationMinCertsExpirationInDay: "soon", v1beta1.AnnotationSkipWebhook: "true"}
		}, func(p *v1beta1.UpgradePlan) { p.Annotations["note"] = "x" }, nil, nil},
		{"fixing a bad annotation is validated", func(p *v1beta1.UpgradePlan) {
			p.Annotations = map[string]string{v1beta1.AnnotationMinCertsExpirationInDay: "soon"}
		}, func(p *v1beta1.UpgradePlan) { p.Annotations[v1beta1.AnnotationMinCertsExpirationInDay] = "0" },
			[]string{`Invalid value: "0": must be a whole number of days greater than 0`}, nil},
		{"retry a plan that waits for it", awaitingRetry, retry("2"), nil, []string{"retrying from phase NodeUpgrading after: node-2 failed"}},
		{"retry with the value already used", func(p *v1beta1.UpgradePlan) {
			awaitingRetry(p)
			delete(p.Annotations, v1beta1.AnnotationRetry)
		}, retry("1"),
			[]string{`metadata.annotations[management.harvesterhci.io/retry]: Invalid value: "1": this value was already used`}, nil},
		{"retry a running plan", running, retry("1"),
			[]string{`metadata.annotations[management.harvesterhci.io/retry]: Forbidden: the plan has not failed (phase "ImagePreloading")`}, nil},
		{"retry a failure no retry cures", func(p *v1beta1.UpgradePlan) {
			awaitingRetry(p)
			p.Status.Failures[0].RetryDeadline = nil
		}, retry("2"), []string{"Forbidden: a retry cannot cure this failure; change what it names and create a new plan"}, nil},
		{"retry a plan cleaned up after its window", func(p *v1beta1.UpgradePlan) {
			awaitingRetry(p)
			p.Finalizers = nil
		}, retry("2"), []string{"was not retried by 2026-11-25T10:00:00Z and has been cleaned up: create a new plan"}, nil},
		{"a plan that waits for a retry keeps its spec as a running one", awaitingRetry, func(p *v1beta1.UpgradePlan) { p.Spec.RestoreVM = ptr.To(true) },
			[]string{"spec.restoreVM: Forbidden: cannot be changed while the upgrade runs (phase Failed)"}, nil},
		{"several faults at once", running, func(p *v1beta1.UpgradePlan) {
			p.Spec.RestoreVM = ptr.To(true)
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"x"}}
			p.Annotations = map[string]string{v1beta1.AnnotationUpgradeToolkitImage: "a:b"}
		}, []string{"metadata.annotations[management.harvesterhci.io/upgrade-toolkit-image]", "pauseNodes[0]", "spec.restoreVM"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testPlan()
			if tt.before != nil {
				tt.before(before)
			}
			after := before.DeepCopy()
			tt.change(after)
			r := AdmitUpdate(before, after, managed)
			got := errorStrings(r)
			if len(got) != len(tt.errs) {
				t.Fatalf("errors %q; want %d: %q", got, len(tt.errs), tt.errs)
			}
			for i := range got {
				if !strings.Contains(got[i], tt.errs[i]) {
					t.Errorf("error %q does not contain %q", got[i], tt.errs[i])
				}
			}
			if len(r.Warnings()) != len(tt.warns) {
				t.Fatalf("warnings %q; want %q", r.Warnings(), tt.warns)
			}
			for i := range r.Warnings() {
				if !strings.Contains(r.Warnings()[i], tt.warns[i]) {
					t.Errorf("warning %q does not contain %q", r.Warnings()[i], tt.warns[i])
				}
			}
		})
	}
}

// An update reads the managed nodes only when it could add an unknown
// pauseNodes entry; AdmitUpdate then reaches the same verdicts without them.
func TestUpdateNeedsNodes(t *testing.T) {
	pause := func(names ...string) *v1beta1.UpgradePlan {
		p := &v1beta1.UpgradePlan{}
		p.Status.CurrentPhase = v1beta1.PhaseNodeUpgrading
		if names != nil {
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: names}
		}
		return p
	}
	finished := pause("n1", "n2")
	finished.Status.CurrentPhase = v1beta1.PhaseSucceeded
	for _, tc := range []struct {
		name          string
		before, after *v1beta1.UpgradePlan
		want          bool
	}{
		{"finalizer or annotation change", pause("n1"), pause("n1"), false},
		{"a node resumed", pause("n1", "n2"), pause("n1"), false},
		{"a node added", pause("n1"), pause("n1", "n2"), true},
		{"first pause", pause(), pause("n1"), true},
		{"a finished plan", pause("n1"), finished, false},
	} {
		if got := UpdateNeedsNodes(tc.before, tc.after); got != tc.want {
			t.Errorf("%s: UpdateNeedsNodes = %v, want %v", tc.name, got, tc.want)
		}
		if !tc.want {
			if r := AdmitUpdate(tc.before, tc.after, nil); len(r.Errors()) != 0 {
				t.Errorf("%s: without the nodes AdmitUpdate refuses: %v", tc.name, r.Errors())
			}
		}
	}
}

// TestExcludeNodesOnUpdate: a name added to excludeNodes must be a managed
// node, and a single-node plan cannot exclude its only node; an added name
// makes the webhook read the nodes.
func TestExcludeNodesOnUpdate(t *testing.T) {
	plan := func(single bool, names ...string) *v1beta1.UpgradePlan {
		p := &v1beta1.UpgradePlan{}
		p.Status.CurrentPhase = v1beta1.PhaseNodeUpgrading
		if single {
			p.Status.SingleNode = ptr.To("n1")
		}
		if names != nil {
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{ExcludeNodes: names}
		}
		return p
	}
	managed := []string{"n1", "n2", "n3"}
	if !UpdateNeedsNodes(plan(false), plan(false, "n2")) {
		t.Error("a name added to excludeNodes does not read the nodes")
	}
	if errs := AdmitUpdate(plan(false), plan(false, "n2"), managed).Errors(); len(errs) != 0 {
		t.Errorf("excluding a managed node is refused: %v", errs)
	}
	errs := AdmitUpdate(plan(false), plan(false, "n9"), managed).Errors()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "spec.nodeUpgradeOption.excludeNodes[0]") || !strings.Contains(errs[0].Error(), "n1, n2, n3") {
		t.Errorf("excluding an unknown node: %v, want one error at the entry naming the managed nodes", errs)
	}
	errs = AdmitUpdate(plan(true), plan(true, "n1"), []string{"n1"}).Errors()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "single-node") {
		t.Errorf("excluding a single node: %v, want it refused", errs)
	}
}

// TestAbortAdmission: an abort is refused where it cannot be honoured or
// means nothing, saying why and what to do instead; it cannot be taken
// back; from ClusterUpgrade on it is admitted with a warning that there is
// no downgrade.
func TestAbortAdmission(t *testing.T) {
	plan := func(phase v1beta1.UpgradePlanPhase, abort bool, change func(*v1beta1.UpgradePlan)) *v1beta1.UpgradePlan {
		p := &v1beta1.UpgradePlan{}
		p.Status.CurrentPhase = phase
		if abort {
			p.Spec.Abort = ptr.To(true)
		}
		if change != nil {
			change(p)
		}
		return p
	}
	dry := func(p *v1beta1.UpgradePlan) { p.Spec.DryRun = ptr.To(true) }
	for _, tc := range []struct {
		name          string
		before, after *v1beta1.UpgradePlan
		refused, warn string
	}{
		{"before ClusterUpgrade", plan(v1beta1.PhaseISODownloading, false, nil), plan(v1beta1.PhaseISODownloading, true, nil), "", ""},
		{"waiting for the slot", plan("", false, nil), plan("", true, nil), "", ""},
		{"during NodeUpgrade", plan(v1beta1.PhaseNodeUpgrading, false, nil), plan(v1beta1.PhaseNodeUpgrading, true, nil), "", "no downgrade"},
		{"taken back", plan(v1beta1.PhaseNodeUpgrading, true, nil), plan(v1beta1.PhaseNodeUpgrading, false, nil), "cannot be taken back", ""},
		{"ended", plan(v1beta1.PhaseSucceeded, false, nil), plan(v1beta1.PhaseSucceeded, true, nil), "has ended (phase Succeeded)", ""},
		{"a dry run", plan("", false, dry), plan("", true, dry), "a dry run", ""},
		{"nodes done", plan(v1beta1.PhaseCleaningUp, false, nil), plan(v1beta1.PhaseCleaningUp, true, nil), "every node is upgraded", ""},
		{"already aborting", plan(v1beta1.PhaseNodeUpgrading, true, nil), plan(v1beta1.PhaseNodeUpgrading, true, nil), "", ""},
	} {
		r := AdmitUpdate(tc.before, tc.after, nil)
		errs := r.Errors()
		switch {
		case tc.refused == "" && len(errs) != 0:
			t.Errorf("%s: refused: %v", tc.name, errs)
		case tc.refused != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.refused)):
			t.Errorf("%s: %v, want one refusal saying %q", tc.name, errs, tc.refused)
		}
		if warned := strings.Join(r.Warnings(), "; "); tc.warn != "" && !strings.Contains(warned, tc.warn) {
			t.Errorf("%s: warnings %q, want %q", tc.name, warned, tc.warn)
		}
	}
	created := plan("", true, func(p *v1beta1.UpgradePlan) { p.Name = "hvst-upgrade-a" })
	if errs := AdmitCreate(created, nil).Errors(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "a new plan cannot be aborted") {
		t.Errorf("a plan created aborted: %v, want it refused", errs)
	}
}

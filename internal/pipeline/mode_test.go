package pipeline_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
)

// decideCase is a plan, the plan holding the upgrade slot, and the pass's
// decision.
type decideCase struct {
	name   string
	plan   *v1beta1.UpgradePlan
	holder *v1beta1.UpgradePlan
	want   pipeline.Decision
}

// abortCase is a decideCase of an aborted plan, with whether a node of the
// plan is between its drain and its return.
type abortCase struct {
	decideCase
	underWay bool
}

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func decideCases() ([]decideCase, []abortCase) {
	deleted := metav1.NewTime(now)
	plan := func(name string, phase v1beta1.UpgradePlanPhase, change func(*v1beta1.UpgradePlan)) *v1beta1.UpgradePlan {
		p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{v1beta1.FinalizerCleanup}}}
		p.Status.CurrentPhase = phase
		if change != nil {
			change(p)
		}
		return p
	}
	// failed: a failure a retry can cure, its window closing at deadline.
	failed := func(deadline time.Time) func(*v1beta1.UpgradePlan) {
		return func(p *v1beta1.UpgradePlan) {
			p.Status.Failures = []v1beta1.Failure{{Phase: v1beta1.PhaseNodeUpgrading, RetryDeadline: ptr.To(metav1.NewTime(deadline))}}
		}
	}
	retryAsked := func(p *v1beta1.UpgradePlan) {
		failed(now.Add(time.Hour))(p)
		p.Annotations = map[string]string{v1beta1.AnnotationRetry: "1"}
	}
	paused := func(p *v1beta1.UpgradePlan) { p.Spec.Paused = ptr.To(true) }
	aborted := func(p *v1beta1.UpgradePlan) { p.Spec.Abort = ptr.To(true) }
	other := plan("other", v1beta1.PhaseISODownloading, nil)
	abortCases := []abortCase{
		{decideCase{"an aborted plan waiting for the slot ends at once", plan("p", "", aborted), other, pipeline.Decision{Mode: pipeline.Abort}}, false},
		{decideCase{"an aborted plan ends at once before ClusterUpgrade", plan("p", v1beta1.PhaseImagePreloading, aborted), nil, pipeline.Decision{Mode: pipeline.Abort}}, false},
		{decideCase{"an aborted plan finishes its cluster upgrade", plan("p", v1beta1.PhaseClusterUpgrading, aborted), nil, pipeline.Decision{Mode: pipeline.Run}}, false},
		{decideCase{"an aborted plan ends at a safe point", plan("p", v1beta1.PhaseClusterUpgraded, aborted), nil, pipeline.Decision{Mode: pipeline.Abort}}, false},
		{decideCase{"an aborted plan waits for the node under way", plan("p", v1beta1.PhaseNodeUpgrading, aborted), nil, pipeline.Decision{Mode: pipeline.Run}}, true},
		{decideCase{"an aborted plan ends once no node is under way", plan("p", v1beta1.PhaseNodeUpgrading, aborted), nil, pipeline.Decision{Mode: pipeline.Abort}}, false},
		{decideCase{"an aborted paused plan ends rather than holds", plan("p", v1beta1.PhaseISODownloaded, func(p *v1beta1.UpgradePlan) { aborted(p); paused(p) }), nil,
			pipeline.Decision{Mode: pipeline.Abort}}, false},
		{decideCase{"an aborted plan finishes its cleanup", plan("p", v1beta1.PhaseCleaningUp, aborted), nil, pipeline.Decision{Mode: pipeline.Run}}, false},
		{decideCase{"a plan that ended Aborted is finished", plan("p", v1beta1.PhaseAborted, aborted), nil, pipeline.Decision{Mode: pipeline.Finish}}, false},
	}

	return []decideCase{
		{"a new plan that holds the slot runs", plan("p", "", nil), nil, pipeline.Decision{Mode: pipeline.Run}},
		{"a new plan the slot was given runs", plan("p", "", nil), plan("p", "", nil), pipeline.Decision{Mode: pipeline.Run}},
		{"a running plan runs", plan("p", v1beta1.PhaseClusterUpgrading, nil), other, pipeline.Decision{Mode: pipeline.Run}},
		{"a plan in an unknown phase runs (and fails there)", plan("p", "Elsewhere", nil), nil, pipeline.Decision{Mode: pipeline.Run}},
		{"a new plan waits for the plan holding the slot", plan("p", "", nil), other, pipeline.Decision{Mode: pipeline.Queued, Holder: other}},
		{"a new paused plan waits for the slot first", plan("p", "", paused), other, pipeline.Decision{Mode: pipeline.Queued, Holder: other}},
		{"a new paused plan holds before its first phase", plan("p", "", paused), nil, pipeline.Decision{Mode: pipeline.Paused}},
		{"a paused plan holds between two phases", plan("p", v1beta1.PhaseISODownloaded, paused), nil, pipeline.Decision{Mode: pipeline.Paused}},
		{"a paused plan holds before the final verification", plan("p", v1beta1.PhaseCleanedUp, paused), nil, pipeline.Decision{Mode: pipeline.Paused}},
		{"a paused plan finishes the phase under way", plan("p", v1beta1.PhaseNodeUpgrading, paused), nil, pipeline.Decision{Mode: pipeline.Run}},
		{"a dry run previews", plan("p", "", func(p *v1beta1.UpgradePlan) { p.Spec.DryRun = ptr.To(true) }), other, pipeline.Decision{Mode: pipeline.DryRun}},
		{"a dry run that ended is finished", plan("p", v1beta1.PhasePreviewed, func(p *v1beta1.UpgradePlan) { p.Spec.DryRun = ptr.To(true) }), nil, pipeline.Decision{Mode: pipeline.Finish}},
		{"a deleted plan is finished", plan("p", v1beta1.PhaseNodeUpgrading, func(p *v1beta1.UpgradePlan) { p.DeletionTimestamp = &deleted }), nil, pipeline.Decision{Mode: pipeline.Finish}},
		{"a deleted plan that never started is finished", plan("p", "", func(p *v1beta1.UpgradePlan) { p.DeletionTimestamp = &deleted }), other, pipeline.Decision{Mode: pipeline.Finish}},
		{"a succeeded plan is finished", plan("p", v1beta1.PhaseSucceeded, nil), nil, pipeline.Decision{Mode: pipeline.Finish}},
		{"a plan failed for good is finished", plan("p", v1beta1.PhaseFailed, func(p *v1beta1.UpgradePlan) {
			p.Status.Failures = []v1beta1.Failure{{Phase: v1beta1.PhaseInitializing}}
		}), nil, pipeline.Decision{Mode: pipeline.Finish}},
		{"a failed plan awaits a retry in its window", plan("p", v1beta1.PhaseFailed, failed(now.Add(time.Hour))), nil,
			pipeline.Decision{Mode: pipeline.AwaitRetry, RetryIn: time.Hour}},
		{"a failed paused plan awaits a retry too", plan("p", v1beta1.PhaseFailed, func(p *v1beta1.UpgradePlan) { failed(now.Add(time.Minute))(p); paused(p) }), nil,
			pipeline.Decision{Mode: pipeline.AwaitRetry, RetryIn: time.Minute}},
		{"a failed plan asked to retry retries", plan("p", v1beta1.PhaseFailed, retryAsked), nil, pipeline.Decision{Mode: pipeline.Retry}},
		{"a retry asked for once is not asked again", plan("p", v1beta1.PhaseFailed, func(p *v1beta1.UpgradePlan) {
			retryAsked(p)
			p.Status.ObservedRetry = "1"
		}), nil, pipeline.Decision{Mode: pipeline.AwaitRetry, RetryIn: time.Hour}},
		{"a failed plan not retried in its window is finished", plan("p", v1beta1.PhaseFailed, failed(now)), nil,
			pipeline.Decision{Mode: pipeline.Finish, RetryExpired: true}},
		{"a retry asked for after the window is too late", plan("p", v1beta1.PhaseFailed, func(p *v1beta1.UpgradePlan) {
			retryAsked(p)
			p.Status.Failures[0].RetryDeadline = ptr.To(metav1.NewTime(now.Add(-time.Second)))
		}), nil, pipeline.Decision{Mode: pipeline.Finish, RetryExpired: true}},
		{"a deleted failed plan is finished at once", plan("p", v1beta1.PhaseFailed, func(p *v1beta1.UpgradePlan) {
			retryAsked(p)
			p.DeletionTimestamp = &deleted
		}), nil, pipeline.Decision{Mode: pipeline.Finish}},
		{"a failed plan already cleaned up is finished", plan("p", v1beta1.PhaseFailed, func(p *v1beta1.UpgradePlan) {
			retryAsked(p)
			p.Finalizers = nil
		}), nil, pipeline.Decision{Mode: pipeline.Finish}},
	}, abortCases
}

func TestDecide(t *testing.T) {
	cases, aborts := decideCases()
	for _, ac := range aborts {
		cases = append(cases, ac.decideCase)
	}
	underWay := map[string]bool{}
	for _, ac := range aborts {
		underWay[ac.name] = ac.underWay
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := pipeline.Decide(tc.plan, pipeline.Facts{Now: now, SlotHolder: tc.holder, NodeUnderWay: underWay[tc.name]})
			if got != tc.want {
				t.Errorf("Decide = %+v (%s), want %+v (%s)", got, got.Mode, tc.want, tc.want.Mode)
			}
		})
	}
}

// TestDecideCoversEveryMode keeps TestDecide's table complete as modes are
// added.
func TestDecideCoversEveryMode(t *testing.T) {
	decided := map[pipeline.Mode]bool{}
	cases, aborts := decideCases()
	for _, tc := range cases {
		decided[tc.want.Mode] = true
	}
	for _, ac := range aborts {
		decided[ac.want.Mode] = true
	}
	for _, m := range pipeline.Modes {
		if !decided[m] {
			t.Errorf("no case of TestDecide decides %s", m)
		}
		if m.String() == "" {
			t.Errorf("mode %d has no name", m)
		}
	}
}

func TestWaitsForSlot(t *testing.T) {
	deleted := metav1.Now()
	for _, tc := range []struct {
		name string
		plan v1beta1.UpgradePlan
		want bool
	}{
		{"new", v1beta1.UpgradePlan{}, true},
		{"started", v1beta1.UpgradePlan{Status: v1beta1.UpgradePlanStatus{CurrentPhase: v1beta1.PhaseInitializing}}, false},
		{"dry run", v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{DryRun: ptr.To(true)}}, false},
		{"deleted", v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleted}}, false},
	} {
		if got := pipeline.WaitsForSlot(&tc.plan); got != tc.want {
			t.Errorf("%s: WaitsForSlot = %v, want %v", tc.name, got, tc.want)
		}
	}
}

package e2e

import (
	"cmp"
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
)

// TestRetry: a plan that failed for a reason a retry can cure keeps what it
// made while it waits; the operator fixes the cause and sets the retry
// annotation; the failed step runs again, nothing done before runs again,
// and the plan Succeeds with every invariant held (node states move back
// only as the retry records).
func TestRetry(t *testing.T) {
	tests := map[string]struct {
		fault     sim.JobFault
		from, to  v1beta1.NodeUpgradeState
		failPhase v1beta1.UpgradePlanPhase
		// slow are Jobs that take longer, so that a failure comes while
		// other nodes still upgrade.
		slow []sim.JobFault
	}{
		// A permanent exit code: the Job fails at once.
		"post-drain": {fault: sim.JobFault{Type: sim.JobPostDrain, Node: "node-2", ExitCode: 4, Message: "writing the OS image: no space left"},
			from: v1beta1.NodeStatePostDrainFailed, to: v1beta1.NodeStatePostDraining, failPhase: v1beta1.PhaseNodeUpgrading},
		// system-upgrade-controller's Job: the retry deletes it and SUC
		// runs it again.
		"image preload": {fault: sim.JobFault{Type: sim.JobImagePreload, Node: "node-2", Message: "importing images: no space left"},
			from: v1beta1.NodeStateImagePreloadFailed, to: v1beta1.NodeStateImagePreloading, failPhase: v1beta1.PhaseImagePreloading},
		// Every node's cleanup fails, retried by the Job controller to
		// SUC's backoff limit (about 30 s) while the next node upgrades
		// (its post-drain Job takes 45 s): named on the node at once, it
		// fails the plan only in ImageCleanup.
		"image cleanup": {fault: sim.JobFault{Type: sim.JobImageCleanup, Message: "crictl rmi: exit status 1"},
			from: v1beta1.NodeStateImageCleanFailed, to: v1beta1.NodeStateImageCleaning, failPhase: v1beta1.PhaseCleaningUp,
			slow: []sim.JobFault{{Type: sim.JobPostDrain, Delay: 45 * time.Second}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var held, retried bool
			var namedEarly string // the node's failure, seen during NodeUpgrade
			boots := map[string]map[string]bool{}
			final := scenario{
				sim:         sim.Config{Nodes: 3, Faults: sim.FaultSet{FailJobs: []sim.JobFault{tt.fault}, SlowJobs: tt.slow}},
				retryWindow: 10 * time.Minute,
				// Three slow post-drain Jobs alone take 135 s of the image
				// cleanup's run (167 s on a quiet machine): the default 3
				// minutes left no room for a busy one.
				timeout: 5 * time.Minute,
				want:    v1beta1.PhaseSucceeded,
				during: func(t *testing.T, ctx context.Context, run *simrun.Run, p *v1beta1.UpgradePlan) {
					recordBoots(t, ctx, run.Client, boots)
					for node, st := range p.Status.NodeUpgradeStatuses {
						if st.State == tt.from && p.Status.CurrentPhase == v1beta1.PhaseNodeUpgrading && namedEarly == "" {
							namedEarly = node + ": " + st.Message
						}
					}
					if retried || !p.AwaitsRetry() {
						return
					}
					checkHeld(t, ctx, run.Client, p, tt.failPhase, tt.fault.Node)
					held = true
					// The operator fixes the cause, then asks for the retry.
					run.Sim.SetFaults(sim.FaultSet{})
					before := p.DeepCopy()
					metav1.SetMetaDataAnnotation(&p.ObjectMeta, v1beta1.AnnotationRetry, "after-fix")
					if err := run.Client.Patch(ctx, p, client.MergeFrom(before)); err != nil {
						t.Fatalf("asking for the retry: %v", err)
					}
					retried = true
				},
			}.run(t)
			if !held {
				t.Fatal("the plan never waited for a retry")
			}
			if tt.fault.Type == sim.JobImageCleanup {
				if !strings.Contains(namedEarly, tt.fault.Message) {
					t.Errorf("no cleanup failure was named on its node during NodeUpgrade (%q)", namedEarly)
				}
				t.Logf("named during NodeUpgrade: %s", namedEarly)
			}
			if n := len(final.Status.Failures); n != 1 {
				t.Fatalf("%d failures recorded, want 1: %+v", n, final.Status.Failures)
			}
			f := final.Status.Failures[0]
			if f.Phase != tt.failPhase || f.RetriedAt == nil || f.Retry != "after-fix" || final.Status.ObservedRetry != "after-fix" {
				t.Errorf("failure record %+v, observed retry %q", f, final.Status.ObservedRetry)
			}
			// A fault on every node: those whose Job had failed by then.
			if len(f.Nodes) == 0 || (tt.fault.Node != "" && len(f.Nodes) != 1) {
				t.Errorf("nodes moved back %+v, want %s", f.Nodes, cmp.Or(tt.fault.Node, "one or more"))
			}
			for _, r := range f.Nodes {
				if r.From != tt.from || r.To != tt.to || (tt.fault.Node != "" && r.Node != tt.fault.Node) {
					t.Errorf("node moved back %+v, want %s from %s to %s", r, cmp.Or(tt.fault.Node, "any node"), tt.from, tt.to)
				}
			}
			// Every node was upgraded once: one reboot, two boot IDs.
			for node, ids := range boots {
				if len(ids) != 2 {
					t.Errorf("node %s booted %d times during the upgrade, want once more than before it", node, len(ids)-1)
				}
			}
		})
	}
}

// recordBoots adds each node's current boot ID to what was seen of it.
func recordBoots(t *testing.T, ctx context.Context, c client.Client, boots map[string]map[string]bool) {
	t.Helper()
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.MatchingLabels{cluster.LabelManagedNode: "true"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if boots[n.Name] == nil {
			boots[n.Name] = map[string]bool{}
		}
		boots[n.Name][n.Status.NodeInfo.BootID] = true
	}
}

// checkHeld checks a plan waiting for its retry: Failed with a message that
// says how to retry, its failed Job and its repo kept, the settings it
// changed still changed.
func checkHeld(t *testing.T, ctx context.Context, c client.Client, p *v1beta1.UpgradePlan, failPhase v1beta1.UpgradePlanPhase, node string) {
	t.Helper()
	if f := p.LastFailure(); f.Phase != failPhase || !strings.Contains(f.Message, node) {
		t.Errorf("failure %+v, want one in %s naming %s", f, failPhase, node)
	}
	progressing := p.Condition(v1beta1.ConditionProgressing)
	if progressing == nil || !strings.Contains(progressing.Message, v1beta1.AnnotationRetry) {
		t.Fatalf("the failure does not say how to retry: %+v", progressing)
	}
	t.Logf("waiting for a retry: %s", progressing.Message)
	var jobs batchv1.JobList
	if err := c.List(ctx, &jobs, client.MatchingLabels{v1beta1.LabelUpgradePlan: p.Name}); err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, j := range jobs.Items {
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
				failed = append(failed, j.Name)
			}
		}
	}
	if len(failed) == 0 {
		t.Errorf("the failed Job is gone while the plan waits for a retry; Jobs: %d", len(jobs.Items))
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.Repo(p.Name)}, &corev1.Service{}); err != nil {
		t.Errorf("the repo is gone while the plan waits for a retry: %v", err)
	}
}

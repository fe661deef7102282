package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/status"
	"github.com/harvester/upgrade-toolkit/internal/upgradelog"
	"github.com/harvester/upgrade-toolkit/internal/version"
)

// Result is how a demo run ended.
type Result struct {
	Plan       *v1beta1.UpgradePlan
	Elapsed    time.Duration
	Restarts   int
	Violations []string
	Writes     map[apicount.Key]int
	Events     []corev1.Event
	// Logs is what the plan's UpgradeLog kept, nil when it kept nothing.
	Logs *v1beta1.UpgradeLogStatus
	// Archive is the support bundle written (Options.Archive), or "".
	Archive string
}

// Succeeded reports whether the upgrade succeeded with every invariant held.
func (r *Result) Succeeded() bool {
	return r.Plan != nil && r.Plan.Status.CurrentPhase == v1beta1.PhaseSucceeded && len(r.Violations) == 0
}

// Run runs the scenario, calling show with each new state of the plan.
func Run(ctx context.Context, o Options, show func(*v1beta1.UpgradePlan, time.Duration)) (*Result, error) {
	cfg, err := o.simConfig()
	if err != nil {
		return nil, err
	}
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	run, err := simrun.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = run.Stop() }()
	// Simulated time runs faster than real time: what does not happen is
	// given up on after seconds, not the production minutes and hours.
	d := &run.PhaseConfig().Deadlines
	d.Reboot, d.Rancher, d.Verify = 15*time.Second, 15*time.Second, 10*time.Second

	start := time.Now()
	plan, err := run.CreatePlan(ctx, o.planSpec(), o.planAnnotations())
	if err != nil {
		return nil, err
	}
	if len(o.Pause) > 0 {
		go resumeAfter(ctx, run, plan.Name, o.ResumeAfter)
	}
	restarts := run.NewRestarter(uint64(o.Seed), 300*time.Millisecond)
	final, err := run.WaitFinished(ctx, plan.Name, func(p *v1beta1.UpgradePlan) {
		if o.Restart {
			restarts.Observe(p)
		}
		if show != nil {
			show(p, time.Since(start))
		}
	})
	err = errors.Join(err, restarts.Wait())
	res := &Result{Plan: final, Elapsed: time.Since(start), Restarts: run.Restarts(), Writes: run.Counter.Writes()}
	if err != nil {
		return res, err
	}
	violations, err := run.Violations(ctx, plan.Name)
	if err != nil {
		return res, err
	}
	for _, v := range violations {
		res.Violations = append(res.Violations, v.Rule+": "+v.Message)
	}
	var events corev1.EventList
	if err := run.Client.List(ctx, &events, client.MatchingFields{"involvedObject.name": plan.Name}); err == nil {
		res.Events = events.Items
		sort.Slice(res.Events, func(i, j int) bool { return res.Events[i].FirstTimestamp.Before(&res.Events[j].FirstTimestamp) })
	}
	res.Logs = keptLogs(ctx, run.Client, plan.Name)
	if o.Archive != "" {
		if err := writeArchive(ctx, run.Client, plan.Name, o.Archive); err != nil {
			return res, err
		}
		res.Archive = o.Archive
	}
	return res, nil
}

// keptLogs waits a little for the plan's UpgradeLog to list its last logs
// complete (the capture reads a pod's end as the pod ends), and returns
// its status; nil when the plan kept none.
func keptLogs(ctx context.Context, c client.Client, plan string) *v1beta1.UpgradeLogStatus {
	var st *v1beta1.UpgradeLogStatus
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		ul, err := upgradelog.Get(ctx, c, plan)
		if err != nil {
			return false, nil //nolint:nilerr // none yet
		}
		st = &ul.Status
		for _, l := range st.Logs {
			if !l.Complete && l.Incomplete == nil {
				return false, nil
			}
		}
		return len(st.Logs) > 0, nil
	})
	return st
}

func writeArchive(ctx context.Context, c client.Client, plan, file string) error {
	f, err := os.Create(file) //nolint:gosec // the user names the file
	if err != nil {
		return err
	}
	if err := upgradelog.Archive(ctx, c, nil, plan, version.String(), time.Now(), f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// resumeAfter releases the paused nodes after a while, as an operator would.
func resumeAfter(ctx context.Context, run *simrun.Run, plan string, d time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(d):
	}
	p, err := run.Plan(ctx, plan)
	if err != nil {
		return
	}
	before := p.DeepCopy()
	p.Spec.NodeUpgradeOption = nil
	_ = run.Client.Patch(ctx, p, client.MergeFrom(before))
}

// Summary describes a finished run for humans.
func Summary(r *Result) string {
	var b strings.Builder
	p := r.Plan
	outcome := string(p.Status.CurrentPhase)
	fmt.Fprintf(&b, "\n%s: UpgradePlan %s in %s", outcome, p.Name, r.Elapsed.Round(10*time.Millisecond))
	if r.Restarts > 0 {
		fmt.Fprintf(&b, " (the manager was restarted %d times)", r.Restarts)
	}
	b.WriteString("\n")
	if c := p.Condition(v1beta1.ConditionProgressing); c != nil && p.Status.CurrentPhase == v1beta1.PhaseFailed {
		fmt.Fprintf(&b, "reason: %s\n", c.Message)
	}
	if len(p.Status.Checks) > 0 {
		b.WriteString("verified:\n")
		for _, c := range p.Status.Checks {
			fmt.Fprintf(&b, "  %-8s %-32s %s\n", c.Result, c.Name, c.Message)
		}
	}
	b.WriteString("phases:\n")
	for _, pt := range status.FromPlan(p, nil, time.Now()).Phases {
		fmt.Fprintf(&b, "  %-18s %s\n", pt.Step, pt.Duration.Duration)
	}
	total := 0
	for _, n := range r.Writes {
		total += n
	}
	fmt.Fprintf(&b, "manager API writes: %d\n", total)
	if len(r.Violations) == 0 {
		b.WriteString("invariants: all held (phases in order, node states forward only, one node draining at a time, no VM left stopped unrecorded or unrestored, nothing left behind, no pod held past the log capture's bound, every pod's image on its node)\n")
	} else {
		fmt.Fprintf(&b, "invariants VIOLATED:\n  %s\n", strings.Join(r.Violations, "\n  "))
	}
	if l := r.Logs; l != nil {
		fmt.Fprintf(&b, "logs: %d pod logs kept (%d KiB) in UpgradeLog %s\n", len(l.Logs), (l.Bytes+1023)/1024, p.Name)
		if c := apimeta.FindStatusCondition(l.Conditions, v1beta1.ConditionIncomplete); c != nil && c.Status == metav1.ConditionTrue {
			fmt.Fprintf(&b, "  incomplete: %s\n", c.Message)
		}
	}
	if r.Archive != "" {
		fmt.Fprintf(&b, "support bundle: %s (the plan, events, every log, Jobs, Plans, node timelines, Version, release metadata)\n", r.Archive)
	} else {
		b.WriteString("support bundle: run the demo with --archive FILE to write this upgrade's\n")
	}
	b.WriteString("watch and debug a real upgrade the same way (see the README):\n" +
		"  upgrade-toolkit status --watch [PLAN]                 the live view\n" +
		"  upgrade-toolkit logs PLAN [--job JOB | --node NODE]   the logs of every Job, kept after the pods go\n" +
		"  upgrade-toolkit logs PLAN --archive FILE              one .tar.gz to attach to a bug report\n")
	return b.String()
}

// WriteYAML prints the final plan and its events as YAML.
func WriteYAML(w io.Writer, r *Result) error {
	if r.Plan == nil {
		return errors.New("no plan to print")
	}
	p := r.Plan.DeepCopy()
	p.ManagedFields = nil
	p.APIVersion, p.Kind = v1beta1.GroupVersion.String(), "UpgradePlan"
	out, err := yaml.Marshal(p)
	if err != nil {
		return err
	}
	type event struct {
		Type, Reason, From, Message string
		Count                       int32
	}
	var events []event
	for _, e := range r.Events {
		events = append(events, event{Type: e.Type, Reason: e.Reason, From: e.Source.Component, Message: e.Message, Count: e.Count})
	}
	ev, err := yaml.Marshal(map[string]any{"events": events})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s---\n%s", out, ev)
	return err
}

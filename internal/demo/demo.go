package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/status"
)

// Result is how a demo run ended.
type Result struct {
	Plan       *v1beta1.UpgradePlan
	Elapsed    time.Duration
	Restarts   int
	Violations []string
	Writes     map[apicount.Key]int
	Events     []corev1.Event
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
	plan, err := run.CreatePlan(ctx, o.planSpec(), nil)
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
	return res, nil
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
		b.WriteString("invariants: all held (phases in order, node states forward only, one node draining at a time, no VM left stopped unrecorded or unrestored, nothing left behind)\n")
	} else {
		fmt.Fprintf(&b, "invariants VIOLATED:\n  %s\n", strings.Join(r.Violations, "\n  "))
	}
	b.WriteString("watch and debug a real upgrade the same way: upgrade-toolkit status --watch [PLAN] (see the README)\n")
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

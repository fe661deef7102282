package status

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// LogReader returns the last lines of a Job's log, "" when there is none.
type LogReader func(ctx context.Context, namespace, job string) string

// maxWarnings is how many of the latest warning events the status shows.
const maxWarnings = 5

// ErrNoPlan says that the cluster has no UpgradePlan to show.
var ErrNoPlan = errors.New("no UpgradePlan found; create one, or name it: upgrade-toolkit status PLAN")

// Compute reads the plan (the newest one when name is "") and what the
// cluster tells about it: the latest warning events and, for a failed plan
// whose Job is still there, the end of that Job's log (logs may be nil).
func Compute(ctx context.Context, r client.Reader, logs LogReader, name string, now time.Time) (*Status, error) {
	var plans v1beta1.UpgradePlanList
	if err := r.List(ctx, &plans); err != nil {
		return nil, fmt.Errorf("listing UpgradePlans: %w", err)
	}
	plan, previous := find(plans.Items, name)
	if plan == nil {
		if name != "" {
			return nil, fmt.Errorf("UpgradePlan %q not found; `kubectl get upgradeplans` lists them", name)
		}
		return nil, ErrNoPlan
	}
	s := FromPlan(plan, previous, now)
	w, err := warnings(ctx, r, plan.Name)
	if err != nil {
		return nil, err
	}
	s.Warnings = w
	if s.Logs, err = incompleteLogs(ctx, r, plan.Name); err != nil {
		return nil, err
	}
	if s.VMs, err = ledger(ctx, r, plan.Name); err != nil {
		return nil, err
	}
	if s.Failure != nil && logs != nil {
		if err := liveJobLog(ctx, r, logs, plan.Name, s.Failure); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Previous is the newest plan created before the named one that
// succeeded: its step times stand in for the steps the named plan has not
// measured yet. nil when there is none.
func Previous(plans []v1beta1.UpgradePlan, name string) *v1beta1.UpgradePlan {
	_, previous := find(plans, name)
	return previous
}

// find returns the named plan (the newest when name is "") and the newest
// plan created before it that succeeded. It sorts plans by creation.
func find(plans []v1beta1.UpgradePlan, name string) (plan, previous *v1beta1.UpgradePlan) {
	sort.Slice(plans, func(i, j int) bool {
		return plans[i].CreationTimestamp.Before(&plans[j].CreationTimestamp)
	})
	for i := range plans {
		p := &plans[i]
		if p.Name == name || (name == "" && i == len(plans)-1) {
			return p, previous
		}
		if p.Status.CurrentPhase == v1beta1.PhaseSucceeded {
			previous = p
		}
	}
	return nil, previous
}

// incompleteLogs reads the plan's UpgradeLog: the logs let go before their
// end, nil when there is none (or no UpgradeLog: the capture is off).
func incompleteLogs(ctx context.Context, r client.Reader, plan string) (*Logs, error) {
	ul := &v1beta1.UpgradeLog{}
	if err := r.Get(ctx, client.ObjectKey{Name: plan}, ul); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the UpgradeLog %s: %w", plan, err)
	}
	c := apimeta.FindStatusCondition(ul.Status.Conditions, v1beta1.ConditionIncomplete)
	if c == nil || c.Status != metav1.ConditionTrue {
		return nil, nil
	}
	out := &Logs{Message: c.Message}
	for _, l := range ul.Status.Logs {
		if l.Incomplete == nil {
			continue
		}
		out.Incomplete++
		if !slices.Contains(out.Nodes, l.Node) {
			out.Nodes = append(out.Nodes, l.Node)
		}
	}
	sort.Strings(out.Nodes)
	return out, nil
}

// maxVMs is how many VMs something happened to the status shows.
const maxVMs = 20

// ledger reads the plan's VM ledger, nil when it has none.
func ledger(ctx context.Context, r client.Reader, plan string) (*VMs, error) {
	l, _, err := vmledger.Read(ctx, r, plan)
	if err != nil || l == nil {
		return nil, err
	}
	out := &VMs{Ledger: vmledger.Key(plan).String(), Recorded: len(l.Records)}
	for i := range l.Records {
		rec := &l.Records[i]
		if len(rec.Events) == 0 {
			continue
		}
		if len(out.Changed) == maxVMs {
			out.More++
			continue
		}
		out.Changed = append(out.Changed, VM{Name: rec.VM, Node: rec.Node, Summary: rec.Summary()})
	}
	return out, nil
}

// warnings are the latest warning events about the plan, oldest first.
func warnings(ctx context.Context, r client.Reader, plan string) ([]Warning, error) {
	var events corev1.EventList
	if err := r.List(ctx, &events, client.MatchingFields{"involvedObject.name": plan}); err != nil {
		return nil, fmt.Errorf("listing the events of UpgradePlan %s: %w", plan, err)
	}
	var out []Warning
	for _, e := range events.Items {
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "UpgradePlan" {
			continue
		}
		t := e.LastTimestamp
		if t.IsZero() {
			t.Time = e.EventTime.Time
		}
		out = append(out, Warning{Time: t, Reason: e.Reason, Message: firstLine(e.Message), Count: e.Count})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(&out[j].Time) })
	if len(out) > maxWarnings {
		out = out[len(out)-maxWarnings:]
	}
	return out, nil
}

// liveJobLog completes a failure from the failed Job when it is still there
// (a finished plan's cleanup deletes its Jobs; the failure message keeps
// the log lines read when it failed).
func liveJobLog(ctx context.Context, r client.Reader, logs LogReader, plan string, f *Failure) error {
	for _, ns := range []string{cluster.HarvesterNamespace, cluster.CattleNamespace} {
		var jobs batchv1.JobList
		if err := r.List(ctx, &jobs, client.InNamespace(ns), client.MatchingLabels{v1beta1.LabelUpgradePlan: plan}); err != nil {
			return fmt.Errorf("listing the Jobs of UpgradePlan %s: %w", plan, err)
		}
		for _, j := range jobs.Items {
			if !failed(&j) || (f.Job != "" && f.Job != j.Namespace+"/"+j.Name) {
				continue
			}
			f.Job = j.Namespace + "/" + j.Name
			if n := j.Labels[v1beta1.LabelNode]; n != "" {
				f.Node = n
			}
			if lines := logs(ctx, j.Namespace, j.Name); lines != "" {
				f.LogLines = strings.Split(lines, "\n")
			}
			return nil
		}
	}
	return nil
}

func failed(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

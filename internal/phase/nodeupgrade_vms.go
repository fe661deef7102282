package phase

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/vmledger"
)

// The node upgrade reads the plan's VM ledger (kept by the ledger's
// reconciler) to count, per node, what happened to its VMs, and to name the
// VMs of a draining node whose live migration fails or makes no progress.
// Past the migration deadline the node is held: its pre-drain Job keeps
// waiting for the VMs, KubeVirt keeps trying, and the plan tells the
// operator what to choose for each VM, until the Job's wait runs out.

// nodeVMs brings the nodes' VM counts up to date from the ledger and names,
// on a draining node, the VMs in trouble; past the migration deadline it
// holds the node for the operator's choice. It returns when a deadline
// passes, zero when none runs.
func (s *Scope) nodeVMs(ctx context.Context, nodes []corev1.Node, l *vmledger.Ledger, jobs map[string]*batchv1.Job) (time.Time, error) {
	if l == nil {
		return time.Time{}, nil
	}
	counts := l.Counts(func(node string) bool { return nodestate.Upgraded(s.nodeState(node)) })
	var next time.Time
	for i := range nodes {
		node := nodes[i].Name
		st := s.Plan.Status.NodeUpgradeStatuses[node]
		var vms *v1beta1.NodeVMs
		if c, ok := counts[node]; ok {
			vms = &c
		}
		// Only a draining node's VMs can be in trouble: reading every
		// node's is a pass over the whole ledger per node.
		var troubles []vmledger.VMTrouble
		if st.State == v1beta1.NodeStatePreDraining {
			troubles = l.Troubles(node)
		}
		if st.State != v1beta1.NodeStatePreDraining || len(troubles) == 0 {
			s.putVMs(node, vms)
			if st.State == v1beta1.NodeStatePreDraining && vms != nil && vms.ToMove > 0 {
				// How far the node's evacuation is, in place of a trouble
				// that is over.
				s.setNodeState(node, st.State, "", fmt.Sprintf("moving the VMs away: %d of %d moved", vms.Moved, vms.ToMove))
			}
			continue
		}
		if vms == nil {
			vms = &v1beta1.NodeVMs{}
		}
		held, deadline := s.migrationDeadline(st.VMs, vms, troubles)
		s.putVMs(node, vms)
		msg, err := s.describeTroubles(ctx, node, troubles, held, deadline, jobs[node])
		if err != nil {
			return time.Time{}, err
		}
		reason := v1beta1.ReasonMigrationFailing
		if held {
			reason = v1beta1.ReasonMigrationHeld
		}
		if s.setNodeState(node, st.State, reason, msg) && held && st.Reason != v1beta1.ReasonMigrationHeld {
			s.Event(corev1.EventTypeWarning, v1beta1.EventVMMigrationHeld, "Node %s: %s", node, msg)
		}
		if !held && !s.Plan.IsPaused() && (next.IsZero() || deadline.Before(next)) {
			next = deadline
		}
	}
	return next, nil
}

// putVMs records a node's VM counts when they changed.
func (s *Scope) putVMs(node string, vms *v1beta1.NodeVMs) {
	st, ok := s.Plan.Status.NodeUpgradeStatuses[node]
	if !ok || sameVMs(st.VMs, vms) {
		return
	}
	st.VMs = vms
	s.putNode(node, st)
}

// sameVMs compares two nodes' VM counts without reflection: a pass
// compares every node's, and at 500 nodes a reflective comparison was
// 6% of the manager's CPU.
func sameVMs(a, b *v1beta1.NodeVMs) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.MigrationDeadline, y.MigrationDeadline = nil, nil
	da, db := a.MigrationDeadline, b.MigrationDeadline
	return x == y && (da == nil) == (db == nil) && (da == nil || da.Equal(db))
}

// migrationDeadline works out, into vms, when the node's migration troubles
// hold it: the migration deadline after the earliest trouble (or the
// operator's latest retry), with the plan's paused time left out like every
// deadline of the plan (status.pauses); and whether that time has come. It
// never moves earlier, and stands still while the plan is paused.
func (s *Scope) migrationDeadline(prev, vms *v1beta1.NodeVMs, troubles []vmledger.VMTrouble) (held bool, deadline time.Time) {
	since := troubles[0].Since
	for _, t := range troubles[1:] {
		if t.Since.Before(since) {
			since = t.Since
		}
	}
	deadline = s.deadline(since, s.Config.Deadlines.Migration).Truncate(time.Second)
	if prev != nil && prev.MigrationDeadline != nil && (s.Plan.IsPaused() || prev.MigrationDeadline.After(deadline)) {
		deadline = prev.MigrationDeadline.Time
	}
	vms.MigrationDeadline = &metav1.Time{Time: deadline}
	return !s.Plan.IsPaused() && !s.Now().Before(deadline), deadline
}

// describeTroubles says, for a draining node, which VMs' migrations fail or
// make no progress: the VM, its migration object, the attempts, since when
// and the last failure; once the node is held, what the operator can choose
// for each, and when the node fails if nobody does.
func (s *Scope) describeTroubles(ctx context.Context, node string, troubles []vmledger.VMTrouble, held bool, deadline time.Time, job *batchv1.Job) (string, error) {
	parts := make([]string, 0, len(troubles))
	for i, t := range troubles {
		if i == names.MaxListed {
			parts = append(parts, fmt.Sprintf("and %d more", len(troubles)-i))
			break
		}
		parts = append(parts, "VM "+t.VM+": "+troubleStory(t.Trouble))
	}
	msg := "live migration failing: " + strings.Join(parts, "; ")
	switch {
	case s.Plan.IsPaused():
		return msg + "; KubeVirt tries again (the plan is paused: the migration deadline waits)", nil
	case !held:
		return fmt.Sprintf("%s; KubeVirt tries again; the node is held for your choice at %s", msg, timestamp(deadline)), nil
	}
	choices := make([]string, 0, len(troubles))
	for i, t := range troubles {
		if i == names.MaxListed {
			break
		}
		choice, err := s.choices(ctx, t.VM, node)
		if err != nil {
			return "", err
		}
		choices = append(choices, choice)
	}
	msg = fmt.Sprintf("held since %s for your choice: %s; choose for each VM: %s", timestamp(deadline), msg, strings.Join(choices, "; "))
	if job != nil && job.Status.StartTime != nil {
		msg += fmt.Sprintf("; left alone, the node fails at %s, when its pre-drain Job stops waiting for the VMs", timestamp(job.Status.StartTime.Add(jobspec.EvacuationWait)))
	}
	return msg, nil
}

// troubleStory tells one VM's trouble, in times that do not move while
// nothing happens (a message that changes is a status write).
func troubleStory(t vmledger.Trouble) string {
	var what string
	if t.Stalled {
		what = fmt.Sprintf("migration %s has run %s without completing", t.Migration, t.Took.Round(time.Second))
	} else {
		what = fmt.Sprintf("migration %s failed at %s: %s", t.Migration, timestamp(t.Last), orNothing(t.Reason))
	}
	retried := ""
	if t.Retries > 0 {
		retried = fmt.Sprintf(", retried %d time(s)", t.Retries)
	}
	return fmt.Sprintf("%s (%d attempt(s)%s, since %s)", what, t.Attempts, retried, timestamp(t.Since))
}

// choices says how the operator can choose for a VM whose migration is
// held, and names an annotation set for another plan.
func (s *Scope) choices(ctx context.Context, vm, node string) (string, error) {
	ns, name, _ := strings.Cut(vm, "/")
	out := fmt.Sprintf("try its migration again (kubectl annotate vm %s -n %s %s=\"$(date +%%s)\" --overwrite) or shut it down now and start it after %s's upgrade (kubectl annotate vm %s -n %s %s=%s)",
		name, ns, v1beta1.AnnotationRetryMigration, node, name, ns, v1beta1.AnnotationShutdownForUpgrade, s.Plan.Name)
	v := &kubevirtv1.VirtualMachine{}
	found, err := s.get(ctx, ns, name, v)
	if err != nil || !found {
		return out, err
	}
	if got := v.Annotations[v1beta1.AnnotationShutdownForUpgrade]; got != "" && got != s.Plan.Name {
		out += fmt.Sprintf(" (its %s is %q, which names no running plan: set it to %s)", v1beta1.AnnotationShutdownForUpgrade, got, s.Plan.Name)
	}
	return out, nil
}

// troublesOf describes, for the failure of a node's pre-drain, the VMs whose
// migration failed and what the operator can choose before retrying.
func (s *Scope) troublesOf(ctx context.Context, node string) (string, error) {
	l, err := s.Ledgers.Read(ctx, s.Client, s.Plan.Name)
	if err != nil || l == nil {
		return "", err
	}
	troubles := l.Troubles(node)
	if len(troubles) == 0 {
		return "", nil
	}
	parts := make([]string, 0, len(troubles))
	for i, t := range troubles {
		if i == names.MaxListed {
			parts = append(parts, fmt.Sprintf("and %d more", len(troubles)-i))
			break
		}
		choice, err := s.choices(ctx, t.VM, node)
		if err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprintf("VM %s: %s; choose: %s", t.VM, troubleStory(t.Trouble), choice))
	}
	return "live migration failing: " + strings.Join(parts, "; "), nil
}

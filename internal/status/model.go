// Package status describes an UpgradePlan's progress for people and alerts:
// the time spent in each phase, every node's state and how long its upgrade
// took, what the plan waits for and since when, why it failed, and how long
// it has left. It is computed from the plan's status (FromPlan, pure) and
// completed from the cluster (Compute: warning events, the failed Job's log).
// The demo's live view and `upgrade-toolkit status` render the same model.
package status

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/window"
)

// Status is the progress of one plan at one moment.
type Status struct {
	Plan string `json:"plan"`
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Phase is status.currentPhase; Step the pipeline step it belongs to,
	// StepNumber its position (1-based) among Steps.
	Phase      string `json:"phase"`
	Step       string `json:"step,omitempty"`
	StepNumber int    `json:"stepNumber,omitempty"`
	Steps      int    `json:"steps"`
	// Elapsed is the time since the plan started (to its end once finished).
	Elapsed  metav1.Duration `json:"elapsed"`
	Phases   []PhaseTime     `json:"phases,omitempty"`
	Nodes    []Node          `json:"nodes,omitempty"`
	Waiting  *Waiting        `json:"waiting,omitempty"`
	Error    string          `json:"error,omitempty"`
	Warnings []Warning       `json:"warnings,omitempty"`
	Failure  *Failure        `json:"failure,omitempty"`
	// Aborted is how an aborted plan ended (spec.abort): where it
	// stopped, the nodes upgraded and not, and how to finish.
	Aborted  string    `json:"aborted,omitempty"`
	Estimate *Estimate `json:"estimate,omitempty"`
	// Logs says which logs of the upgrade could not be read to their end.
	Logs *Logs `json:"logs,omitempty"`
	// Stalled is the node or step that overran its estimate, if any.
	Stalled *Stall `json:"stalled,omitempty"`
	// Windows are the plan's maintenance windows, nil when it has none.
	Windows *Windows `json:"maintenanceWindows,omitempty"`
	// Insights are the plan's status.insights: what the toolkit sees
	// wrong now, most severe first.
	Insights []v1beta1.Insight `json:"insights,omitempty"`
	// Checks are the plan's status.checks: what it observed before it
	// called a step done.
	Checks []v1beta1.Check `json:"checks,omitempty"`
	// Failures are the plan's status.failures: every failure, oldest
	// first, and how it was retried.
	Failures []v1beta1.Failure `json:"failures,omitempty"`
	// VMs is the plan's VM ledger, nil when it has none.
	VMs *VMs `json:"vms,omitempty"`
}

// VMs is the plan's VM ledger: the VMs recorded, and one line for each VM
// something happened to (its whole record is in the ConfigMap named
// Ledger, and in the support bundle's vm-ledger.txt).
type VMs struct {
	Ledger   string `json:"ledger"`
	Recorded int    `json:"recorded"`
	// Changed are the VMs something happened to, at most maxVMs.
	Changed []VM `json:"changed,omitempty"`
	// More is how many more VMs something happened to.
	More int `json:"more,omitempty"`
}

// VM is one VM of the ledger: where it ran at the start and where it
// stands.
type VM struct {
	Name    string `json:"name"`
	Node    string `json:"node,omitempty"`
	Summary string `json:"summary"`
}

// Logs is what the capture of the upgrade's logs could not read: the
// UpgradeLog's logs let go before their end, and why.
type Logs struct {
	Incomplete int `json:"incomplete"`
	// Nodes are the nodes whose kubelets did not answer.
	Nodes []string `json:"nodes"`
	// Message is the UpgradeLog's condition Incomplete: each node, why and
	// since when.
	Message string `json:"message"`
}

// PhaseTime is the time a step took, or has taken so far while it runs.
type PhaseTime struct {
	Step     string          `json:"step"`
	Started  metav1.Time     `json:"started"`
	Duration metav1.Duration `json:"duration"`
	Running  bool            `json:"running,omitempty"`
}

// Node is one node's state. Upgrade is how long its own upgrade (drain, OS
// upgrade, reboot) took, or has taken so far while Upgrading.
type Node struct {
	Name      string           `json:"name"`
	State     string           `json:"state"`
	Since     *metav1.Time     `json:"since,omitempty"`
	Message   string           `json:"message,omitempty"`
	Upgrade   *metav1.Duration `json:"upgrade,omitempty"`
	Upgrading bool             `json:"upgrading,omitempty"`
	// VMs counts what the upgrade did to the node's VMs.
	VMs *v1beta1.NodeVMs `json:"vms,omitempty"`
	// ReplicasRebuilding is how many Longhorn replicas on the node are
	// being rebuilt.
	ReplicasRebuilding int32 `json:"replicasRebuilding,omitempty"`
}

// Waiting is what the plan waits for right now and since when.
type Waiting struct {
	For   string      `json:"for"`
	Since metav1.Time `json:"since"`
}

// Windows are the maintenance windows a node may begin its upgrade in
// (spec.nodeUpgradeOption.maintenanceWindows).
type Windows struct {
	// Windows says them, e.g. "Sat,Sun 22:00-04:00 Europe/Berlin".
	Windows string `json:"windows"`
	// NextOpen is when the next one opens while nodes wait for it
	// (status.nextMaintenanceWindow).
	NextOpen *metav1.Time `json:"nextOpen,omitempty"`
}

// Warning is a warning event about the plan.
type Warning struct {
	Time    metav1.Time `json:"time"`
	Reason  string      `json:"reason"`
	Message string      `json:"message"`
	Count   int32       `json:"count,omitempty"`
}

// Failure is why a plan failed: the message, and the failed Job with the
// last lines of its log when a Job failed.
type Failure struct {
	Message  string   `json:"message"`
	Job      string   `json:"job,omitempty"`
	Node     string   `json:"node,omitempty"`
	LogLines []string `json:"logLines,omitempty"`
	// Retry is the command that retries the plan from the failed step,
	// while a retry can cure the failure and the plan still awaits one.
	Retry string `json:"retry,omitempty"`
	// RetryDeadline is until when it can; then the plan is cleaned up.
	RetryDeadline *metav1.Time `json:"retryDeadline,omitempty"`
}

// Estimate is the time the plan has left and how it was reckoned.
type Estimate struct {
	Left metav1.Duration `json:"left"`
	// Method says what the estimate is made of, and what it leaves out.
	Method string `json:"method"`
}

// FromPlan computes what the plan's own status tells at time now.
// previous, if not nil, is an earlier plan that succeeded: its phase
// durations stand in for phases this plan has not measured yet.
func FromPlan(p *v1beta1.UpgradePlan, previous *v1beta1.UpgradePlan, now time.Time) *Status {
	st := &p.Status
	s := &Status{Plan: p.Name, Phase: string(st.CurrentPhase), Steps: len(pipeline.Steps)}
	if s.Phase == "" {
		s.Phase = "(not started)"
	}
	if st.PreviousVersion != nil {
		s.From = *st.PreviousVersion
	}
	if rm := st.ReleaseMetadata; rm != nil {
		s.To = rm.Harvester
	} else if p.Spec.Version != nil {
		s.To = *p.Spec.Version
	}
	if pos, ok := pipeline.Locate(st.CurrentPhase); ok {
		s.Step, s.StepNumber = pipeline.Steps[pos.Index].Name, pos.Index+1
	}
	end := now
	if h := st.PhaseTransitionTimestamps; len(h) > 0 {
		if p.IsFinished() {
			end = h[len(h)-1].PhaseTransitionTimestamp.Time
		}
		s.Elapsed = metav1.Duration{Duration: end.Sub(h[0].PhaseTransitionTimestamp.Time)}
	}
	s.Phases = phaseTimes(st, now)
	s.Nodes = nodes(st, now)
	if c := p.Condition(v1beta1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		s.Error = firstLine(c.Message)
	}
	c := p.Condition(v1beta1.ConditionProgressing)
	switch {
	case st.CurrentPhase == v1beta1.PhaseFailed && c != nil:
		msg := c.Message
		last := p.LastFailure()
		if last != nil && last.RetryDeadline != nil {
			// The hint the message ends with, shown on its own line.
			msg = strings.Replace(msg, "; "+RetryHint(p.Name, last.RetryDeadline.Time), "", 1)
		}
		s.Failure = failureOf(msg, s.Nodes)
		if p.AwaitsRetry() {
			s.Failure.Retry = RetryCommand(p.Name)
			s.Failure.RetryDeadline = last.RetryDeadline
		}
	case st.CurrentPhase == v1beta1.PhaseAborted && c != nil:
		s.Aborted = c.Message
	case !p.IsFinished() && c != nil && c.Message != "":
		s.Waiting = &Waiting{For: firstLine(c.Message), Since: waitingSince(st, c)}
	}
	if ws := p.MaintenanceWindows(); len(ws) > 0 {
		s.Windows = &Windows{Windows: window.Describe(ws), NextOpen: st.NextMaintenanceWindow}
	}
	s.Checks, s.Failures = st.Checks, st.Failures
	if !p.IsFinished() && st.CurrentPhase != "" {
		s.Estimate = estimate(s, previous, now)
		s.Stalled = stalled(p, s, previous, now)
		s.Insights = st.Insights
	}
	return s
}

// phaseTimes are the durations of the steps entered, in order; a step
// entered again by a retry appears once per attempt, the failed one ending
// when the plan failed.
func phaseTimes(st *v1beta1.UpgradePlanStatus, now time.Time) []PhaseTime {
	var out []PhaseTime
	h := st.PhaseTransitionTimestamps
	for i, t := range h {
		pos, ok := pipeline.Locate(t.Phase)
		if !ok || !pos.Active {
			continue
		}
		pt := PhaseTime{Step: pipeline.Steps[pos.Index].Name, Started: t.PhaseTransitionTimestamp}
		if i+1 < len(h) {
			pt.Duration.Duration = h[i+1].PhaseTransitionTimestamp.Sub(t.PhaseTransitionTimestamp.Time)
		} else {
			pt.Duration.Duration, pt.Running = now.Sub(t.PhaseTransitionTimestamp.Time), true
		}
		out = append(out, pt)
	}
	return out
}

// upgradedStates end a node's own upgrade: drained, upgraded, rebooted
// into the new release.
var upgradedStates = map[v1beta1.NodeUpgradeState]bool{
	v1beta1.NodeStatePostDrained: true, v1beta1.NodeStateSingleNodeUpgraded: true,
}

// NodeUpgradeTimes returns how long each node's upgrade took, for the nodes
// whose upgrade is recorded as done at a known time (done, keyed by node),
// and which node upgrades now, since when. Nodes upgrade one at a time, so
// a node's upgrade begins when the NodeUpgrade phase begins or the node
// before it finished, whichever is later, or once a wait for a
// maintenance window after that ended.
func NodeUpgradeTimes(st *v1beta1.UpgradePlanStatus, done map[string]time.Time) (took map[string]time.Duration, current string, since time.Time) {
	started, ok := pipeline.EnteredAt(st, v1beta1.PhaseNodeUpgrading)
	if !ok {
		return nil, "", time.Time{}
	}
	names := make([]string, 0, len(done))
	for n := range done {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return done[names[i]].Before(done[names[j]]) })
	took = map[string]time.Duration{}
	prev := started
	for _, n := range names {
		took[n] = done[n].Sub(begunAfter(st, prev, done[n]))
		prev = done[n]
	}
	for n, ns := range st.NodeUpgradeStatuses {
		if _, finished := done[n]; !finished && inUpgrade(ns.State) {
			current, since = n, begunAfter(st, prev, time.Time{})
		}
	}
	return took, current, since
}

// begunAfter is when the upgrade of the node after the one that finished
// at prev began: at prev, or, when the node upgrade then waited for a
// maintenance window with no node under way, as the wait ended; only
// waits that ended by until count (zero: any).
func begunAfter(st *v1beta1.UpgradePlanStatus, prev, until time.Time) time.Time {
	for _, w := range st.MaintenanceWindowWaits {
		if w.End != nil && w.End.After(prev) && (until.IsZero() || !w.End.After(until)) {
			prev = w.End.Time
		}
	}
	return prev
}

// inUpgrade reports whether a state is part of a node's own upgrade.
func inUpgrade(s v1beta1.NodeUpgradeState) bool {
	switch s {
	case v1beta1.NodeStatePreDraining, v1beta1.NodeStatePreDrained, v1beta1.NodeStatePostDraining,
		v1beta1.NodeStateWaitingReboot, v1beta1.NodeStateSingleNodeUpgrading:
		return true
	}
	return false
}

// Done reports whether a node's entry records the end of its upgrade (see
// DoneTimes).
func Done(ns v1beta1.NodeUpgradeStatus) bool {
	_, ok := doneAt(ns)
	return ok
}

// doneAt is when a node's upgrade ended: its upgradedAt, kept while its
// image cleanup goes on, or, from a manager that did not record it, the
// transition into PostDrained or SingleNodeUpgraded while the node is
// still in it.
func doneAt(ns v1beta1.NodeUpgradeStatus) (time.Time, bool) {
	switch {
	case ns.UpgradedAt != nil:
		return ns.UpgradedAt.Time, true
	case upgradedStates[ns.State] && ns.LastTransitionTime != nil:
		return ns.LastTransitionTime.Time, true
	}
	return time.Time{}, false
}

// DoneTimes are the times the status records for the end of each node's
// upgrade (doneAt).
func DoneTimes(st *v1beta1.UpgradePlanStatus) map[string]time.Time {
	done := map[string]time.Time{}
	for n, ns := range st.NodeUpgradeStatuses {
		if at, ok := doneAt(ns); ok {
			done[n] = at
		}
	}
	return done
}

func nodes(st *v1beta1.UpgradePlanStatus, now time.Time) []Node {
	took, current, since := NodeUpgradeTimes(st, DoneTimes(st))
	out := make([]Node, 0, len(st.NodeUpgradeStatuses))
	for n, ns := range st.NodeUpgradeStatuses {
		node := Node{Name: n, State: string(ns.State), Since: ns.LastTransitionTime, Message: firstLine(ns.Message), VMs: ns.VMs, ReplicasRebuilding: ns.ReplicasRebuilding}
		if d, ok := took[n]; ok {
			node.Upgrade = &metav1.Duration{Duration: d}
		} else if n == current {
			node.Upgrade, node.Upgrading = &metav1.Duration{Duration: now.Sub(since)}, true
		}
		out = append(out, node)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// waitingSince is since when the plan waits for what it waits for now: the
// latest of its entering the phase, the last move of a node, and the last
// change of its Progressing condition.
func waitingSince(st *v1beta1.UpgradePlanStatus, c *metav1.Condition) metav1.Time {
	since := c.LastTransitionTime
	if t, ok := pipeline.EnteredAt(st, st.CurrentPhase); ok && t.After(since.Time) {
		since = metav1.NewTime(t)
	}
	for _, ns := range st.NodeUpgradeStatuses {
		if ns.LastTransitionTime != nil && ns.LastTransitionTime.After(since.Time) {
			since = *ns.LastTransitionTime
		}
	}
	return since
}

// The shape of a Job failure in a plan's failure message (phase.jobFailure).
var (
	failedJob   = regexp.MustCompile(`Job ([a-z0-9-]+/[a-z0-9.-]+) failed`)
	logLinesTag = "; last log lines:\n"
	seeWhole    = "\nsee `kubectl"
)

// RetryCommand is the command that retries plan from its failed step.
func RetryCommand(plan string) string {
	return fmt.Sprintf("kubectl annotate upgradeplan %s %s=\"$(date +%%s)\" --overwrite", plan, v1beta1.AnnotationRetry)
}

// RetryHint is what the failure message of a plan that may be retried
// adds: how to retry, and until when.
func RetryHint(plan string, until time.Time) string {
	return fmt.Sprintf("fix the cause, then retry from the failed step: %s "+
		"(until %s; then, or when the plan is deleted, everything it changed is cleaned up)",
		RetryCommand(plan), until.UTC().Format(time.RFC3339))
}

// failureOf reads a failure message: the failed Job, its node (the node in
// a failed state) and the log lines the message quotes.
func failureOf(msg string, ns []Node) *Failure {
	f := &Failure{Message: msg}
	if m := failedJob.FindStringSubmatch(msg); m != nil {
		f.Job = m[1]
	}
	if i := strings.Index(msg, logLinesTag); i >= 0 {
		logs := msg[i+len(logLinesTag):]
		if j := strings.Index(logs, seeWhole); j >= 0 {
			logs = logs[:j]
		}
		f.LogLines = strings.Split(logs, "\n")
		f.Message = msg[:i]
	} else if j := strings.Index(msg, seeWhole); j >= 0 {
		f.Message = msg[:j]
	}
	for _, n := range ns {
		if v1beta1.NodeUpgradeState(n.State).IsFailure() {
			f.Node = n.Name
		}
	}
	return f
}

// estimate reckons the time left: the nodes still to upgrade at the mean
// time of the node upgrades that finished (less what the current one has
// taken), and each step still to run at the time it took in the previous
// successful plan. Steps measured nowhere are named, not guessed.
func estimate(s *Status, previous *v1beta1.UpgradePlan, now time.Time) *Estimate {
	var prevTook map[string]time.Duration
	if previous != nil {
		prevTook = map[string]time.Duration{}
		for _, pt := range phaseTimes(&previous.Status, now) {
			prevTook[pt.Step] = pt.Duration.Duration
		}
	}
	var left time.Duration
	var parts, unknown []string
	for i, step := range pipeline.Steps {
		if i+1 < s.StepNumber || (i+1 == s.StepNumber && !isActive(s.Phase)) {
			continue
		}
		var spent time.Duration
		if i+1 == s.StepNumber && len(s.Phases) > 0 {
			spent = s.Phases[len(s.Phases)-1].Duration.Duration
		}
		if step.Name == v1beta1.StepNodeUpgrade {
			if d, how, ok := nodesLeft(s, now); ok {
				left += d
				parts = append(parts, how)
				continue
			}
		}
		if d, ok := prevTook[step.Name]; ok {
			left += max(d-spent, 0)
			parts = append(parts, fmt.Sprintf("%s %s as in %s", step.Name, round(max(d-spent, 0)), previous.Name))
			continue
		}
		unknown = append(unknown, step.Name)
	}
	if len(parts) == 0 {
		return nil
	}
	if w := s.Windows; w != nil && w.NextOpen != nil && w.NextOpen.After(now) {
		// The nodes wait for it first; a window that closes again before
		// they are done is not counted.
		left += w.NextOpen.Sub(now)
		parts = append(parts, fmt.Sprintf("%s until the next maintenance window", round(w.NextOpen.Sub(now))))
	}
	method := strings.Join(parts, " + ")
	if len(unknown) > 0 {
		method += "; not measured yet: " + strings.Join(unknown, ", ")
	}
	return &Estimate{Left: metav1.Duration{Duration: left}, Method: method}
}

func isActive(phase string) bool {
	pos, ok := pipeline.Locate(v1beta1.UpgradePlanPhase(phase))
	return ok && pos.Active
}

// nodesLeft is the time the node upgrades still need, from the mean of
// those that finished.
func nodesLeft(s *Status, now time.Time) (time.Duration, string, bool) {
	var sum, spent time.Duration
	finished, waiting := 0, 0
	for _, n := range s.Nodes {
		switch {
		case n.Upgrading:
			spent = n.Upgrade.Duration
			waiting++
		case n.Upgrade != nil:
			sum += n.Upgrade.Duration
			finished++
		default:
			waiting++
		}
	}
	if finished == 0 {
		return 0, "", false
	}
	mean := sum / time.Duration(finished)
	d := max(mean*time.Duration(waiting)-spent, 0)
	return d, fmt.Sprintf("%d node(s) left × %s per node (mean of %d finished) - %s spent on the current one",
		waiting, round(mean), finished, round(spent)), true
}

func round(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

package metrics

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/status"
)

// The upgrade's metrics. The durations and failures are observed by the
// manager as it writes the transition (Record); the state of each plan is
// read from the plans at every scrape (Collector), so it survives restarts
// of the manager.
const (
	PhaseDurationName       = "upgrade_toolkit_phase_duration_seconds"
	NodeUpgradeDurationName = "upgrade_toolkit_node_upgrade_duration_seconds"
	FailuresName            = "upgrade_toolkit_failures_total"
	PlanPhaseName           = "upgrade_toolkit_plan_phase"
	PlanNodesName           = "upgrade_toolkit_plan_nodes"
	SinceProgressName       = "upgrade_toolkit_plan_seconds_since_progress"
	NodeStateSecondsName    = "upgrade_toolkit_node_state_seconds"
	IncompleteLogsName      = "upgrade_toolkit_upgrade_logs_incomplete_total"
	InsightName             = "upgrade_toolkit_insight"
	InsightSecondsName      = "upgrade_toolkit_insight_seconds"
	PlanInfoName            = "upgrade_toolkit_plan_info"
	PlanPausedName          = "upgrade_toolkit_plan_paused"
	PlanRetriesName         = "upgrade_toolkit_plan_retries"
	PlanNextWindowName      = "upgrade_toolkit_plan_next_maintenance_window_timestamp_seconds"
)

// durationBuckets span seconds (a simulated phase) to hours (an ISO
// download on a slow link, a node with many VMs to move).
var durationBuckets = prometheus.ExponentialBuckets(1, 2, 16)

var (
	phaseDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    PhaseDurationName,
		Help:    "Time an UpgradePlan spent in each phase it completed.",
		Buckets: durationBuckets,
	}, []string{"plan", "phase"})
	nodeUpgradeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    NodeUpgradeDurationName,
		Help:    "Time each node's upgrade took (drain, OS upgrade, reboot into the new release).",
		Buckets: durationBuckets,
	}, []string{"plan"})
	failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: FailuresName,
		Help: "UpgradePlans that failed, by the phase they failed in and the type of the Job that failed (none when no Job did).",
	}, []string{"plan", "phase", "job_type"})
	incompleteLogs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: IncompleteLogsName,
		Help: "Containers' logs the log capture let go before it could read them to their end, by why (the reasons of UpgradeLog status.logs[].incomplete: KubeletUnreachable, KubeletTimeout, LogNotFound, ReadFailed).",
	}, []string{"reason"})
)

// CountIncompleteLog counts a log the capture let go before its end.
func CountIncompleteLog(reason string) { incompleteLogs.WithLabelValues(reason).Inc() }

// plans is the collector of the plans' state in the process's registry.
var plans = &Collector{Now: time.Now}

var registerOnce sync.Once

// Register adds the upgrade's metrics to the registry the manager serves
// (once per process), reading the plans' state from reader at each scrape:
// the cache of the newest manager, as a process may build more than one.
func Register(reader client.Reader) error {
	plans.setReader(reader)
	var err error
	registerOnce.Do(func() {
		for _, c := range []prometheus.Collector{phaseDuration, nodeUpgradeDuration, failures, incompleteLogs, plans} {
			if err = ctrlmetrics.Registry.Register(c); err != nil {
				return
			}
		}
	})
	return err
}

// Forget deletes the series Record made for a plan, once the plan is gone:
// a deleted plan's durations and failures are not reported for ever. (The
// plans' state is read at each scrape and goes with the plan by itself.)
func Forget(plan string) {
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{phaseDuration, nodeUpgradeDuration, failures} {
		v.DeletePartialMatch(prometheus.Labels{"plan": plan})
	}
}

// Record observes what the write of a plan's status moved from stored to
// written: the phases it completed, the node upgrades it finished and its
// failure. Called once the write succeeded, a transition is observed once,
// by the manager that made it.
func Record(stored, written *v1beta1.UpgradePlan) {
	before, after := stored.Status.PhaseTransitionTimestamps, written.Status.PhaseTransitionTimestamps
	for i := len(before); i < len(after); i++ {
		if i == 0 {
			continue
		}
		prev, cur := after[i-1], after[i]
		step, inStep := pipeline.StepOf(prev.Phase)
		switch {
		case cur.Phase == v1beta1.PhaseFailed:
			// In a step, or at the gate after it.
			where := string(prev.Phase)
			if inStep {
				where = step.Name
			}
			failures.WithLabelValues(written.Name, where, failedJobType(step, &written.Status)).Inc()
		case inStep && prev.Phase == step.Active && cur.Phase == step.Completed:
			phaseDuration.WithLabelValues(written.Name, step.Name).Observe(cur.PhaseTransitionTimestamp.Sub(prev.PhaseTransitionTimestamp.Time).Seconds())
		}
	}
	// Most writes end no node's upgrade: then the times of all, which cost
	// a pass over every node and a sort, are not needed.
	if !endsANode(stored, written) {
		return
	}
	wasDone := status.DoneTimes(&stored.Status)
	done := status.DoneTimes(&written.Status)
	took, _, _ := status.NodeUpgradeTimes(&written.Status, done)
	for n := range done {
		if _, was := wasDone[n]; !was {
			nodeUpgradeDuration.WithLabelValues(written.Name).Observe(took[n].Seconds())
		}
	}
}

// endsANode reports whether written records the end of a node's upgrade
// that stored does not.
func endsANode(stored, written *v1beta1.UpgradePlan) bool {
	for n, ns := range written.Status.NodeUpgradeStatuses {
		if status.Done(ns) && !status.Done(stored.Status.NodeUpgradeStatuses[n]) {
			return true
		}
	}
	return false
}

// failedJobTypes name the Job whose failure a node's failed state records.
var failedJobTypes = map[v1beta1.NodeUpgradeState]string{
	v1beta1.NodeStateImagePreloadFailed:      "image-preload",
	v1beta1.NodeStatePreDrainFailed:          v1beta1.JobTypePreDrain,
	v1beta1.NodeStatePostDrainFailed:         v1beta1.JobTypePostDrain,
	v1beta1.NodeStateSingleNodeUpgradeFailed: v1beta1.JobTypeSingleNodeUpgrade,
	v1beta1.NodeStateImageCleanFailed:        "image-cleanup",
}

// failedJobType is the type of the Job that failed the plan: a node's, or
// the cluster upgrade's; "none" when the plan failed for another reason.
func failedJobType(step pipeline.Step, st *v1beta1.UpgradePlanStatus) string {
	for _, ns := range st.NodeUpgradeStatuses {
		if t, ok := failedJobTypes[ns.State]; ok {
			return t
		}
	}
	if step.Name == v1beta1.StepClusterUpgrade {
		if c := apimeta.FindStatusCondition(st.Conditions, v1beta1.ConditionProgressing); c != nil && strings.Contains(c.Message, ": Job ") {
			return "cluster-upgrade"
		}
	}
	return "none"
}

var (
	planPhaseDesc = prometheus.NewDesc(PlanPhaseName,
		"1 for the phase each UpgradePlan is in (status.currentPhase).", []string{"plan", "phase"}, nil)
	planNodesDesc = prometheus.NewDesc(PlanNodesName,
		"Nodes of each UpgradePlan by state.", []string{"plan", "state"}, nil)
	sinceProgressDesc = prometheus.NewDesc(SinceProgressName,
		"Seconds since an unfinished, unpaused UpgradePlan last moved: changed phase or moved a node.", []string{"plan"}, nil)
	nodeStateSecondsDesc = prometheus.NewDesc(NodeStateSecondsName,
		"Seconds each node of an unfinished UpgradePlan has been in its state.", []string{"plan", "node", "state"}, nil)
	insightDesc = prometheus.NewDesc(InsightName,
		"1 for each insight of an UpgradePlan (status.insights): a problem the toolkit sees, by type, level and impact; its first object names where.",
		[]string{"plan", "type", "level", "impact", "object"}, nil)
	insightSecondsDesc = prometheus.NewDesc(InsightSecondsName,
		"Seconds since the toolkit first saw each insight of an UpgradePlan.", []string{"plan", "type", "object"}, nil)
	planInfoDesc = prometheus.NewDesc(PlanInfoName,
		"1 for each UpgradePlan whose versions are known: the Harvester version it upgrades from and the one it upgrades to.",
		[]string{"plan", "from_version", "to_version"}, nil)
	planPausedDesc = prometheus.NewDesc(PlanPausedName,
		"1 while an unfinished UpgradePlan is paused (spec.paused), else 0.", []string{"plan"}, nil)
	planRetriesDesc = prometheus.NewDesc(PlanRetriesName,
		"How many of an UpgradePlan's failures were retried (status.failures).", []string{"plan"}, nil)
	planNextWindowDesc = prometheus.NewDesc(PlanNextWindowName,
		"When the next maintenance window opens, as Unix time, while an unfinished UpgradePlan's nodes wait for one (status.nextMaintenanceWindow).",
		[]string{"plan"}, nil)
)

// scrapeTimeout bounds the read of the plans at a scrape.
const scrapeTimeout = 5 * time.Second

// Collector reports the state of every UpgradePlan, read at each scrape.
type Collector struct {
	Now    func() time.Time
	mu     sync.Mutex
	reader client.Reader
}

// NewCollector returns a collector reading the plans from reader.
func NewCollector(reader client.Reader, now func() time.Time) *Collector {
	return &Collector{Now: now, reader: reader}
}

func (c *Collector) setReader(r client.Reader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reader = r
}

// Describe sends the descriptions of the metrics.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{planPhaseDesc, planNodesDesc, sinceProgressDesc, nodeStateSecondsDesc, insightDesc, insightSecondsDesc,
		planInfoDesc, planPausedDesc, planRetriesDesc, planNextWindowDesc} {
		ch <- d
	}
}

// Collect reads the plans and sends their metrics; nothing when they
// cannot be read (the cache is not started yet).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	c.mu.Lock()
	reader, now := c.reader, c.Now()
	c.mu.Unlock()
	var list v1beta1.UpgradePlanList
	// Read only: the cache's own plans, not copies of every node's status.
	if reader == nil || reader.List(ctx, &list, client.UnsafeDisableDeepCopy) != nil {
		return
	}
	for _, p := range list.Items {
		if p.Status.CurrentPhase != "" {
			ch <- prometheus.MustNewConstMetric(planPhaseDesc, prometheus.GaugeValue, 1, p.Name, string(p.Status.CurrentPhase))
		}
		byState := map[v1beta1.NodeUpgradeState]int{}
		for _, ns := range p.Status.NodeUpgradeStatuses {
			byState[ns.State]++
		}
		for state, n := range byState {
			ch <- prometheus.MustNewConstMetric(planNodesDesc, prometheus.GaugeValue, float64(n), p.Name, string(state))
		}
		for _, in := range p.Status.Insights {
			object := ""
			if len(in.Objects) > 0 {
				object = in.Objects[0]
			}
			ch <- prometheus.MustNewConstMetric(insightDesc, prometheus.GaugeValue, 1, p.Name, in.Type, string(in.Level), string(in.Impact), object)
			ch <- prometheus.MustNewConstMetric(insightSecondsDesc, prometheus.GaugeValue, now.Sub(in.Since.Time).Seconds(), p.Name, in.Type, object)
		}
		if from, to := planVersions(&p); from != "" && to != "" {
			ch <- prometheus.MustNewConstMetric(planInfoDesc, prometheus.GaugeValue, 1, p.Name, from, to)
		}
		retried := 0
		for _, f := range p.Status.Failures {
			if f.RetriedAt != nil {
				retried++
			}
		}
		if retried > 0 {
			ch <- prometheus.MustNewConstMetric(planRetriesDesc, prometheus.GaugeValue, float64(retried), p.Name)
		}
		if p.IsFinished() || !p.IsStarted() {
			continue
		}
		paused := 0.0
		if p.IsPaused() {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(planPausedDesc, prometheus.GaugeValue, paused, p.Name)
		if next := p.Status.NextMaintenanceWindow; next != nil {
			ch <- prometheus.MustNewConstMetric(planNextWindowDesc, prometheus.GaugeValue, float64(next.Unix()), p.Name)
		}
		last := time.Time{}
		if h := p.Status.PhaseTransitionTimestamps; len(h) > 0 {
			last = h[len(h)-1].PhaseTransitionTimestamp.Time
		}
		for node, ns := range p.Status.NodeUpgradeStatuses {
			if ns.LastTransitionTime == nil {
				continue
			}
			if ns.LastTransitionTime.After(last) {
				last = ns.LastTransitionTime.Time
			}
			ch <- prometheus.MustNewConstMetric(nodeStateSecondsDesc, prometheus.GaugeValue,
				now.Sub(ns.LastTransitionTime.Time).Seconds(), p.Name, node, string(ns.State))
		}
		if !p.IsPaused() {
			ch <- prometheus.MustNewConstMetric(sinceProgressDesc, prometheus.GaugeValue, now.Sub(last).Seconds(), p.Name)
		}
	}
}

// planVersions are the Harvester versions a plan upgrades from and to, ""
// while not known yet.
func planVersions(p *v1beta1.UpgradePlan) (from, to string) {
	if v := p.Status.PreviousVersion; v != nil {
		from = *v
	}
	if rm := p.Status.ReleaseMetadata; rm != nil {
		to = rm.Harvester
	}
	return from, to
}

// Names are the names of the upgrade's series as queries see them: a
// histogram as its _bucket, _sum and _count series.
func Names() []string {
	var out []string
	for _, h := range []string{PhaseDurationName, NodeUpgradeDurationName} {
		out = append(out, h+"_bucket", h+"_sum", h+"_count")
	}
	return append(out, FailuresName, PlanPhaseName, PlanNodesName, SinceProgressName, NodeStateSecondsName, InsightName, InsightSecondsName,
		PlanInfoName, PlanPausedName, PlanRetriesName, PlanNextWindowName)
}

// SetNow sets the clock the plans' state is reported at (tests).
func SetNow(now func() time.Time) {
	plans.mu.Lock()
	defer plans.mu.Unlock()
	plans.Now = now
}

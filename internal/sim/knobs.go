package sim

import (
	"slices"
	"sync"
	"time"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
)

// Job types the Job runner tells apart: the management.harvesterhci.io/job-type
// label of node Jobs, else the upgrade-component label (cluster-upgrade, and
// the image-preload and image-cleanup SUC Jobs, which carry their Plan's
// labels).
const (
	JobImagePreload      = v1beta1.ComponentImagePreload
	JobClusterUpgrade    = v1beta1.ComponentClusterUpgrade
	JobPreDrain          = jobspec.PreDrain
	JobPostDrain         = jobspec.PostDrain
	JobSingleNodeUpgrade = jobspec.SingleNodeUpgrade
	JobRestoreVM         = jobspec.RestoreVM
	JobImageCleanup      = v1beta1.ComponentImageCleanup
)

// Timing holds how long each simulated step takes. The zero value makes every
// step instant, which is what benchmarks want; DemoTiming gives steps a person
// can watch.
type Timing struct {
	// ImportStep is the time between two progress updates of an ISO import
	// (the import reports 0, 25, 50, 75 and 100 percent).
	ImportStep time.Duration
	// Jobs is the least time a Job of each type runs, by job type.
	Jobs map[string]time.Duration
	// DrainStep is the time Rancher takes for each drain step (cordon,
	// drain, applying the new Kubernetes version, uncordon).
	DrainStep time.Duration
	// Reboot is how long a node stays NotReady while it reboots.
	Reboot time.Duration
	// Migration is how long a live migration takes.
	Migration time.Duration
	// ReplicaRebuild is how long a Longhorn volume stays degraded after the
	// node of one of its replicas came back.
	ReplicaRebuild time.Duration
	// ChartDeploy is how long Fleet takes to deploy a chart's new version,
	// and Harvester an add-on's.
	ChartDeploy time.Duration
	// MigrationBackoff is how long KubeVirt waits before it migrates an
	// instance again after its evacuation migration failed: 20 s in
	// KubeVirt, doubled after each further failure; zero waits not at all.
	MigrationBackoff time.Duration
	// MigrationAbort is how long KubeVirt lets a migration that does not
	// converge (MigrationFault.NeverConverges) run before it aborts it: its
	// completion timeout, 150 s per GiB of the VM's memory; zero never
	// aborts it.
	MigrationAbort time.Duration
	// DrainTimeout is how long Rancher's drain retries an eviction a
	// PodDisruptionBudget refuses before it reports the drain error (the
	// drain options' timeout, 600 s in Rancher when unset); 0 reports it at
	// the first refusal.
	DrainTimeout time.Duration
}

// DemoTiming returns step durations that make an upgrade visible to a person
// yet finish a 3-node upgrade in well under a minute.
func DemoTiming() Timing {
	return Timing{
		ImportStep: 300 * time.Millisecond,
		Jobs: map[string]time.Duration{
			JobImagePreload: time.Second, JobClusterUpgrade: 2 * time.Second,
			JobPreDrain: time.Second, JobPostDrain: time.Second, JobSingleNodeUpgrade: 2 * time.Second,
			JobRestoreVM: 500 * time.Millisecond, JobImageCleanup: 500 * time.Millisecond,
		},
		DrainStep:      300 * time.Millisecond,
		Reboot:         time.Second,
		Migration:      300 * time.Millisecond,
		ReplicaRebuild: 500 * time.Millisecond,
		ChartDeploy:    300 * time.Millisecond,
		DrainTimeout:   2 * time.Second,
	}
}

func (t Timing) job(jobType string) time.Duration { return t.Jobs[jobType] }

// JobFault makes Jobs of one type fail, on one node or on every node: their
// container fails, and the real Job controller fails the Job.
type JobFault struct {
	// Type is the job type (JobPreDrain, JobImagePreload, ...).
	Type string
	// Node limits the fault to the Job of one node; empty means every Job of
	// the type (cluster-upgrade Jobs have no node).
	Node string
	// Reason is how the Job fails: BackoffLimitExceeded (default), its
	// container failing every time, or DeadlineExceeded, its container
	// never ending until the Job's active deadline.
	Reason string
	// ExitCode is the failed container's exit code (default 1, a failure
	// the Job controller retries with backoff up to the backoff limit; the
	// toolkit's Jobs fail at once on jobspec.PermanentExitCodes).
	ExitCode int32
	// Message is what the failed command printed: its termination message.
	Message string
	// Delay is how long a slow Job (FaultSet.SlowJobs) runs at least.
	Delay time.Duration
}

// ImportFault makes the import of VirtualMachineImages fail.
type ImportFault struct {
	// Image limits the fault to one VirtualMachineImage (namespace/name or
	// name); empty means every image.
	Image string
	// Message is the importer's error, as CDI reports it.
	Message string
}

// FaultSet is the set of faults injected into the simulated cluster. Some
// make a step fail; the others make a step report success while its effect
// is missing, which the toolkit must catch itself.
type FaultSet struct {
	// FailJobs lists Jobs that fail instead of doing their work.
	FailJobs []JobFault
	// EmptyJobs lists Jobs that exit 0 having done nothing (Reason and
	// Message are not used).
	EmptyJobs []JobFault
	// SlowJobs lists Jobs that take longer than their Timing: each runs for
	// at least its Delay (Reason, ExitCode and Message are not used), as a
	// slow disk or a slow mirror makes a real one do.
	SlowJobs []JobFault
	// FailImport, when set, makes ISO imports fail.
	FailImport *ImportFault
	// NeverReturn lists nodes that go NotReady on reboot and never come back.
	NeverReturn []string
	// Outages are nodes that go down while another node reboots for its
	// upgrade: a power loss or a crashed host the upgrade did not cause.
	Outages []Outage
	// StuckVersion: Harvester never reports the new version in its
	// server-version Setting, although Fleet deployed the new chart (the new
	// harvester pods never become ready).
	StuckVersion bool
	// FallbackBoot lists nodes that come back from their reboot on the OS
	// image they ran before (the bootloader's fallback entry), with a new
	// boot ID.
	FallbackBoot []string
	// PlanNeverApplies lists nodes whose RKE2 plan Rancher's agent never
	// applies: Rancher drains the node, then waits for the plan forever.
	PlanNeverApplies []string
	// KubeletStaysOld lists nodes whose agent reports the RKE2 plan applied
	// while the kubelet keeps its old version.
	KubeletStaysOld []string
	// Unresponsive lists components that stop reacting to the cluster
	// upgrade (ComponentFleet, ComponentAddons, ...).
	Unresponsive []string
	// KubeletsRefuse lists nodes whose kubelet the API server cannot reach:
	// every connection to it is closed before a byte is exchanged, so the
	// API server answers each log, stats or configz request through it with
	// an error. What an operator meets when a node is down, when port 10250
	// is filtered between the control plane and a node (a REJECT rule), or
	// when the kubelet's serving certificate cannot be verified.
	KubeletsRefuse []string
	// KubeletsHang lists nodes whose kubelet accepts connections and never
	// answers (a firewall that drops packets): a request through it waits
	// until its client gives up.
	KubeletsHang []string
	// Migrations make the live migrations of some VMs fail or never
	// converge.
	Migrations []MigrationFault
	// ForcedDrain lists VMs (namespace/name) that someone force-drains off
	// their node as it starts to drain for the upgrade, before KubeVirt
	// migrates them (kubectl drain --disable-eviction): the virt-launcher
	// pod is deleted, its SIGTERM shuts the guest down and the instance ends
	// Succeeded; KubeVirt then starts an Always VM again, not a
	// RerunOnFailure one (Harvester's default), which stays off.
	ForcedDrain []string
	// OwnerStops lists VMs (namespace/name) their owner stops from
	// Harvester's UI as their node starts to drain for the upgrade:
	// Harvester's API server sets spec.runStrategy Halted (field manager
	// "harvester").
	OwnerStops []string
}

// MigrationFault makes the live migrations of one VM go wrong.
type MigrationFault struct {
	// VM is namespace/name.
	VM string
	// Failures is how many of its migrations fail before one succeeds; a
	// negative number fails every one.
	Failures int
	// NeverConverges: its migrations run and never complete (a guest that
	// dirties memory faster than it is sent), until KubeVirt aborts them at
	// Timing.MigrationAbort (never when zero) or someone deletes them.
	NeverConverges bool
	// Reason is a failure's reason (default: an error of libvirt's
	// migration, as virt-handler reports it).
	Reason string
}

// Outage takes a node down when another one powers off for its upgrade's
// reboot. The node stops like a powered-off machine (its kubelet stops
// posting status, so the node-lifecycle controller marks it NotReady and
// taints it) and, For later, boots again on the OS it ran, with a new boot
// ID.
type Outage struct {
	// Node is the node that goes down.
	Node string
	// During is the node whose reboot takes it down.
	During string
	// For is how long it stays down; 0 keeps it down while the outage is in
	// the fault set (a test lifts it with SetFaults).
	For time.Duration
}

// Components FaultSet.Unresponsive can stop.
const (
	// ComponentFleet never deploys a Bundle's new generation.
	ComponentFleet = "fleet"
	// ComponentFleetAgent never redeploys Fleet's agent.
	ComponentFleetAgent = "fleet-agent"
	// ComponentAddons: Harvester's add-on controller never redeploys an
	// add-on.
	ComponentAddons = "addons"
	// ComponentKubeVirt: virt-operator never reaches the new version.
	ComponentKubeVirt = "kubevirt"
	// ComponentLonghorn: Longhorn's manager never rolls out again.
	ComponentLonghorn = "longhorn"
)

// faults guards the fault set, which tests and the demo may change while the
// simulation runs.
type faults struct {
	mu  sync.RWMutex
	set FaultSet
}

func (f *faults) replace(set FaultSet) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = set
}

func (f *faults) job(jobType, node string) *JobFault {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return matchJob(f.set.FailJobs, jobType, node)
}

// jobTime is how long a Job of the type runs on the node at least: its
// Timing, or longer when it is one of the slow Jobs.
func (f *faults) jobTime(t Timing, jobType, node string) time.Duration {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if slow := matchJob(f.set.SlowJobs, jobType, node); slow != nil {
		return max(slow.Delay, t.job(jobType))
	}
	return t.job(jobType)
}

// emptyJob reports whether the Job exits 0 without doing its work.
func (f *faults) emptyJob(jobType, node string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return matchJob(f.set.EmptyJobs, jobType, node) != nil
}

func matchJob(faults []JobFault, jobType, node string) *JobFault {
	for _, jf := range faults {
		if jf.Type == jobType && (jf.Node == "" || jf.Node == node) {
			out := jf
			return &out
		}
	}
	return nil
}

func (f *faults) importFault(namespace, name string) *ImportFault {
	f.mu.RLock()
	defer f.mu.RUnlock()
	imp := f.set.FailImport
	if imp == nil || (imp.Image != "" && imp.Image != name && imp.Image != namespace+"/"+name) {
		return nil
	}
	out := *imp
	return &out
}

// migration returns the fault of a VM's migrations, nil when they go well.
func (f *faults) migration(vm string) *MigrationFault {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, m := range f.set.Migrations {
		if m.VM == vm {
			out := m
			return &out
		}
	}
	return nil
}

// snapshot returns the fault set as it is now.
func (f *faults) snapshot() FaultSet {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.set
}

func (f *faults) neverReturns(node string) bool {
	return f.nodeIn(func(s *FaultSet) []string { return s.NeverReturn }, node)
}

// outagesDuring are the nodes that go down when node powers off for its
// reboot.
func (f *faults) outagesDuring(node string) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for _, o := range f.set.Outages {
		if o.During == node {
			out = append(out, o.Node)
		}
	}
	return out
}

// outageLeft is how long a node down since since stays down: 0 once its
// time is up or its outage is no longer in the fault set.
func (f *faults) outageLeft(node string, since time.Time) time.Duration {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, o := range f.set.Outages {
		if o.Node != node {
			continue
		}
		if o.For == 0 {
			// Look again later: a test may lift the fault.
			return time.Second
		}
		return max(time.Until(since.Add(o.For)), 0)
	}
	return 0
}

func (f *faults) unresponsive(component string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Contains(f.set.Unresponsive, component)
}

func (f *faults) fallsBack(node string) bool {
	return f.nodeIn(func(s *FaultSet) []string { return s.FallbackBoot }, node)
}

func (f *faults) planNeverApplies(node string) bool {
	return f.nodeIn(func(s *FaultSet) []string { return s.PlanNeverApplies }, node)
}

func (f *faults) kubeletStaysOld(node string) bool {
	return f.nodeIn(func(s *FaultSet) []string { return s.KubeletStaysOld }, node)
}

func (f *faults) kubeletRefuses(node string) bool {
	return f.nodeIn(func(s *FaultSet) []string { return s.KubeletsRefuse }, node)
}

func (f *faults) kubeletHangs(node string) bool {
	return f.nodeIn(func(s *FaultSet) []string { return s.KubeletsHang }, node)
}

func (f *faults) versionStuck() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.set.StuckVersion
}

// nodeIn reports whether the node is in one of the fault set's node lists.
func (f *faults) nodeIn(list func(*FaultSet) []string, node string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Contains(list(&f.set), node)
}

// stepClock remembers when a timed step began, so that a reconciler can wait
// out a step's duration with RequeueAfter instead of blocking.
type stepClock struct {
	mu      sync.Mutex
	started map[string]time.Time
}

// remaining returns how long step key still runs, starting its clock on the
// first call; it stays 0 once the time passed, until forget restarts the step.
func (c *stepClock) remaining(key string, d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil {
		c.started = map[string]time.Time{}
	}
	start, ok := c.started[key]
	if !ok {
		c.started[key] = time.Now()
		return d
	}
	return max(d-time.Since(start), 0)
}

// forget ends step key, so that it starts again on the next remaining.
func (c *stepClock) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.started, key)
}

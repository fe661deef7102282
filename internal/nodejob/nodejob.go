// Package nodejob is what the node Jobs of an upgrade do, as Go code: the
// steps of Harvester's upgrade_node.sh for `upgrade-toolkit node <type>`.
// Kubernetes-side steps go through the API; host-side steps go through a
// host.Host. Every step can run again: a Job whose pod restarts (or a
// simulator that reruns a job) resumes where the last attempt stopped.
package nodejob

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/helper"
	"github.com/harvester/upgrade-toolkit/internal/host"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// Timeouts bound the waits of the node jobs; each must end well within the
// Job's own deadline, so that the Job fails with the wait's message rather
// than the Job controller's.
type Timeouts struct {
	// Repo: the upgrade repo serves the release.
	Repo time.Duration
	// Longhorn: every running volume can lose this node's replica.
	Longhorn time.Duration
	// Evacuation: every VM has left the node.
	Evacuation time.Duration
	// PDB: KubeVirt's evacuation PodDisruptionBudgets are gone.
	PDB time.Duration
	// Kubelet: the node runs the new RKE2.
	Kubelet time.Duration
	// Bundles: Fleet's bundles are ready before a single node's RKE2 is
	// upgraded; reported, not blocking.
	Bundles time.Duration
	// Interval is the time between two checks of a wait.
	Interval time.Duration
}

// DefaultTimeouts fit the node Jobs' two-hour deadline.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		Repo:       10 * time.Minute,
		Longhorn:   30 * time.Minute,
		Evacuation: jobspec.EvacuationWait,
		PDB:        10 * time.Minute,
		Kubelet:    30 * time.Minute,
		Bundles:    3 * time.Minute,
		Interval:   5 * time.Second,
	}
}

// Job is one node job of one plan on one node.
type Job struct {
	// Client must read from the API server, not from a cache: the job
	// acts on what other components just wrote.
	Client client.Client
	// Host acts on the node.
	Host host.Host
	// Power stops VMs (default: helper.RunStrategyPower).
	Power helper.VMPower
	// Plan, Node and Pod name the UpgradePlan, the node and the job's own
	// pod (the reboot waits for its container).
	Plan, Node, Pod string
	// RepoURL is the repo's base URL (default: the repo Service of the plan).
	RepoURL string
	// Timeouts bound the waits (DefaultTimeouts when zero).
	Timeouts Timeouts
}

// FromEnv fills Plan, Node and Pod from a job pod's environment: the
// toolkit's variables, else system-upgrade-controller's for the node and
// pod.
func (j *Job) FromEnv(getenv func(string) string) error {
	first := func(keys ...string) string {
		for _, k := range keys {
			if v := getenv(k); v != "" {
				return v
			}
		}
		return ""
	}
	j.Plan = first(jobspec.EnvPlan)
	j.Node = first(jobspec.EnvNode, jobspec.EnvSUCNode)
	j.Pod = first(jobspec.EnvPod, jobspec.EnvSUCPod)
	var missing []error
	if j.Plan == "" {
		missing = append(missing, fmt.Errorf("%s is not set: the job does not know its UpgradePlan", jobspec.EnvPlan))
	}
	if j.Node == "" {
		missing = append(missing, fmt.Errorf("neither %s nor %s is set: the job does not know its node", jobspec.EnvNode, jobspec.EnvSUCNode))
	}
	return errors.Join(missing...)
}

// Run runs the job of the given type.
func (j *Job) Run(ctx context.Context, jobType string) error {
	steps, ok := map[string]func() []step{
		jobspec.Prepare:           j.prepareSteps,
		jobspec.PreDrain:          j.preDrainSteps,
		jobspec.PostDrain:         j.postDrainSteps,
		jobspec.SingleNodeUpgrade: j.singleNodeSteps,
		jobspec.ImageCleanup:      j.imageCleanupSteps,
	}[jobType]
	if !ok {
		return fmt.Errorf("unknown node job type %q: use one of %v", jobType, jobspec.NodeTypes)
	}
	if j.Plan == "" || j.Node == "" {
		return fmt.Errorf("node %s job: the plan and the node must be named", jobType)
	}
	if j.Timeouts == (Timeouts{}) {
		j.Timeouts = DefaultTimeouts()
	}
	if j.Power == nil {
		j.Power = helper.RunStrategyPower{Client: j.Client}
	}
	logger := log.FromContext(ctx).WithValues("job", jobType, "plan", j.Plan, "node", j.Node)
	ctx = log.IntoContext(ctx, logger)
	s := &state{}
	for _, st := range steps() {
		start := time.Now()
		logger.Info("step started", "step", st.name)
		if err := st.run(ctx, s); err != nil {
			return &StepError{Job: jobType, Node: j.Node, Step: st.name, Err: err}
		}
		logger.Info("step done", "step", st.name, "took", time.Since(start).Round(time.Millisecond).String())
	}
	return nil
}

// StepError is the failure of one step of a node job.
type StepError struct {
	Job, Node, Step string
	Err             error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("node %s on %s failed in step %q: %v", e.Job, e.Node, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// step is one named step of a job.
type step struct {
	name string
	run  func(context.Context, *state) error
}

// state carries what earlier steps of a run learnt.
type state struct {
	repo    *release.Client
	release *release.Release
	bundle  *release.BundleMetadata
	plan    *v1beta1.UpgradePlan
}

// repoURL is where the job reads the release from.
func (j *Job) repoURL() string {
	if j.RepoURL != "" {
		return j.RepoURL
	}
	return release.BaseURL(cluster.HarvesterNamespace, names.Repo(j.Plan))
}

// jobContainer is the container the reboot waits for.
func (j *Job) jobContainer() host.JobContainer {
	return host.JobContainer{Namespace: cluster.HarvesterNamespace, Pod: j.Pod, Container: names.JobContainer}
}

// readPlan reads the job's plan.
func (j *Job) readPlan(ctx context.Context, s *state) error {
	plan, err := helper.Plan(ctx, j.Client, j.Plan)
	if err != nil {
		return err
	}
	s.plan = plan
	return nil
}

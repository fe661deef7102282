package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
)

// Config is one chaos run.
type Config struct {
	// Seed draws every fault of the run.
	Seed uint64
	// Nodes is the size of the simulated cluster.
	Nodes int
	// Replicas of the manager (2: leader election hands over when the
	// leader is killed).
	Replicas int
	// Kills is the most SIGKILLs of the leader at random moments.
	Kills int
	// APIFaultRate is the share of the manager's API requests that fail.
	APIFaultRate float64
	// Outage: the API server is unreachable once, for a few seconds.
	Outage bool
	// Bin is the upgrade-toolkit binary the replicas run.
	Bin string
	// Logs receives the replicas' output.
	Logs io.Writer
	// Timeout bounds the run.
	Timeout time.Duration
}

// Faulty returns the chaos configuration of a seed: every kind of fault.
func Faulty(seed uint64, nodes int, bin string) Config {
	return Config{Seed: seed, Nodes: nodes, Replicas: 2, Kills: 3, APIFaultRate: 0.03, Outage: true, Bin: bin,
		Timeout: time.Duration(nodes)*30*time.Second + 3*time.Minute}
}

// Result is how one run went.
type Result struct {
	Config     Config
	Phase      v1beta1.UpgradePlanPhase
	Took       time.Duration
	Violations []string
	// Faults counts the injected faults by kind: the proxy's, "kill" (a
	// SIGKILL of the leader), "handover" (a kill while another replica
	// stood by) and "exit" (a replica that ended by itself).
	Faults map[string]int
	// Checks counts the states the invariant checker checked.
	Checks int
	Err    error
}

// OK reports whether the run Succeeded with every invariant held.
func (r Result) OK() bool {
	return r.Err == nil && r.Phase == v1beta1.PhaseSucceeded && len(r.Violations) == 0
}

// Run runs one whole simulated upgrade under the configured faults.
func Run(ctx context.Context, cfg Config) (res Result) {
	res = Result{Config: cfg, Faults: map[string]int{}}
	if cfg.Logs == nil {
		cfg.Logs = io.Discard
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	run, err := simrun.StartWorld(ctx, sim.Config{Nodes: cfg.Nodes})
	if err != nil {
		res.Err = fmt.Errorf("starting the simulated cluster: %w", err)
		return res
	}
	defer func() { res.Err = errors.Join(res.Err, run.Stop()) }()

	proxy, err := NewProxy(run.Env.Config, cfg.Seed, cfg.APIFaultRate)
	if err != nil {
		res.Err = err
		return res
	}
	defer func() { _ = proxy.Close() }()
	dir, err := os.MkdirTemp("", "chaos-")
	if err != nil {
		res.Err = err
		return res
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, proxy.Host()); err != nil {
		res.Err = err
		return res
	}
	replicas := NewReplicas(cfg.Bin, managerArgs(run.Sim.RepoURL("{namespace}", "{service}")),
		[]string{"KUBECONFIG=" + kubeconfig, "ENABLE_WEBHOOKS=false"}, cfg.Logs)
	replicas.Start(cfg.Replicas)
	defer replicas.Stop()

	start := time.Now()
	plan, err := run.CreatePlan(ctx, v1beta1.UpgradePlanSpec{}, nil)
	if err != nil {
		res.Err = err
		return res
	}
	sched := newSchedule(cfg)
	// A plan that failed waits for a retry that never comes: stop there.
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	final, err := run.WaitFinished(waitCtx, plan.Name, func(p *v1beta1.UpgradePlan) {
		if p.AwaitsRetry() {
			stopWaiting()
			return
		}
		sched.observe(p, replicas, proxy)
	})
	res.Took = time.Since(start)
	if final != nil {
		res.Phase = final.Status.CurrentPhase
		if final.AwaitsRetry() {
			err = nil
		}
	}
	for k, v := range proxy.Counts() {
		res.Faults[k] = v
	}
	kills, exits := replicas.Deaths()
	res.Faults["kill"], res.Faults["handover"], res.Faults["exit"] = kills, sched.handovers, exits-kills
	switch {
	case err != nil && final != nil:
		res.Err = fmt.Errorf("%w (last: %s)", err, describe(final))
	case err != nil:
		res.Err = err
	case res.Phase != v1beta1.PhaseSucceeded:
		res.Err = fmt.Errorf("the plan failed: %s", describe(final))
	}
	// The invariants are checked whatever the outcome, to say what went
	// wrong on the way.
	violations, err := run.Violations(context.Background(), plan.Name)
	if err != nil {
		res.Err = errors.Join(res.Err, err)
	}
	for _, v := range violations {
		res.Violations = append(res.Violations, v.String())
	}
	res.Checks = run.Checker.Checked()
	return res
}

// schedule decides, on every new state of the plan, whether to kill the
// leader or take the API server away, from the run's seed.
type schedule struct {
	cfg       Config
	rng       *rand.Rand
	lastKill  time.Time
	kills     int
	outage    bool
	handover  bool
	handovers int
}

func newSchedule(cfg Config) *schedule {
	return &schedule{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed+1)), outage: !cfg.Outage, handover: cfg.Replicas < 2}
}

// minKillSpacing keeps kills apart, so that a replica runs for a while in
// between.
const minKillSpacing = 3 * time.Second

func (s *schedule) observe(p *v1beta1.UpgradePlan, replicas *Replicas, proxy *Proxy) {
	if p.IsFinished() {
		return
	}
	// The handover: the leader is killed in the middle of a node, while a
	// standby waits for the lease.
	if !s.handover && slices.ContainsFunc(slices.Collect(maps.Values(p.Status.NodeUpgradeStatuses)), func(st v1beta1.NodeUpgradeStatus) bool {
		return st.State == v1beta1.NodeStatePostDraining || st.State == v1beta1.NodeStatePreDrained
	}) {
		if l := replicas.Leader(); l >= 0 && replicas.Kill(l) {
			s.handover, s.lastKill = true, time.Now()
			s.handovers++
		}
		return
	}
	if !s.outage && p.Status.CurrentPhase != "" && s.rng.Float64() < 0.05 {
		s.outage = true
		proxy.Outage(time.Duration(2+s.rng.IntN(5)) * time.Second)
		return
	}
	if s.kills < s.cfg.Kills && time.Since(s.lastKill) > minKillSpacing && s.rng.Float64() < 0.08 {
		if l := replicas.Leader(); l >= 0 && replicas.Kill(l) {
			s.kills++
			s.lastKill = time.Now()
		}
	}
}

// managerArgs are the replicas' flags: leader election with short leases
// (a killed leader is replaced within seconds), no metrics or probes, the
// simulated repo, and the envtest API server's short-lived certificate.
func managerArgs(repoURL string) []string {
	return []string{
		"manager", "--leader-elect", "--namespace", cluster.HarvesterNamespace,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s",
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--repo-url=" + repoURL, "--min-certs-expiration-days=1",
	}
}

// writeKubeconfig writes a kubeconfig that reaches the API server through
// the proxy.
func writeKubeconfig(path, host string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["chaos"] = &clientcmdapi.Cluster{Server: host}
	cfg.AuthInfos["chaos"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["chaos"] = &clientcmdapi.Context{Cluster: "chaos", AuthInfo: "chaos"}
	cfg.CurrentContext = "chaos"
	return clientcmd.WriteToFile(*cfg, path)
}

func describe(p *v1beta1.UpgradePlan) string {
	var nodes []string
	for n, st := range p.Status.NodeUpgradeStatuses {
		nodes = append(nodes, n+"="+string(st.State))
	}
	slices.Sort(nodes)
	msg := ""
	if c := p.Condition(v1beta1.ConditionProgressing); c != nil {
		msg = c.Message
	}
	return fmt.Sprintf("phase %s, nodes %s: %s", p.Status.CurrentPhase, strings.Join(nodes, " "), msg)
}

// Package simrun runs whole upgrades on one machine: an embedded control
// plane (etcd, kube-apiserver, kube-controller-manager and kube-scheduler,
// kwok for the nodes), the simulated Harvester cluster of
// internal/sim, and the toolkit's real manager, which can be killed and
// started again at any moment. The demo, the end-to-end tests and the
// benchmarks are built on it.
package simrun

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/manager"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
	"github.com/harvester/upgrade-toolkit/internal/upgradelog"
)

// EnvtestCertValidity is how long the embedded API server's certificate is
// valid; the toolkit must not ask for more, or its pre-flight check fails.
const EnvtestCertValidity = 24 * time.Hour

// Run is a running simulated upgrade.
type Run struct {
	Env     *testenv.Env
	Sim     *sim.Sim
	Checker *sim.Checker
	// Counter counts the toolkit manager's API requests.
	Counter *apicount.Counter
	// Client reads and writes as an administrator.
	Client client.Client

	phaseCfg *phase.Config
	logOpts  upgradelog.Options
	// managerConfig is who the manager runs as; nil is the administrator.
	managerConfig *rest.Config
	mu            sync.Mutex
	stop          context.CancelFunc
	done          chan error
	starts        int
}

// Start starts the control plane, builds the simulated cluster on it, and
// starts the toolkit's manager.
func Start(ctx context.Context, cfg sim.Config) (*Run, error) {
	r, err := StartWorld(ctx, cfg)
	if err != nil {
		return r, err
	}
	if err := r.StartManager(); err != nil {
		return r, errors.Join(err, r.Stop())
	}
	return r, nil
}

// StartWorld starts the control plane and builds the simulated cluster on
// it, without the toolkit's manager: for runs that start it themselves
// (StartManager, or its own processes).
func StartWorld(ctx context.Context, cfg sim.Config) (r *Run, err error) {
	env, err := testenv.StartWith(sim.WorldOptions())
	if err != nil {
		return nil, err
	}
	r = &Run{Env: env, Client: env.Client, Counter: apicount.New(), Checker: sim.NewChecker()}
	defer func() {
		if err != nil {
			_ = r.Stop()
		}
	}()
	if r.Sim, err = sim.Start(ctx, env.Config, cfg); err != nil {
		return r, fmt.Errorf("starting the simulated cluster: %w", err)
	}
	if err := r.Checker.Attach(ctx, r.Sim.Informers()); err != nil {
		return r, err
	}
	pc := phase.DefaultConfig()
	pc.Version = "v0.0.0-sim"
	pc.RepoURL = r.Sim.RepoURL
	pc.MinCertValidity = EnvtestCertValidity
	r.phaseCfg = &pc
	// Saved every second: a restart reads again at most that much.
	r.logOpts = upgradelog.Options{Enabled: true, Interval: time.Second}
	return r, nil
}

// PhaseConfig is the configuration the toolkit's manager runs with; change
// it before StartManager.
func (r *Run) PhaseConfig() *phase.Config { return r.phaseCfg }

// UpgradeLogOptions configure the manager's capture of the upgrade's logs
// (on by default, as in a real installation); change them before
// StartManager.
func (r *Run) UpgradeLogOptions() *upgradelog.Options { return &r.logOpts }

// RunManagerAs makes the manager, from its next start, run as cfg's user
// (e.g. a ServiceAccount bound to the generated roles, internal/rbactest).
func (r *Run) RunManagerAs(cfg *rest.Config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.managerConfig = cfg
}

// StartManager starts the toolkit's manager.
func (r *Run) StartManager() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop != nil {
		return errors.New("the manager is already running")
	}
	cfg := r.Env.Config
	if r.managerConfig != nil {
		cfg = r.managerConfig
	}
	mgr, err := manager.New(r.Counter.Wrap(cfg), manager.Options{MetricsAddr: "0", ProbeAddr: "0", Phase: r.phaseCfg, UpgradeLog: r.logOpts})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	r.stop, r.done = cancel, done
	r.starts++
	r.Checker.ManagerStarted(time.Now(), holdAllowance(r.logOpts))
	return nil
}

// holdSlack is what a pod's hold may last beyond the capture's bound in
// RulePodHeld: the retries within the bound, a pass's latency on a busy
// machine.
const holdSlack = 5 * time.Second

// holdAllowance is how long the manager may hold a pod being deleted.
func holdAllowance(o upgradelog.Options) time.Duration {
	bound := o.HoldBound
	if bound <= 0 {
		bound = upgradelog.DefaultHoldBound
	}
	return bound + holdSlack
}

// Restarts counts how often the manager was started again after the first
// start.
func (r *Run) Restarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(r.starts-1, 0)
}

// StopManager stops the toolkit's manager, as a crash would: whatever it
// was doing is cut short.
func (r *Run) StopManager() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop == nil {
		return nil
	}
	r.stop()
	err := <-r.done
	r.stop, r.done = nil, nil
	return err
}

// RestartManager stops the manager and starts a new one.
func (r *Run) RestartManager() error {
	if err := r.StopManager(); err != nil {
		return err
	}
	return r.StartManager()
}

// CreatePlan creates an UpgradePlan for the simulated release.
func (r *Run) CreatePlan(ctx context.Context, spec v1beta1.UpgradePlanSpec, annotations map[string]string) (*v1beta1.UpgradePlan, error) {
	if spec.Version == nil && spec.Image == nil {
		v := r.Sim.Config().To.Harvester
		spec.Version = &v
	}
	// The simulated cluster serves no admission webhook (internal/webhook's
	// tests judge admission on a real API server), and its scenarios build
	// risky worlds on purpose: by default a plan skips the checks of the
	// cluster's state as skip-webhook does, and so Initialize's second look.
	// A scenario that wants the risks judged passes skip-webhook "false".
	p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{GenerateName: "hvst-upgrade-",
		Annotations: map[string]string{v1beta1.AnnotationSkipWebhook: "true"}}, Spec: spec}
	maps.Copy(p.Annotations, annotations)
	if err := r.Client.Create(ctx, p); err != nil {
		return nil, fmt.Errorf("creating the UpgradePlan: %w", err)
	}
	return p, nil
}

// Plan reads a plan.
func (r *Run) Plan(ctx context.Context, name string) (*v1beta1.UpgradePlan, error) {
	p := &v1beta1.UpgradePlan{}
	return p, r.Client.Get(ctx, client.ObjectKey{Name: name}, p)
}

// WaitFinished waits until the plan reached Succeeded or Failed and released
// everything (its finalizer is gone), calling progress with every new state.
// It watches the plan rather than polling it: every read of a plan costs the
// API server the whole plan from etcd (about 100 KiB at 500 nodes), and a
// read every 20 ms was, at 500 nodes, a quarter of the API server's work.
func (r *Run) WaitFinished(ctx context.Context, name string, progress func(*v1beta1.UpgradePlan)) (*v1beta1.UpgradePlan, error) {
	wc, err := client.NewWithWatch(r.Env.Config, client.Options{Scheme: r.Client.Scheme()})
	if err != nil {
		return nil, err
	}
	var last *v1beta1.UpgradePlan
	finished := func(p *v1beta1.UpgradePlan) bool {
		if progress != nil && (last == nil || p.ResourceVersion != last.ResourceVersion) {
			progress(p)
		}
		last = p
		return p.IsFinished() && len(p.Finalizers) == 0
	}
	for {
		p, err := r.Plan(ctx, name)
		if err == nil {
			if finished(p) {
				return p, nil
			}
			var done bool
			if done, err = watchPlan(ctx, wc, name, p.ResourceVersion, finished); done {
				return last, nil
			}
		}
		if err != nil {
			// A transient error (the API server restarting, a deleted
			// plan): look again shortly.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			if last != nil {
				return last, fmt.Errorf("plan %s did not finish (phase %q): %w", name, last.Status.CurrentPhase, ctx.Err())
			}
			return nil, ctx.Err()
		}
	}
}

// watchPlan hands every state of plan name after resourceVersion rv to
// finished until it reports true (done), the plan is deleted or the watch
// ends; the caller reads the plan again and watches on.
func watchPlan(ctx context.Context, wc client.WithWatch, name, rv string, finished func(*v1beta1.UpgradePlan) bool) (done bool, err error) {
	w, err := wc.Watch(ctx, &v1beta1.UpgradePlanList{}, &client.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name),
		Raw:           &metav1.ListOptions{ResourceVersion: rv},
	})
	if err != nil {
		return false, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified:
			if p, ok := ev.Object.(*v1beta1.UpgradePlan); ok && finished(p) {
				return true, nil
			}
		case watch.Deleted:
			return false, fmt.Errorf("plan %s was deleted", name)
		case watch.Error:
			return false, apierrors.FromObject(ev.Object)
		}
	}
	return false, nil
}

// Violations returns the invariant violations seen so far, and those of the
// finished plan (nothing left behind).
func (r *Run) Violations(ctx context.Context, plan string) ([]sim.Violation, error) {
	v, err := r.Checker.CheckFinished(ctx, r.Client, plan)
	if err != nil {
		return nil, err
	}
	return append(r.Checker.Violations(), v...), nil
}

// Stop stops the manager, the simulator and the control plane.
func (r *Run) Stop() error {
	errs := []error{r.StopManager()}
	if r.Sim != nil {
		errs = append(errs, r.Sim.Stop())
	}
	if r.Env != nil {
		errs = append(errs, r.Env.Stop())
	}
	return errors.Join(errs...)
}

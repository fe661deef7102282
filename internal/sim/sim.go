// Package sim is a simulated Harvester cluster: actors that play the foreign
// controllers the toolkit works with (system-upgrade-controller, Rancher's
// planner and machine-drain handler, CDI behind Harvester's image controller,
// KubeVirt, Longhorn, Fleet, the parts of kube-controller-manager envtest
// lacks, and each node's kubelet) on a real API server. They watch and write
// the same objects and fields the real components do, so a whole upgrade can
// run on one machine.
//
// The actors run as reconcilers in the simulator's own controller manager,
// with its own client, separate from the toolkit's manager.
package sim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/release"
)

// Sim is a running simulated cluster.
type Sim struct {
	cfg    Config
	scheme *k8sruntime.Scheme
	log    logr.Logger
	// direct is an uncached client for bootstrapping; c reads from the
	// manager's cache and reader reads from the API server.
	direct client.Client
	c      client.Client
	reader client.Reader
	mgr    ctrl.Manager

	faults  faults
	podLogs podLogs
	// target is the release the repo serves, nil when it cannot be read.
	target   *release.Release
	kubelets *kubelets
	repo     *repoServer
	images   *nodeImages
	steps    stepClock
	vms      vmWorld

	// runCtx lives as long as the actors run.
	runCtx  context.Context
	cancel  context.CancelFunc
	stopped chan struct{}
	runErr  error
	stopMu  sync.Mutex
}

// Start bootstraps a cluster on the API server of restCfg (which must not hold
// a cluster yet), starts the kubelets and the repo server, and runs the actors
// until Stop is called or ctx ends.
func Start(ctx context.Context, restCfg *rest.Config, cfg Config) (*Sim, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sim{cfg: cfg, scheme: cluster.Scheme(), log: logf.FromContext(ctx).WithName("sim"), stopped: make(chan struct{})}
	s.faults.replace(cfg.Faults)

	simCfg := rest.CopyConfig(restCfg)
	// The simulator's requests are not what is being measured; do not throttle them.
	simCfg.QPS, simCfg.Burst = 5000, 10000
	simCfg.UserAgent = "upgrade-toolkit-sim"
	var err error
	if s.direct, err = client.New(simCfg, client.Options{Scheme: s.scheme}); err != nil {
		return nil, fmt.Errorf("sim: creating a client: %w", err)
	}
	tree := ReleaseTree(cfg)
	if data, err := fs.ReadFile(tree, release.ReleaseFile); err == nil {
		s.target, _ = release.ParseRelease(data)
	}
	if s.images, err = newNodeImages(tree, cfg.From.Harvester, cfg.allNodeNames(), cfg.NodeImages); err != nil {
		return nil, err
	}
	if err := s.startKubelets(); err != nil {
		return nil, err
	}
	if err := s.bootstrap(ctx); err != nil {
		s.stopServers()
		return nil, err
	}
	if err := s.startManager(ctx, simCfg, tree); err != nil {
		s.stopServers()
		return nil, err
	}
	return s, nil
}

func (s *Sim) startKubelets() error {
	if s.cfg.NoKubelet {
		return nil
	}
	ip, err := KubeletAddress()
	if err != nil {
		return err
	}
	disks := map[string]Disk{}
	for _, n := range s.cfg.allNodeNames() {
		disks[n] = s.cfg.disk(n)
	}
	s.kubelets, err = startKubelets(ip, disks, &s.podLogs, &s.faults)
	return err
}

func (s *Sim) stopServers() {
	if s.kubelets != nil {
		s.kubelets.stop()
	}
	if s.repo != nil {
		s.repo.stop()
	}
}

func (s *Sim) startManager(ctx context.Context, restCfg *rest.Config, release fs.FS) error {
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                 s.scheme,
		Logger:                 s.log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Tests run several simulators in one process; controller names repeat.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}:    {Namespaces: map[string]cache.Config{cluster.FleetLocalNamespace: {}}},
			&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{cluster.HarvesterNamespace: {}}},
		}},
	})
	if err != nil {
		return fmt.Errorf("sim: creating the simulator's manager: %w", err)
	}
	s.mgr, s.c, s.reader = mgr, mgr.GetClient(), mgr.GetAPIReader()
	if s.repo, err = startRepoServer(release, s.repoReady); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.runCtx, s.cancel = runCtx, cancel
	for _, setup := range []func(ctrl.Manager) error{
		s.setupCDI, s.setupSUC, s.setupImagePuller, s.setupJobRunner, s.setupRancher,
		s.setupNodeAgent, s.setupKubeVirt, s.setupLonghorn, s.setupFleet, s.setupRancherServer, s.setupComponents,
	} {
		if err := setup(mgr); err != nil {
			cancel()
			s.cancel = nil
			return fmt.Errorf("sim: setting up an actor: %w", err)
		}
	}
	go func() {
		defer close(s.stopped)
		s.runErr = mgr.Start(runCtx)
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = s.Stop()
		case <-s.stopped:
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		_ = s.Stop()
		return errors.New("sim: the simulator's cache did not sync")
	}
	return nil
}

// Stop stops the actors, the kubelets and the repo server. The objects stay.
func (s *Sim) Stop() error {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	<-s.stopped
	s.cancel = nil
	s.stopServers()
	return s.runErr
}

// SetFaults replaces the injected faults; actors see the change at their next
// step.
func (s *Sim) SetFaults(f FaultSet) { s.faults.replace(f) }

// Nodes returns the names of the managed, non-witness nodes.
func (s *Sim) Nodes() []string { return s.cfg.nodeNames() }

// Config returns the configuration the simulator runs with, defaults filled.
func (s *Sim) Config() Config { return s.cfg }

// Informers gives access to the simulator's informers, e.g. for the
// invariant Checker.
func (s *Sim) Informers() cache.Informers { return s.mgr.GetCache() }

// RepoURL maps the repo Service <service> in <namespace> to the base URL of
// the ISO content the simulated repo serves, the counterpart of
// http://<service>.<namespace>.svc/harvester-iso/ in a cluster (it ends in
// release.RepoRoot). The repo answers 503 until the Service has a ready
// endpoint.
func (s *Sim) RepoURL(namespace, service string) string { return s.repo.baseURL(namespace, service) }

// mutate re-reads obj from the API server, applies change and, when change
// reports a difference, writes obj (its status when status is true),
// retrying on conflicts.
func (s *Sim) mutate(ctx context.Context, obj client.Object, status bool, change func() bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.reader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if !change() {
			return nil
		}
		if status {
			return cluster.UpdateStatus(ctx, s.c, obj)
		}
		return s.c.Update(ctx, obj)
	})
}

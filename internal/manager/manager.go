// Package manager builds the controller manager: the scheme, the cache, the
// health endpoints and every controller and webhook of the toolkit.
package manager

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/controller"
	"github.com/harvester/upgrade-toolkit/internal/phase"
)

// LeaderElectionID is the lease that makes only one manager replica active.
const LeaderElectionID = "3509939c.harvesterhci.io"

// Options configure the manager.
type Options struct {
	// MetricsAddr is the metrics listen address; "0" disables metrics.
	MetricsAddr string
	// ProbeAddr is the health probe listen address; "0" disables probes.
	ProbeAddr string
	// PprofAddr serves Go's profiles (/debug/pprof); "" or "0" disables it.
	PprofAddr string
	// LeaderElect enables leader election.
	LeaderElect bool
	// Phase configures the phases; nil takes phase.DefaultConfig.
	Phase *phase.Config
	// Clock is the time source of every deadline; nil is the real clock.
	Clock clock.PassiveClock
	// WithoutReconcilers runs the webhook alone, without the reconcilers
	// that drive plans: for tests of admission on plans in made-up states.
	WithoutReconcilers bool
	// Namespace is the namespace the manager runs in; it holds the
	// webhook's certificate Secret.
	Namespace string
	// Webhook configures the admission webhook server.
	Webhook WebhookOptions
}

// WebhookOptions configure the admission webhook server and its
// certificates.
type WebhookOptions struct {
	// Enabled serves the webhooks; off for local runs (ENABLE_WEBHOOKS=false).
	Enabled bool
	// Host is the address the server binds, "" for every interface. A host
	// name (not an IP) is also written into the serving certificate.
	Host string
	// Port is the port the server listens on.
	Port int
	// CertDir is where the manager writes the serving certificate and key.
	CertDir string
	// ServiceName is the Service in Namespace in front of the server; the
	// serving certificate is issued for it.
	ServiceName string
	// ConfigurationName is the ValidatingWebhookConfiguration whose caBundle
	// the manager keeps current.
	ConfigurationName string
}

// Setup registers one more part of the toolkit (e.g. a webhook) with a
// manager.
type Setup func(mgr ctrl.Manager, opts Options) error

// setups are the extra parts the manager runs, in registration order.
var setups []Setup

// Register adds a part to every manager built afterwards.
func Register(s Setup) { setups = append(setups, s) }

// New builds a manager with every controller of the toolkit.
func New(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	if opts.Phase == nil {
		c := phase.DefaultConfig()
		opts.Phase = &c
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	cfg = rest.CopyConfig(cfg)
	// client-go's default of 5 requests a second (controller-runtime: 20)
	// would pace a 200-node upgrade; the manager's writes are few and small.
	cfg.QPS, cfg.Burst = max(cfg.QPS, 50), max(cfg.Burst, 100)
	mgr, err := ctrl.NewManager(apicount.Instrument(cfg), ctrl.Options{
		Scheme:                 cluster.NewScheme(),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: opts.ProbeAddr,
		PprofBindAddress:       opts.PprofAddr,
		LeaderElection:         opts.LeaderElect,
		LeaderElectionID:       LeaderElectionID,
		Cache:                  cacheOptions(),
		// A process may build more than one manager (tests, the demo's
		// restarts); the controllers' metrics are shared, not duplicated.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: opts.Webhook.Host, Port: opts.Webhook.Port, CertDir: opts.Webhook.CertDir,
		}),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the controller manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	if !opts.WithoutReconcilers {
		if err := controller.Setup(mgr, opts.Phase, opts.Clock); err != nil {
			return nil, err
		}
	}
	for _, s := range setups {
		if err := s(mgr, opts); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// stripNode drops what the manager never reads from a cached Node and what
// makes Nodes big: managedFields and the list of images (hundreds per node).
func stripNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.ManagedFields = nil
		n.Status.Images = nil
	}
	return obj, nil
}

// cacheOptions keep the manager's memory small on large clusters: the cache
// holds only the Jobs and pods of upgrades, the Secrets of Rancher's machine
// plans, and the ConfigMaps and EndpointSlices of the namespaces the
// toolkit works in.
func cacheOptions() cache.Options {
	ours, err := labels.NewRequirement(v1beta1.LabelUpgradePlan, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant selector
	}
	byPlan := labels.NewSelector().Add(*ours)
	return cache.Options{
		// Nothing reads managedFields; on a large cluster they are much of
		// every cached object.
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}: {Transform: stripNode},
			&batchv1.Job{}: {Label: byPlan},
			&corev1.Pod{}:  {Label: byPlan},
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{cluster.FleetLocalNamespace: {
				FieldSelector: fields.OneTermEqualSelector("type", cluster.MachinePlanSecretType),
			}}},
			&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{cluster.HarvesterNamespace: {}}},
			&discoveryv1.EndpointSlice{}: {Namespaces: map[string]cache.Config{
				cluster.HarvesterNamespace: {}, "default": {},
			}},
		}}
}

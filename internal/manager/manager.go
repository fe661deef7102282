// Package manager builds the controller manager: the scheme, the cache, the
// health endpoints and every controller and webhook of the toolkit.
package manager

import (
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// LeaderElectionID is the lease that makes only one manager replica active.
const LeaderElectionID = "3509939c.harvesterhci.io"

// Options configure the manager.
type Options struct {
	// MetricsAddr is the metrics listen address; "0" disables metrics.
	MetricsAddr string
	// ProbeAddr is the health probe listen address; "0" disables probes.
	ProbeAddr string
	// LeaderElect enables leader election.
	LeaderElect bool
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

// Setup registers one part of the toolkit (a controller, a webhook) with a
// manager.
type Setup func(mgr ctrl.Manager, opts Options) error

// setups are the parts the manager runs, in registration order.
var setups []Setup

// Register adds a part to every manager built afterwards.
func Register(s Setup) { setups = append(setups, s) }

// New builds a manager with every registered part.
func New(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 cluster.NewScheme(),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: opts.ProbeAddr,
		LeaderElection:         opts.LeaderElect,
		LeaderElectionID:       LeaderElectionID,
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
	for _, s := range setups {
		if err := s(mgr, opts); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

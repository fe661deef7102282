package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/manager"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/version"
	"github.com/harvester/upgrade-toolkit/internal/webhook"
)

func init() { subcommands = append(subcommands, newManagerCommand) }

func newManagerCommand() *cobra.Command {
	var opts manager.Options
	phaseCfg := phase.DefaultConfig()
	phaseCfg.Version = version.Version
	opts.Phase = &phaseCfg
	zapOpts := zap.Options{}
	var kube *clusterFlags
	var alertmanagerURL string
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the controller manager that drives UpgradePlans",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			// As in kubebuilder projects: `ENABLE_WEBHOOKS=false make run`.
			opts.Webhook.Enabled = os.Getenv("ENABLE_WEBHOOKS") != "false"
			if alertmanagerURL != "" {
				opts.Alerts = preflight.Alertmanager{URL: alertmanagerURL}
			}
			ctrl.Log.Info("starting", "version", version.String())
			cfg, err := kube.config()
			if err != nil {
				return err
			}
			mgr, err := manager.New(cfg, opts)
			if err != nil {
				return err
			}
			return mgr.Start(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Namespace, "namespace", namespaceOf(), "namespace the manager runs in ($POD_NAMESPACE when set); holds the webhook certificate Secret and the leader election Lease")
	kube = addClusterFlags(cmd, false)
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", "0", "address the metrics endpoint listens on, e.g. :8443; 0 disables it")
	f.BoolVar(&opts.MetricsSecure, "metrics-secure", true,
		"serve metrics over HTTPS to scrapers the API server authenticates and authorizes (get on /metrics); false serves plain HTTP to anyone")
	f.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "address the health probes listen on")
	f.StringVar(&opts.PprofAddr, "pprof-bind-address", "0", "address Go's profiles (/debug/pprof) are served on, for diagnosing the manager; 0 disables them")
	f.BoolVar(&opts.LeaderElect, "leader-elect", false, "elect a leader so that only one replica is active")
	f.DurationVar(&opts.Lease.Duration, "leader-elect-lease-duration", 0,
		"how long a standby replica waits after the leader's last renewal before it takes over (0: 15s)")
	f.DurationVar(&opts.Lease.RenewDeadline, "leader-elect-renew-deadline", 0,
		"how long the leader retries renewing its lease before it gives up leading and exits (0: 10s); less than the lease duration")
	f.DurationVar(&opts.Lease.RetryPeriod, "leader-elect-retry-period", 0, "how often replicas try to acquire or renew the lease (0: 2s)")
	f.IntVar(&opts.Webhook.Port, "webhook-port", 9443, "port the admission webhook server listens on")
	f.StringVar(&opts.Webhook.CertDir, "webhook-cert-dir", filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs"),
		"directory the manager writes the webhook's serving certificate to")
	f.StringVar(&opts.Webhook.ServiceName, "webhook-service-name", webhook.DefaultServiceName, "Service in front of the webhook server")
	f.StringVar(&opts.Webhook.ConfigurationName, "webhook-configuration-name", webhook.DefaultConfigurationName,
		"ValidatingWebhookConfiguration whose caBundle the manager keeps current")
	f.StringVar(&phaseCfg.JobServiceAccount, "job-service-account", envOr("UPGRADE_JOB_SERVICE_ACCOUNT", phaseCfg.JobServiceAccount),
		"service account of the node and restore-vm Jobs ($UPGRADE_JOB_SERVICE_ACCOUNT)")
	f.StringVar(&phaseCfg.ClusterUpgradeServiceAccount, "cluster-upgrade-service-account",
		envOr("UPGRADE_CLUSTER_UPGRADE_SERVICE_ACCOUNT", phaseCfg.ClusterUpgradeServiceAccount),
		"service account of the cluster-upgrade Job, which upgrades Rancher with Helm and needs cluster-admin ($UPGRADE_CLUSTER_UPGRADE_SERVICE_ACCOUNT)")
	f.StringVar(&phaseCfg.PlanServiceAccount, "plan-service-account", envOr("UPGRADE_PLAN_SERVICE_ACCOUNT", phaseCfg.PlanServiceAccount),
		"service account of the system-upgrade-controller Plans' Jobs ($UPGRADE_PLAN_SERVICE_ACCOUNT)")
	f.StringVar(&phaseCfg.ToolkitRepository, "toolkit-image-repository", phaseCfg.ToolkitRepository,
		"repository of the upgrade-toolkit image the workloads run (a plan's management.harvesterhci.io/upgrade-toolkit-image annotation overrides it)")
	f.Var(mirrorFlag{&phaseCfg.ImageMirror}, "image-mirror",
		"a registry (host[:port][/path]) that holds a copy of every image the upgrade's workloads run, under the same repository paths: each is pulled from it, "+
			"e.g. docker.io/rancher/harvester-upgrade-toolkit:v1.8.0 from <mirror>/rancher/harvester-upgrade-toolkit:v1.8.0 (`upgrade-toolkit images --push-list` lists them); "+
			"empty: the workloads run images the nodes have (air-gapped)")
	f.Var(repoURLFlag{&phaseCfg}, "repo-url",
		"reach every plan's upgrade repo at this base URL instead of its Service's cluster address, e.g. http://localhost:8080/harvester-iso/ "+
			"through `kubectl port-forward` when the manager runs outside the cluster; {namespace} and {service} are replaced by the Service's")
	f.Var(daysFlag{&phaseCfg.MinCertValidity}, "min-certs-expiration-days",
		"days the API server's certificates must stay valid for an upgrade to start, unless a plan's management.harvesterhci.io/min-certs-expiration-in-day says otherwise")
	f.DurationVar(&phaseCfg.RetryWindow, "retry-window", phaseCfg.RetryWindow,
		"how long a plan that failed for a reason a retry can cure keeps what it made and changed, waiting for its management.harvesterhci.io/retry annotation, "+
			"before it is cleaned up; 0 cleans up every failed plan at once (no retries)")
	f.StringVar(&alertmanagerURL, "alertmanager-url", "",
		"an Alertmanager's base address, e.g. http://rancher-monitoring-alertmanager.cattle-monitoring-system:9093: a critical alert firing "+
			"is then the risk CriticalAlertFiring, at admission and at Initialize; empty: alerts are not looked at")
	f.BoolVar(&opts.UpgradeLog.Enabled, "upgrade-log", true,
		"keep the logs of every pod an upgrade runs in the plan's UpgradeLog (a plan opts out with spec.logEnabled: false); false runs nothing of it")
	zapFlags := goFlagSet()
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	return cmd
}

// namespaceOf is the namespace the manager runs in: $POD_NAMESPACE, else
// harvester-system.
func namespaceOf() string { return envOr("POD_NAMESPACE", cluster.HarvesterNamespace) }

// envOr returns the environment variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

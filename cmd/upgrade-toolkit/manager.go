package main

import (
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harvester/upgrade-toolkit/internal/manager"
	"github.com/harvester/upgrade-toolkit/internal/version"
)

func init() { subcommands = append(subcommands, newManagerCommand) }

func newManagerCommand() *cobra.Command {
	var opts manager.Options
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the controller manager that drives UpgradePlans",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			ctrl.Log.Info("starting", "version", version.String())
			cfg, err := ctrl.GetConfig()
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
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", "0", "address the metrics endpoint listens on; 0 disables it")
	f.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "address the health probes listen on")
	f.BoolVar(&opts.LeaderElect, "leader-elect", false, "elect a leader so that only one replica is active")
	zapFlags := goFlagSet()
	zapOpts.BindFlags(zapFlags)
	f.AddGoFlagSet(zapFlags)
	return cmd
}

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/harvester/upgrade-toolkit/internal/repo"
)

func init() { subcommands = append(subcommands, newRepoCommand) }

func newRepoCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "repo",
		Short: "The upgrade repo that serves the release ISO to the nodes",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newRepoServeCommand())
	return cmd
}

func newRepoServeCommand() *cobra.Command {
	var opts repo.Options
	var listen string
	var level slog.Level
	cmd := &cobra.Command{
		Use:   "serve --iso PATH [--sha512 HEX] [--listen :8080]",
		Short: "Serve the files inside an ISO image over HTTP under " + repo.PathPrefix,
		Long: `serve reads the ISO 9660 image directly (no mount, no privileges) and serves
its files read-only under ` + repo.PathPrefix + ` with Range, ETag and conditional
requests. /healthz answers while the process runs; /readyz once the ISO is
open and, with --sha512, verified. An ISO that cannot be served (not an ISO,
truncated: exit code 4; checksum mismatch: exit code 3) ends the process with
the reason written to the termination message file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			srv, err := repo.NewServer(opts)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listening on %s: %w", listen, err)
			}
			err = srv.Run(cmd.Context(), ln)
			if f := (*repo.Failure)(nil); errors.As(err, &f) {
				return &exitError{code: f.ExitCode, err: err}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.ISOPath, "iso", "", "the ISO image file to serve")
	f.StringVar(&opts.SHA512, "sha512", "", "expected SHA-512 of the ISO in hex; the repo is ready only once it matches")
	f.StringVar(&listen, "listen", fmt.Sprintf(":%d", repo.Port), "address to listen on")
	f.StringVar(&opts.TerminationLog, "termination-log", "/dev/termination-log", "file for the failure message, written only if it exists")
	f.TextVar(&level, "log-level", slog.LevelInfo, "log level: debug (also logs probe requests), info, warn or error")
	_ = cmd.MarkFlagRequired("iso")
	return cmd
}

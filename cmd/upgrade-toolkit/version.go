package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/harvester/upgrade-toolkit/internal/version"
)

func init() { subcommands = append(subcommands, newVersionCommand) }

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and tree state of this build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String())
			return err
		},
	}
}

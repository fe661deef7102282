package main

import (
	"slices"
	"strings"
	"testing"
)

// TestKubectlPluginRunsStatus: called as kubectl-upgrade_status (kubectl
// upgrade-status), the binary runs its status subcommand.
func TestKubectlPluginRunsStatus(t *testing.T) {
	tests := []struct {
		argv, want []string
	}{
		{[]string{"/usr/local/bin/kubectl-upgrade_status", "plan-a", "-w"}, []string{"status", "plan-a", "-w"}},
		{[]string{"kubectl-upgrade_status"}, []string{"status"}},
		{[]string{"/usr/local/bin/upgrade-toolkit", "status", "-o", "json"}, []string{"status", "-o", "json"}},
	}
	for _, tt := range tests {
		if got := pluginArgs(tt.argv); !slices.Equal(got, tt.want) {
			t.Errorf("%v: got %v, want %v", tt.argv, got, tt.want)
		}
	}
	cmd := newRootCommand()
	cmd.SetArgs(pluginArgs([]string{"kubectl-upgrade_status", "-o", "table"}))
	if err := cmd.Execute(); err == nil || !strings.HasPrefix(err.Error(), `-o "table": use one of json, yaml, name, go-template`) {
		t.Errorf("a bad --output: %v", err)
	}
}

package main

import (
	"strings"
	"testing"
)

// TestLogsRefusesFlagsThatDoNotGoTogether: before asking any cluster, logs
// says which flags to leave out.
func TestLogsRefusesFlagsThatDoNotGoTogether(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "p", "--archive", "x.tar.gz", "--job", "j"}, "--archive writes every log; leave out --job, --node and --follow"},
		{[]string{"logs", "p", "--follow"}, "--follow needs --job or --node"},
		{[]string{"logs"}, "accepts 1 arg(s), received 0"},
	} {
		cmd := newRootCommand()
		cmd.SetArgs(tc.args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

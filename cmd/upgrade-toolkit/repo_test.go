package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/internal/repo"
	"github.com/harvester/upgrade-toolkit/internal/repo/isotest"
)

// TestRepoServeExitCodes runs the command as the container does and checks
// the exit code and termination message of ISOs that cannot be served.
func TestRepoServeExitCodes(t *testing.T) {
	_, iso := isotest.ReleaseISO(t, 4096)
	notISO := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(notISO, []byte(strings.Repeat("x", 1<<16)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"checksum mismatch", []string{"--iso", iso, "--sha512", strings.Repeat("0", 128)}, repo.ExitCodeChecksumMismatch, "checksum mismatch"},
		{"not an ISO", []string{"--iso", notISO}, repo.ExitCodeInvalidISO, "not an ISO 9660 image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			termLog := filepath.Join(t.TempDir(), "termination-log")
			if err := os.WriteFile(termLog, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			root := newRootCommand()
			root.SetArgs(append([]string{"repo", "serve", "--listen", "127.0.0.1:0", "--termination-log", termLog, "--log-level", "error"}, tc.args...))
			err := root.ExecuteContext(t.Context())
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != tc.code {
				t.Fatalf("exit: %v, want code %d", err, tc.code)
			}
			if msg, _ := os.ReadFile(termLog); !strings.Contains(string(msg), tc.msg) {
				t.Errorf("termination message %q lacks %q", msg, tc.msg)
			}
		})
	}
}

func TestRepoServeRejectsABadChecksumFlag(t *testing.T) {
	root := newRootCommand()
	root.SetArgs([]string{"repo", "serve", "--iso", "/iso/disk.img", "--sha512", "not-hex"})
	err := root.ExecuteContext(t.Context())
	if err == nil || !strings.Contains(err.Error(), "not a SHA-512 digest") {
		t.Errorf("error %v, want one about the checksum", err)
	}
}

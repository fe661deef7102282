// Package chaos_test runs whole simulated upgrades under seeded faults (see
// internal/chaos and docs/reliability.md): `make chaos` runs many seeds,
// `make test` a few.
package chaos_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/internal/chaos"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// env reads a whole number from the environment.
func env(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// managerBinary builds the upgrade-toolkit binary the replicas run, unless
// CHAOS_BIN names one.
func managerBinary(t *testing.T) string {
	if bin := os.Getenv("CHAOS_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "upgrade-toolkit")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/upgrade-toolkit")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the manager: %v\n%s", err, out)
	}
	return bin
}

// TestChaos runs CHAOS_SEEDS seeds (default 10) from CHAOS_FIRST_SEED
// (default 1) at CHAOS_NODES nodes (default 3); CHAOS_SEED replays one.
// Each run must Succeed with every invariant held.
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	// The world's API server, kubelets and nodes get a network of their own,
	// and so do the manager's processes, its children.
	os.Exit(testenv.Isolated(m.Run))
}

func TestChaos(t *testing.T) {
	nodes, first, n := env("CHAOS_NODES", 3), env("CHAOS_FIRST_SEED", 1), env("CHAOS_SEEDS", 10)
	if s := env("CHAOS_SEED", 0); s != 0 {
		first, n = s, 1
	}
	bin := managerBinary(t)
	var results []chaos.Result
	var baseline time.Duration
	if os.Getenv("CHAOS_BASELINE") != "" {
		cfg := chaos.Faulty(0, nodes, bin)
		cfg.Replicas, cfg.Kills, cfg.APIFaultRate, cfg.Outage = 1, 0, 0, false
		r := chaos.Run(context.Background(), cfg)
		if !r.OK() {
			t.Fatalf("the fault-free run failed: %s", summary(r))
		}
		baseline = r.Took
		t.Logf("fault-free run at %d nodes: %s", nodes, r.Took.Round(time.Second))
	}
	for seed := first; seed < first+n; seed++ {
		cfg := chaos.Faulty(uint64(seed), nodes, bin)
		logs, err := os.Create(filepath.Join(t.TempDir(), fmt.Sprintf("seed-%d.log", seed)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Logs = logs
		r := chaos.Run(context.Background(), cfg)
		_ = logs.Close()
		results = append(results, r)
		t.Logf("%s", summary(r))
		if !r.OK() {
			t.Errorf("seed %d at %d nodes: %s\nreplay: CHAOS_SEED=%d CHAOS_NODES=%d make chaos", seed, nodes, summary(r), seed, nodes)
			if os.Getenv("CHAOS_KEEP_LOGS") != "" {
				out, _ := os.ReadFile(logs.Name())
				t.Logf("replica logs:\n%s", tail(string(out), 200))
			}
		}
	}
	t.Logf("\n%s", table(results, baseline))
}

func summary(r chaos.Result) string {
	s := fmt.Sprintf("seed %d: %s in %s, %d states checked, faults %s", r.Config.Seed, r.Phase, r.Took.Round(time.Second), r.Checks, faults(r.Faults))
	if len(r.Violations) > 0 {
		s += "; violations: " + strings.Join(r.Violations, "; ")
	}
	if r.Err != nil {
		s += "; error: " + r.Err.Error()
	}
	return s
}

func faults(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// table sums the runs up: outcomes, faults by kind and time.
func table(results []chaos.Result, baseline time.Duration) string {
	ok, checks := 0, 0
	total := map[string]int{}
	var took time.Duration
	for _, r := range results {
		if r.OK() {
			ok++
		}
		for k, v := range r.Faults {
			total[k] += v
		}
		took += r.Took
		checks += r.Checks
	}
	if len(results) == 0 {
		return "no runs"
	}
	mean := took / time.Duration(len(results))
	s := fmt.Sprintf("runs %d, Succeeded with every invariant held %d; %d states checked; faults: %s; mean time %s",
		len(results), ok, checks, faults(total), mean.Round(time.Second))
	if baseline > 0 {
		s += fmt.Sprintf(" (fault-free %s, x%.2f)", baseline.Round(time.Second), float64(mean)/float64(baseline))
	}
	return s
}

func tail(s string, lines int) string {
	all := strings.Split(s, "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

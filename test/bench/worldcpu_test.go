package bench

import (
	"cmp"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// worldReading is a reading of the world's CPU time (worldCPU) and of the
// requests its API server served (apiRequests).
type worldReading struct {
	cpu      map[string]time.Duration
	requests map[string]float64
}

// readWorld reads the world's CPU time and requests so far.
func readWorld(b *testing.B, mgr *manager, admin *http.Client, host string) worldReading {
	b.Helper()
	cpu, err := worldCPU(mgr.cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	requests, err := apiRequests(admin, host)
	if err != nil {
		b.Fatal(err)
	}
	return worldReading{cpu: cpu, requests: requests}
}

// clockTick is the unit of a process's CPU times in /proc/<pid>/stat
// (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// worldCPU reads the CPU time used so far by the world's processes: this
// benchmark's own (the simulated components and the benchmark's watches)
// and each of its child processes (the API server, etcd, the controller
// manager, the scheduler, kwok) but the toolkit's manager, by command name.
func worldCPU(manager int) (map[string]time.Duration, error) {
	self, skip := os.Getpid(), strconv.Itoa(manager)
	out := map[string]time.Duration{}
	_, _, cpu, err := readStat("/proc/self/stat")
	if err != nil {
		return nil, err
	}
	out["benchmark (simulator, watches)"] = cpu
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	for _, stat := range stats {
		if filepath.Base(filepath.Dir(stat)) == skip {
			continue
		}
		parent, name, cpu, err := readStat(stat)
		if err != nil || parent != self {
			continue // gone meanwhile, or not the world's
		}
		out[name] += cpu
	}
	return out, nil
}

// readStat parses /proc/<pid>/stat: the parent's pid, the command name
// and the CPU time.
func readStat(path string) (int, string, time.Duration, error) {
	b, err := os.ReadFile(path) //nolint:gosec // /proc
	if err != nil {
		return 0, "", 0, err
	}
	s := string(b)
	// The name is in parentheses and may hold spaces: the fields after it
	// start at the last ")".
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, "", 0, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(s[end+1:])
	// After the name: state, ppid, ..., utime (14th field of the line,
	// 12th after the name), stime.
	if len(f) < 13 {
		return 0, "", 0, fmt.Errorf("%s: %d fields", path, len(f))
	}
	ppid, err1 := strconv.Atoi(f[1])
	utime, err2 := strconv.ParseInt(f[11], 10, 64)
	stime, err3 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, "", 0, fmt.Errorf("%s: unreadable fields", path)
	}
	return ppid, s[open+1 : end], time.Duration(utime+stime) * clockTick, nil
}

// cpuSince lists the CPU time each process used between two readings of
// worldCPU, the largest first, and returns their sum.
func cpuSince(before, after map[string]time.Duration) (string, time.Duration) {
	names, total := byGrowth(before, after)
	var b strings.Builder
	fmt.Fprintf(&b, "  world cpu  %s in all:", total.Round(time.Second))
	for _, name := range names {
		fmt.Fprintf(&b, " %s %s,", name, (after[name] - before[name]).Round(time.Second))
	}
	return strings.TrimSuffix(b.String(), ",") + "\n", total
}

// byGrowth returns the keys of two readings of counters, the one that grew
// most first, and the growth of all.
func byGrowth[V time.Duration | float64](before, after map[string]V) ([]string, V) {
	keys := make([]string, 0, len(after))
	var total V
	for k, v := range after {
		keys = append(keys, k)
		total += v - before[k]
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Compare(after[b]-before[b], after[a]-before[a])
	})
	return keys, total
}

// TestReadStat: the parent, name and CPU time of a process, a name with
// spaces and parentheses included.
func TestReadStat(t *testing.T) {
	ppid, _, _, err := readStat("/proc/self/stat")
	if err != nil || ppid != os.Getppid() {
		t.Errorf("/proc/self/stat: parent %d (%v), want %d", ppid, err, os.Getppid())
	}
	path := filepath.Join(t.TempDir(), "stat")
	line := "42 (kube (api) server) S 7 42 42 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 12 0 100 0 0\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	ppid, name, cpu, err := readStat(path)
	if err != nil || ppid != 7 || name != "kube (api) server" || cpu != 281*clockTick {
		t.Errorf("got parent %d, name %q, cpu %s, %v; want 7, %q, %s", ppid, name, cpu, err, "kube (api) server", 281*clockTick)
	}
}

// apiRequests reads how many requests the world's API server served so
// far, by verb and resource (and subresource), from its metrics.
func apiRequests(c *http.Client, host string) (map[string]float64, error) {
	fams, err := fetchWith(c, strings.TrimSuffix(host, "/")+"/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range fams["apiserver_request_total"].GetMetric() {
		key := label(m, "verb") + " " + label(m, "resource")
		if sub := label(m, "subresource"); sub != "" {
			key += "/" + sub
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out, nil
}

// busiest lists the most frequent requests between two readings of
// apiRequests, and their total.
func busiest(before, after map[string]float64, top int) string {
	keys, total := byGrowth(before, after)
	var b strings.Builder
	fmt.Fprintf(&b, "  world api  %.0f requests:", total)
	for _, k := range keys[:min(top, len(keys))] {
		fmt.Fprintf(&b, " %s %.0f,", k, after[k]-before[k])
	}
	return strings.TrimSuffix(b.String(), ",") + "\n"
}

// Package bench measures whole upgrades of simulated clusters of 3 to 500
// nodes (BENCH_NODES chooses others, e.g. 1000) with zero-time actors: the
// wall time to Succeeded, the reconciles by controller, the API requests the
// manager makes by verb and resource and their bytes (counted at its client),
// and the manager's peak heap and RSS. The manager runs as its own process,
// so that its memory is its own; BENCH_PROFILES keeps its CPU and heap
// profiles.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/sim"
	"github.com/harvester/upgrade-toolkit/internal/simrun"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var binary string

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	// The package has benchmarks only: make test runs it without -bench and
	// need not build the manager.
	flag.Parse()
	if flag.Lookup("test.bench").Value.String() == "" {
		os.Exit(m.Run())
	}
	// Built before the world's network namespace is entered (the build may
	// need the module proxy); the run inside finds it in the environment.
	binary = os.Getenv(binaryEnv)
	if binary != "" {
		os.Exit(testenv.Isolated(m.Run))
	}
	dir, err := os.MkdirTemp("", "upgrade-toolkit-bench")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "upgrade-toolkit")
	// As `make build` builds what the image ships: static, stripped. Its
	// pages are part of the resident set measured.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", binary, "../../cmd/upgrade-toolkit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the manager:", err)
		os.Exit(1)
	}
	_ = os.Setenv(binaryEnv, binary)
	code := testenv.Isolated(m.Run)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// binaryEnv passes the manager binary to the benchmark's run in the world's
// network namespace.
const binaryEnv = "UPGRADE_TOOLKIT_BENCH_MANAGER"

// sizes are the cluster sizes upgraded: BENCH_NODES (e.g. "1000" or
// "10,500") replaces the default.
func sizes(b *testing.B) []int { return sizesFrom(b, "BENCH_NODES", []int{3, 10, 50, 200, 500}) }

// sizesFrom reads node counts separated by commas from the environment
// variable env, def when it is unset.
func sizesFrom(b *testing.B, env string, def []int) []int {
	list := os.Getenv(env)
	if list == "" {
		return def
	}
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want node counts separated by commas, e.g. 10,500", env, list)
		}
		out = append(out, n)
	}
	return out
}

func BenchmarkUpgrade(b *testing.B) {
	for _, nodes := range sizes(b) {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for range b.N {
				r := upgrade(b, upgradeRun{nodes: nodes})
				b.ReportMetric(r.wall.Seconds(), "wall-s")
				b.ReportMetric(float64(r.wall.Milliseconds())/float64(nodes), "ms/node")
				b.ReportMetric(float64(r.writes), "writes")
				b.ReportMetric(float64(r.writes)/float64(nodes), "writes/node")
				b.ReportMetric(float64(r.quietWrites), "quiet-writes")
				b.ReportMetric(float64(r.reconciles["upgradeplan"]), "plan-reconciles")
				b.ReportMetric(float64(r.reconciles["upgradeplan"])/float64(nodes), "plan-reconciles/node")
				b.ReportMetric(float64(r.total())/float64(nodes), "requests/node")
				b.ReportMetric(float64(r.nodeUpdates)/float64(nodes), "world-node-updates/node")
				b.ReportMetric(float64(r.sent)/1024/float64(nodes), "sent-KiB/node")
				b.ReportMetric(float64(r.received)/1024/float64(nodes), "received-KiB/node")
				b.ReportMetric(r.reconcileTime.Seconds()*1000/float64(nodes), "reconcile-ms/node")
				b.ReportMetric(r.cpu.Seconds()*1000/float64(nodes), "cpu-ms/node")
				b.ReportMetric(r.worldTotal.Seconds()*1000/float64(nodes), "world-cpu-ms/node")
				b.ReportMetric(float64(r.memory.rss)/(1<<20), "rss-MiB")
				b.ReportMetric(float64(r.memory.rssFile)/(1<<20), "rss-file-MiB")
				b.ReportMetric(float64(r.memory.heap)/(1<<20), "heap-MiB")
				b.ReportMetric(r.tail.Seconds(), "tail-s")
				for step, f := range r.floors {
					if d := r.watchedPhases[step]; f > 0 && d > 0 {
						b.ReportMetric(d.Seconds()/f.Seconds(), step+"-x-floor")
					}
				}
				// The whole breakdown; b.Log would cut it short.
				fmt.Println(r.String())
			}
		})
	}
}

// result is what one upgrade measured.
type result struct {
	nodes       int
	wall        time.Duration
	writes      int
	quietWrites int
	reconciles  map[string]int
	// reconcileTime is the time spent in reconciles, all controllers,
	// waiting for the API server included.
	reconcileTime time.Duration
	// cpu is the manager process's CPU time: its own overhead.
	cpu      time.Duration
	requests map[string]int // "verb resource"
	bytes    map[string]apicount.Bytes
	// sent and received are the bytes of the manager's API requests' bodies.
	sent, received int64
	// quiet are the writes made after the plan finished.
	quiet  map[string]int
	memory memory
	phases map[string]time.Duration
	// nodeUpdates are the world's updates of its Nodes during the run,
	// everyone's (the manager's included), and churn who made them.
	nodeUpdates int
	churn       string
	// tail is the time from the last node's verified upgrade to
	// Succeeded: what the operator's window waits for once nothing is
	// at risk any more.
	tail time.Duration
	// floors are the world's floor of each phase (floor_test.go),
	// jobFloors the floor of its Jobs and reboots alone, and watchedPhases
	// each phase's time as the same watch saw it, to the millisecond (the
	// metrics' phases have the status's whole seconds).
	floors, jobFloors, watchedPhases map[string]time.Duration
	// toolkitTime lists the longest stretches of the toolkit's own time in
	// the phases over 1.2x of their floor.
	toolkitTime string
	// worldCPU is the CPU time the world's processes used during the run,
	// by process (cpuSince), and worldTotal their sum.
	worldCPU   string
	worldTotal time.Duration
}

// total is the number of API requests.
func (r *result) total() int {
	n := 0
	for _, v := range r.requests {
		n += v
	}
	return n
}

func (r *result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes: Succeeded in %s (%s after the last node's upgrade), %s in reconciles, %s of manager CPU, %d API requests (%d writes, %d after the end %v), %.1f MiB sent, %.1f MiB received, manager RSS peak %.1f MiB (%.1f MiB of it the binary's pages, %s after the start), heap peak %.1f MiB\n",
		r.nodes, r.wall.Round(time.Millisecond), r.tail.Round(time.Millisecond), r.reconcileTime.Round(time.Millisecond), r.cpu.Round(time.Millisecond), r.total(), r.writes, r.quietWrites, r.quiet,
		float64(r.sent)/(1<<20), float64(r.received)/(1<<20), float64(r.memory.rss)/(1<<20), float64(r.memory.rssFile)/(1<<20), r.memory.rssAt.Round(time.Second), float64(r.memory.heap)/(1<<20))
	var ctrls []string
	for c := range r.reconciles {
		ctrls = append(ctrls, c)
	}
	sort.Strings(ctrls)
	for _, c := range ctrls {
		fmt.Fprintf(&b, "  reconciles %-12s %d\n", c, r.reconciles[c])
	}
	b.WriteString(phaseTimes(r.phases))
	b.WriteString(floorTimes(r.watchedPhases, r.floors, r.jobFloors))
	b.WriteString(r.toolkitTime)
	b.WriteString(r.worldCPU)
	b.WriteString(r.churn)
	var keys []string
	for k := range r.requests {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  requests   %-48s %6d  sent %8.1f KiB  received %9.1f KiB\n", k, r.requests[k], float64(r.bytes[k].Sent)/1024, float64(r.bytes[k].Received)/1024)
	}
	return b.String()
}

// upgradeRun is one upgrade to measure.
type upgradeRun struct {
	nodes int
	// refuseKubelets makes every node's kubelet refuse the API server.
	refuseKubelets bool
	// annotations are the plan's.
	annotations map[string]string
	// managerArgs are added to the manager's command line.
	managerArgs []string
}

func upgrade(b *testing.B, u upgradeRun) *result {
	b.Helper()
	nodes := u.nodes
	// With the real Job controller, scheduler and kwok a node takes about
	// 5 s on two busy cores; 200 nodes take over a quarter of an hour, and
	// at 500 the world's API server is saturated and a node takes about
	// 10 s (a 500-node run of 2026-11-28 missed a deadline of 10 s per
	// node with 36 nodes to go): the deadline only stops a run that hangs.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(nodes)*20*time.Second)
	defer cancel()
	env, err := testenv.StartWith(sim.WorldOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	s, err := sim.Start(ctx, env.Config, sim.Config{Nodes: nodes})
	if err != nil {
		b.Fatal(err)
	}
	if u.refuseKubelets {
		s.SetFaults(sim.FaultSet{KubeletsRefuse: s.Nodes()})
	}
	defer func() { _ = s.Stop() }()

	mgr := startManager(b, env, s, nodes, u.managerArgs)
	defer mgr.stop()
	// The world's API server, as its administrator: its metrics and
	// profiles.
	admin, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		b.Fatal(err)
	}
	if dir := os.Getenv(profilesEnv); dir != "" {
		// The API server's too: the world's largest share of the CPU.
		done := make(chan struct{})
		defer close(done)
		go profileCPU(admin, strings.TrimSuffix(env.Config.Host, "/")+"/debug/pprof/profile?seconds=10", filepath.Join(dir, fmt.Sprintf("nodes-%d", nodes)), "apiserver-cpu", done)
	}

	churn, err := watchNodeChurn(ctx, env.Config)
	if err != nil {
		b.Fatal(err)
	}
	world, err := watchWorld(ctx, env.Config)
	if err != nil {
		b.Fatal(err)
	}
	run := &simrun.Run{Env: env, Sim: s, Client: env.Client}
	worldBefore := readWorld(b, mgr, admin, env.Config.Host)
	start := time.Now()
	plan, err := run.CreatePlan(ctx, v1beta1.UpgradePlanSpec{}, u.annotations)
	if err != nil {
		b.Fatal(err)
	}
	// A manager that ends before the plan does ends the wait.
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-mgr.gone:
			cancel()
		case <-waitCtx.Done():
		}
	}()
	final, err := run.WaitFinished(waitCtx, plan.Name, func(p *v1beta1.UpgradePlan) { world.see(p, nodes) })
	select {
	case <-mgr.gone:
		b.Fatalf("the manager ended before the plan did (%v): %v", mgr.exit, err)
	default:
	}
	if err != nil {
		// Where the time went, for a run that missed its deadline.
		b.Fatal(err, "\n", phaseTimes(mgr.scrape(b).phases))
	}
	wall := time.Since(start)
	if final.Status.CurrentPhase != v1beta1.PhaseSucceeded {
		b.Fatalf("the upgrade ended in %s: %+v", final.Status.CurrentPhase, final.Condition(v1beta1.ConditionProgressing))
	}
	worldAfter := readWorld(b, mgr, admin, env.Config.Host)
	before := mgr.scrape(b)
	time.Sleep(2 * time.Second)
	after := mgr.scrape(b)
	r := &result{nodes: nodes, wall: wall, reconciles: after.reconciles, requests: after.requests, bytes: before.bytes, reconcileTime: after.reconcileTime, cpu: before.cpu,
		writes: after.writes(), quietWrites: after.writes() - before.writes(), quiet: map[string]int{}, phases: after.phases,
		nodeUpdates: churn.total(), churn: churn.String(), tail: world.tail(), floors: world.floors(),
		jobFloors: world.floors(workJob, workReboot), watchedPhases: world.phases()}
	r.worldCPU, r.worldTotal = cpuSince(worldBefore.cpu, worldAfter.cpu)
	r.worldCPU += busiest(worldBefore.requests, worldAfter.requests, 15)
	for _, st := range pipeline.Steps {
		if f := r.floors[st.Name]; f > 0 && r.watchedPhases[st.Name] > f*12/10 {
			r.toolkitTime += world.toolkitTime(st.Name, 8)
		}
	}
	for _, v := range before.bytes {
		r.sent += v.Sent
		r.received += v.Received
	}
	for k, n := range after.requests {
		if d := n - before.requests[k]; d > 0 && isWrite(k) {
			r.quiet[k] = d
		}
	}
	r.memory = mgr.peaks()
	return r
}

// manager is the toolkit's manager running as a process.
type manager struct {
	cmd     *exec.Cmd
	metrics string
	// pprof is where the manager serves its profiles, if profilesEnv asks
	// for them.
	pprof string
	nodes int
	mu    sync.Mutex
	// rss, rssFile and rssAt: the largest resident set sampled, its
	// file-backed part and when; heap: the heap peak.
	rss, rssFile, heap uint64
	rssAt              time.Duration
	done               chan struct{}
	// gone is closed when the process ended, with exit its end.
	gone chan struct{}
	exit error
}

func startManager(b *testing.B, env *testenv.Env, s *sim.Sim, nodes int, extraArgs []string) *manager {
	b.Helper()
	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		b.Fatal(err)
	}
	port := freePort(b)
	m := &manager{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nodes: nodes, done: make(chan struct{})}
	args := []string{"manager", "--kubeconfig", kubeconfig,
		// Plain HTTP on loopback: the benchmark scrapes without credentials.
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--metrics-secure=false", "--health-probe-bind-address", "0",
		"--repo-url", s.RepoURL("{namespace}", "{service}"),
		// The embedded API server's certificate is valid for a week.
		"--min-certs-expiration-days", "1",
		"--zap-log-level", "error"}
	args = append(args, extraArgs...)
	args = append(args, strings.Fields(os.Getenv(managerArgsEnv))...)
	if os.Getenv(profilesEnv) != "" {
		m.pprof = fmt.Sprintf("127.0.0.1:%d", freePort(b))
		args = append(args, "--pprof-bind-address", m.pprof)
	}
	m.cmd = exec.Command(binary, args...)
	m.cmd.Env = append(os.Environ(), "ENABLE_WEBHOOKS=false")
	m.cmd.Stderr = os.Stderr
	// A killed benchmark must not leave a manager running.
	exited, err := testenv.StartTied(m.cmd)
	if err != nil {
		b.Fatal(err)
	}
	m.gone = make(chan struct{})
	go func() {
		m.exit = <-exited
		close(m.gone)
	}()
	go m.sample()
	if m.pprof != "" {
		go m.profile(filepath.Join(os.Getenv(profilesEnv), fmt.Sprintf("nodes-%d", m.nodes)))
	}
	return m
}

// managerArgsEnv adds flags to the manager's command line, e.g.
// "--upgrade-log=false" to measure it without the capture of the logs.
const managerArgsEnv = "BENCH_MANAGER_ARGS"

// profilesEnv names a directory that receives the manager's CPU profiles
// (cpu-N.pprof, 10 s each, for the whole run; `go tool pprof` merges them),
// its heap profile at the end, and the world's API server's CPU profiles
// (apiserver-cpu-N.pprof), one subdirectory per size.
const profilesEnv = "BENCH_PROFILES"

// profile saves the manager's CPU profile, 10 s at a time, until it stops.
func (m *manager) profile(dir string) {
	profileCPU(http.DefaultClient, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=10", m.pprof), dir, "cpu", m.done)
}

// profileCPU saves a process's CPU profiles from url (a pprof profile
// endpoint answering in 10 s) as dir/<name>-NNN.pprof, one after the other,
// until done is closed.
func profileCPU(c *http.Client, url, dir, name string, done <-chan struct{}) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "profiles:", err)
		return
	}
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		default:
		}
		_ = save(c, url, filepath.Join(dir, fmt.Sprintf("%s-%03d.pprof", name, i)))
	}
}

// save writes what url answers to file.
func save(c *http.Client, url, file string) error {
	resp, err := c.Get(url)
	if err != nil {
		time.Sleep(time.Second) // not listening yet
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		time.Sleep(time.Second) // no answer to loop on
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, resp.Body)
	return errors.Join(err, out.Close())
}

// sample follows the manager's memory: its resident set from /proc four
// times a second (which costs the manager nothing), with what of it was the
// binary's own pages (RssFile) at the peak and when the peak came; and its
// heap from its metrics every five seconds, since each scrape costs the
// manager CPU time in proportion to the nodes (a series per node).
func (m *manager) sample() {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for tick := 0; ; tick++ {
		select {
		case <-m.done:
			return
		case <-t.C:
		}
		if mem, err := memoryOf(m.cmd.Process.Pid); err == nil {
			m.mu.Lock()
			if mem["VmRSS"] > m.rss {
				m.rss, m.rssFile, m.rssAt = mem["VmRSS"], mem["RssFile"], time.Since(start)
			}
			m.mu.Unlock()
		}
		if tick%20 != 0 {
			continue
		}
		if fams, err := fetch(m.metrics); err == nil {
			if f := fams["go_memstats_heap_inuse_bytes"]; f != nil && len(f.Metric) > 0 {
				m.mu.Lock()
				m.heap = max(m.heap, uint64(f.Metric[0].GetGauge().GetValue()))
				m.mu.Unlock()
			}
		}
	}
}

// memoryOf reads a process's memory figures from /proc, in bytes: VmRSS,
// VmHWM (its peak), RssFile (the file-backed part: the binary's pages,
// shared with the page cache).
func memoryOf(pid int) (map[string]uint64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if fields := strings.Fields(line); len(fields) == 3 && fields[2] == "kB" {
			kb, _ := strconv.ParseUint(fields[1], 10, 64)
			out[strings.TrimSuffix(fields[0], ":")] = kb << 10
		}
	}
	return out, nil
}

// memory is what sample saw of the manager's memory.
type memory struct {
	// rss is the peak resident set (VmHWM), rssFile the binary's pages in
	// the largest one sampled, at rssAt after the start.
	rss, rssFile uint64
	rssAt        time.Duration
	heap         uint64
}

// peaks returns the process's peak resident set (VmHWM), what sample saw
// of it, and the heap peak.
func (m *manager) peaks() memory {
	m.mu.Lock()
	mem := memory{rss: m.rss, rssFile: m.rssFile, rssAt: m.rssAt, heap: m.heap}
	m.mu.Unlock()
	if now, err := memoryOf(m.cmd.Process.Pid); err == nil {
		mem.rss = now["VmHWM"]
	}
	return mem
}

func (m *manager) stop() {
	if m.pprof != "" {
		dir := filepath.Join(os.Getenv(profilesEnv), fmt.Sprintf("nodes-%d", m.nodes))
		_ = save(http.DefaultClient, fmt.Sprintf("http://%s/debug/pprof/heap", m.pprof), filepath.Join(dir, "heap.pprof"))
	}
	close(m.done)
	_ = m.cmd.Process.Kill()
	<-m.gone
}

// phaseTimes lists the time spent in each completed phase, in pipeline order.
func phaseTimes(phases map[string]time.Duration) string {
	var b strings.Builder
	for _, st := range pipeline.Steps {
		if d, ok := phases[st.Name]; ok {
			fmt.Fprintf(&b, "  phase      %-20s %s\n", st.Name, d.Round(time.Millisecond))
		}
	}
	return b.String()
}

// counts are the manager's counters at one moment.
type counts struct {
	reconciles    map[string]int
	reconcileTime time.Duration
	cpu           time.Duration
	requests      map[string]int
	bytes         map[string]apicount.Bytes
	// phases is the time the plan spent in each phase it completed.
	phases map[string]time.Duration
}

func isWrite(key string) bool { return apicount.IsWrite(strings.Fields(key)[0]) }

func (c counts) writes() int {
	n := 0
	for k, v := range c.requests {
		if isWrite(k) {
			n += v
		}
	}
	return n
}

func (m *manager) scrape(b *testing.B) counts {
	b.Helper()
	fams, err := fetch(m.metrics)
	if err != nil {
		b.Fatal(err)
	}
	c := counts{reconciles: map[string]int{}, requests: map[string]int{}, bytes: map[string]apicount.Bytes{}, phases: map[string]time.Duration{}}
	for _, mt := range fams[metrics.PhaseDurationName].GetMetric() {
		c.phases[label(mt, "phase")] += time.Duration(mt.GetHistogram().GetSampleSum() * float64(time.Second))
	}
	for _, mt := range fams["controller_runtime_reconcile_total"].GetMetric() {
		c.reconciles[label(mt, "controller")] += int(mt.GetCounter().GetValue())
	}
	for _, mt := range fams["process_cpu_seconds_total"].GetMetric() {
		c.cpu = time.Duration(mt.GetCounter().GetValue() * float64(time.Second))
	}
	for _, mt := range fams["controller_runtime_reconcile_time_seconds"].GetMetric() {
		c.reconcileTime += time.Duration(mt.GetHistogram().GetSampleSum() * float64(time.Second))
	}
	for _, mt := range fams["upgrade_toolkit_api_requests_total"].GetMetric() {
		c.requests[label(mt, "verb")+" "+label(mt, "resource")] += int(mt.GetCounter().GetValue())
	}
	for _, mt := range fams["upgrade_toolkit_api_bytes_total"].GetMetric() {
		k, v := label(mt, "verb")+" "+label(mt, "resource"), int64(mt.GetCounter().GetValue())
		b := c.bytes[k]
		if label(mt, "direction") == "sent" {
			b.Sent += v
		} else {
			b.Received += v
		}
		c.bytes[k] = b
	}
	return c
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func fetch(url string) (map[string]*dto.MetricFamily, error) {
	return fetchWith(http.DefaultClient, url)
}

// fetchWith reads the metrics url serves, with client c.
func fetchWith(c *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// Uncompressed: gzip would cost the manager more CPU than the scrape.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var parser expfmt.TextParser
	return parser.TextToMetricFamilies(resp.Body)
}

func freePort(b *testing.B) int {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

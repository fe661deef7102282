package repo_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/harvester/upgrade-toolkit/internal/repo"
	"github.com/harvester/upgrade-toolkit/internal/repo/isotest"
)

// The benchmarks serve the same files from the repo server (reading an
// ISO) and from nginx (reading the files extracted to a directory, with
// sendfile), each in its own process started by the benchmark, and report
// throughput, request latency and the server process's peak memory and CPU.

const (
	benchLargeFile = "bundle/harvester/images/harvester-images-v1.8.0.tar.zst"
	benchLargeSize = 1 << 30
	benchSmallFile = "harvester-release.yaml"
	// benchServeEnv makes the test binary run as the repo server process.
	benchServeEnv = "REPO_BENCH_SERVE"
)

var benchFixture struct {
	once      sync.Once
	dir       string // holds tree/ and release.iso
	tree, iso string
	err       error
}

// benchISO writes a tree with a 1 GiB archive and builds its ISO, once per
// benchmark run.
func benchISO(b *testing.B) (tree, iso string) {
	b.Helper()
	benchFixture.once.Do(func() {
		dir, err := os.MkdirTemp("", "repo-bench-")
		if err != nil {
			benchFixture.err = err
			return
		}
		// nginx's workers may run as another user: let them read the tree.
		if err := os.Chmod(dir, 0o755); err != nil {
			benchFixture.err = err
			return
		}
		benchFixture.dir = dir
		benchFixture.tree, benchFixture.iso = filepath.Join(dir, "tree"), filepath.Join(dir, "release.iso")
		benchFixture.err = writeBenchTree(benchFixture.tree)
		if benchFixture.err == nil {
			isotest.Build(b, benchFixture.tree, benchFixture.iso)
		}
	})
	if benchFixture.err != nil || benchFixture.iso == "" {
		b.Fatalf("preparing the benchmark ISO: %v", benchFixture.err)
	}
	return benchFixture.tree, benchFixture.iso
}

func writeBenchTree(tree string) error {
	big := filepath.Join(tree, filepath.FromSlash(benchLargeFile))
	if err := os.MkdirAll(filepath.Dir(big), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tree, benchSmallFile), []byte("harvester: v1.8.0\nos: Harvester v1.8.0\n"), 0o644); err != nil {
		return err
	}
	f, err := os.Create(big)
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{'b', 'e', 'n', 'c', 'h'})
	buf := make([]byte, 4<<20)
	for written := 0; written < benchLargeSize; written += len(buf) {
		_, _ = rng.Read(buf)
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return f.Close()
}

// benchServer is a server process under test.
type benchServer struct {
	name string
	base string // URL of /harvester-iso/
	cmd  *exec.Cmd
}

func startRepoProcess(b *testing.B, iso string) *benchServer {
	b.Helper()
	addr := freeAddr(b)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchServeEnv+"="+iso+","+addr)
	cmd.Stderr = logFile(b, "repo.log")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	s := &benchServer{name: "repo", base: "http://" + addr + repo.PathPrefix, cmd: cmd}
	b.Cleanup(func() { s.stop(syscall.SIGTERM) })
	waitReady(b, "http://"+addr+repo.ReadyzPath)
	return s
}

// serveForBenchmark runs the repo server in this process when the
// benchmark started it; it returns false otherwise.
func serveForBenchmark() bool {
	iso, addr, ok := strings.Cut(os.Getenv(benchServeEnv), ",")
	if !ok {
		return false
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	srv, err := repo.NewServer(repo.Options{ISOPath: iso, Logger: log})
	if err == nil {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
			defer stop()
			err = srv.Run(ctx, ln)
		}
	}
	if err != nil {
		log.Error("benchmark server", "error", err)
		os.Exit(1)
	}
	return true
}

func startNginx(b *testing.B, tree string) *benchServer {
	b.Helper()
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		b.Fatal("nginx is not installed; the benchmark compares the repo with it: run hack/install-deps.sh (Debian package nginx)")
	}
	dir := b.TempDir()
	addr := freeAddr(b)
	u, err := user.Current()
	if err != nil {
		b.Fatal(err)
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		b.Fatal(err)
	}
	// A typical static-file setup: sendfile, tcp_nopush, one worker per
	// core, an access log. "user" only matters when started as root.
	conf := fmt.Sprintf(`daemon off;
user %[4]s %[5]s;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
	access_log %[1]s/access.log;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	sendfile on;
	tcp_nopush on;
	keepalive_timeout 65;
	types { application/yaml yaml; application/zstd zst; }
	default_type application/octet-stream;
	server {
		listen %[2]s;
		location /harvester-iso/ { alias %[3]s/; }
	}
}
`, dir, addr, tree, u.Username, g.Name)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(nginx, "-c", confPath, "-p", dir, "-e", filepath.Join(dir, "error.log"))
	cmd.Stderr = logFile(b, "nginx.log")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	s := &benchServer{name: "nginx", base: "http://" + addr + "/harvester-iso/", cmd: cmd}
	b.Cleanup(func() { s.stop(syscall.SIGQUIT) })
	waitReady(b, s.base+benchSmallFile)
	return s
}

func (s *benchServer) stop(sig syscall.Signal) {
	_ = s.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// usage is the peak resident memory and the CPU time of the server's
// processes (nginx: master and workers).
func (s *benchServer) usage(b *testing.B) (peakRSS int64, cpu time.Duration) {
	b.Helper()
	pids := append([]int{s.cmd.Process.Pid}, childPIDs(s.cmd.Process.Pid)...)
	ticks := int64(100) // USER_HZ on Linux
	for _, pid := range pids {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				peakRSS += kb << 10
			}
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu += time.Duration((ut+st)*int64(time.Second)) / time.Duration(ticks)
	}
	return peakRSS, cpu
}

func childPIDs(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// BenchmarkLargeFile downloads a 1 GiB file with 1, 8 and 64 concurrent
// clients; an operation is every client downloading it once.
func BenchmarkLargeFile(b *testing.B) {
	tree, iso := benchISO(b)
	for _, server := range []string{"repo", "nginx"} {
		for _, clients := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("server=%s/clients=%d", server, clients), func(b *testing.B) {
				s := startBench(b, server, tree, iso)
				client := benchClient(clients)
				_, cpuBefore := s.usage(b)
				var latencies, firstBytes []time.Duration
				var mu sync.Mutex
				b.SetBytes(int64(clients) * benchLargeSize)
				b.ResetTimer()
				for range b.N {
					var wg sync.WaitGroup
					for range clients {
						wg.Go(func() {
							total, first := download(b, client, s.base+benchLargeFile, benchLargeSize)
							mu.Lock()
							latencies, firstBytes = append(latencies, total), append(firstBytes, first)
							mu.Unlock()
						})
					}
					wg.Wait()
				}
				b.StopTimer()
				peak, cpuAfter := s.usage(b)
				reportLatency(b, "s", latencies, time.Second)
				reportLatency(b, "ms-first-byte", firstBytes, time.Millisecond)
				b.ReportMetric(float64(peak)/(1<<20), "server-peak-RSS-MiB")
				b.ReportMetric((cpuAfter-cpuBefore).Seconds()/float64(b.N*clients), "server-CPU-s/GiB")
			})
		}
	}
}

// BenchmarkSmallFile fetches the release file with 64 concurrent clients;
// an operation is one request.
func BenchmarkSmallFile(b *testing.B) {
	tree, iso := benchISO(b)
	for _, server := range []string{"repo", "nginx"} {
		b.Run("server="+server+"/clients=64", func(b *testing.B) {
			s := startBench(b, server, tree, iso)
			client := benchClient(64)
			want := int64(len(isotest.MustRead(b, tree, benchSmallFile)))
			var latencies []time.Duration
			var mu sync.Mutex
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					total, _ := download(b, client, s.base+benchSmallFile, want)
					mine = append(mine, total)
				}
				mu.Lock()
				latencies = append(latencies, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			reportLatency(b, "ms", latencies, time.Millisecond)
			peak, _ := s.usage(b)
			b.ReportMetric(float64(peak)/(1<<20), "server-peak-RSS-MiB")
		})
	}
}

func startBench(b *testing.B, server, tree, iso string) *benchServer {
	if server == "nginx" {
		return startNginx(b, tree)
	}
	return startRepoProcess(b, iso)
}

func benchClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
	}}
}

// download GETs url, reads the body with a large buffer and checks its
// length; it returns the time to the last and to the first byte.
func download(b *testing.B, client *http.Client, url string, size int64) (total, first time.Duration) {
	start := time.Now()
	resp, err := client.Get(url)
	if err != nil {
		b.Error(err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	buf := bufPool.Get().(*[]byte)
	defer bufPool.Put(buf)
	var n int64
	for {
		m, err := resp.Body.Read(*buf)
		if n == 0 && m > 0 {
			first = time.Since(start)
		}
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Error(err)
			return
		}
	}
	if resp.StatusCode != http.StatusOK || n != size {
		b.Errorf("GET %s: %s, %d bytes, want %d", url, resp.Status, n, size)
	}
	return time.Since(start), first
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

func reportLatency(b *testing.B, unit string, d []time.Duration, scale time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))]) / float64(scale) }
	b.ReportMetric(at(0.50), "p50-"+unit)
	b.ReportMetric(at(0.99), "p99-"+unit)
}

func freeAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

func waitReady(b *testing.B, url string) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("%s did not answer 200 within 30s", url)
}

func logFile(b *testing.B, name string) *os.File {
	f, err := os.Create(filepath.Join(b.TempDir(), name))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })
	return f
}

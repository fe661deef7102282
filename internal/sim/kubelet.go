package sim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// ErrNoGlobalUnicastAddress means the machine has no address the API server
// would proxy to. The API server's node proxy refuses loopback and link-local
// addresses, so a simulated kubelet needs a global-unicast address of this
// machine. Without one, start the simulator with Config.NoKubelet and skip the
// toolkit's disk-space check (annotation
// management.harvesterhci.io/skip-garbage-collection-threshold-check=true).
var ErrNoGlobalUnicastAddress = errors.New("sim: this machine has no global-unicast IP address for the simulated kubelets " +
	"(the API server's node proxy refuses loopback and link-local addresses); " +
	"set Config.NoKubelet and skip the disk-space check")

// KubeletAddress returns the address the simulated kubelets listen on: the
// first global-unicast address of an interface that is up, IPv4 preferred.
func KubeletAddress() (net.IP, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("sim: listing network interfaces: %w", err)
	}
	var v6 net.IP
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipnet, ok := a.(*net.IPNet)
			if !ok || !ipnet.IP.IsGlobalUnicast() {
				continue
			}
			if ip4 := ipnet.IP.To4(); ip4 != nil {
				return ip4, nil
			}
			if v6 == nil {
				v6 = ipnet.IP
			}
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, ErrNoGlobalUnicastAddress
}

// kubelets runs one HTTPS listener per node, each serving that node's
// /stats/summary, /configz and containers' logs the way a kubelet does,
// unless the fault set makes the node's kubelet refuse or hang.
type kubelets struct {
	ip      net.IP
	logs    *podLogs
	faults  *faults
	cert    tls.Certificate
	mu      sync.Mutex
	servers map[string]*http.Server
	ports   map[string]int32
}

func startKubelets(ip net.IP, disks map[string]Disk, logs *podLogs, f *faults) (*kubelets, error) {
	cert, err := selfSignedCert(ip)
	if err != nil {
		return nil, err
	}
	k := &kubelets{ip: ip, logs: logs, faults: f, cert: cert, servers: map[string]*http.Server{}, ports: map[string]int32{}}
	for node, disk := range disks {
		if err := k.serve(node, disk); err != nil {
			k.stop()
			return nil, err
		}
	}
	return k, nil
}

func (k *kubelets) serve(node string, disk Disk) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(k.ip.String(), "0"))
	if err != nil {
		return fmt.Errorf("sim: kubelet of node %s cannot listen on %s: %w", node, k.ip, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats/summary", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, summary(node, disk))
	})
	mux.HandleFunc("GET /configz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"kubeletconfig": kubeletconfigv1beta1.KubeletConfiguration{
			ImageGCHighThresholdPercent: ptr.To(disk.ImageGCHighThresholdPercent),
		}})
	})
	// The log of a Job's pod: what its work logged (podLogs).
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		opts, err := parseLogOptions(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		k.logs.count(r.PathValue("namespace"), r.PathValue("pod"), opts.follow)
		w.Header().Set("Content-Type", "text/plain")
		flush := func() {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		if !k.logs.serve(r.Context(), w, flush, r.PathValue("namespace"), r.PathValue("pod"), opts) {
			http.Error(w, fmt.Sprintf("pod %q does not exist", r.PathValue("pod")), http.StatusNotFound)
		}
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Handler: k.faulty(node, mux), ReadHeaderTimeout: 10 * time.Second}
	tlsLn := tls.NewListener(&faultyListener{Listener: ln, node: node, faults: k.faults}, &tls.Config{Certificates: []tls.Certificate{k.cert}, MinVersion: tls.VersionTLS12})
	go func() { _ = srv.Serve(tlsLn) }()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.servers[node] = srv
	k.ports[node] = int32(ln.Addr().(*net.TCPAddr).Port) //nolint:gosec // a TCP port fits
	return nil
}

// faultyListener plays a kubelet that the API server cannot reach: while
// the fault set says so, a connection is closed at once (refused) or held
// without a byte sent until its client gives up (hung).
type faultyListener struct {
	net.Listener
	node   string
	faults *faults
}

func (l *faultyListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		switch {
		case l.faults.kubeletRefuses(l.node):
			_ = conn.Close()
		case l.faults.kubeletHangs(l.node):
			// Read and drop what the client sends until it hangs up.
			go func() {
				defer func() { _ = conn.Close() }()
				_, _ = io.Copy(io.Discard, conn)
			}()
		default:
			return conn, nil
		}
	}
}

// faulty serves a node's requests unless a fault set after the API server
// connected (its connections are kept alive) makes the kubelet refuse
// (the connection is dropped) or hang (no answer until the client gives up).
func (k *kubelets) faulty(node string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case k.faults.kubeletRefuses(node):
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			http.Error(w, "kubelet unreachable", http.StatusBadGateway)
		case k.faults.kubeletHangs(node):
			<-r.Context().Done()
		default:
			h.ServeHTTP(w, r)
		}
	})
}

func (k *kubelets) port(node string) int32 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ports[node]
}

func (k *kubelets) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, srv := range k.servers {
		_ = srv.Shutdown(context.Background())
	}
}

// parseLogOptions reads the query of a /containerLogs request as the
// kubelet does: follow, timestamps, sinceTime (RFC 3339) or sinceSeconds,
// tailLines.
func parseLogOptions(q url.Values) (logOptions, error) {
	opts := logOptions{tail: -1, follow: q.Get("follow") == "true", timestamps: q.Get("timestamps") == "true"}
	if v := q.Get("sinceTime"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return opts, fmt.Errorf("sinceTime %q: %w", v, err)
		}
		opts.since = t
	}
	if v := q.Get("sinceSeconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return opts, fmt.Errorf("sinceSeconds %q: must be a positive integer", v)
		}
		opts.since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	if v := q.Get("tailLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return opts, fmt.Errorf("tailLines %q: must be a non-negative integer", v)
		}
		opts.tail = n
	}
	return opts, nil
}

// summary is a kubelet stats summary carrying the node's filesystems; the
// image filesystem is the root filesystem, as on a Harvester node.
func summary(node string, d Disk) statsv1alpha1.Summary {
	avail := d.CapacityBytes - min(d.UsedBytes, d.CapacityBytes)
	fs := &statsv1alpha1.FsStats{
		Time:           metav1.Now(),
		CapacityBytes:  ptr.To(d.CapacityBytes),
		UsedBytes:      ptr.To(d.UsedBytes),
		AvailableBytes: ptr.To(avail),
	}
	return statsv1alpha1.Summary{
		Node: statsv1alpha1.NodeStats{
			NodeName:  node,
			StartTime: metav1.Now(),
			Fs:        fs,
			Runtime:   &statsv1alpha1.RuntimeStats{ImageFs: fs, ContainerFs: fs},
		},
		Pods: []statsv1alpha1.PodStats{},
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// selfSignedCert makes a serving certificate for ip. The API server does not
// verify kubelet certificates unless it is given a kubelet CA, which envtest
// is not.
func selfSignedCert(ip net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("sim: kubelet key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "sim-kubelet"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{ip},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("sim: kubelet certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Package chaos runs whole simulated upgrades under faults: the manager as
// its own processes, killed with SIGKILL; its API requests failing through
// a fault-injecting proxy in front of the real API server; outages of that
// API server as its clients see a restart; leader handovers between two
// replicas. Each run is seeded, checked against the upgrade's invariants and
// timed.
package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// The kinds of injected faults, as Proxy.Counts reports them.
const (
	FaultInternalError = "500"
	FaultThrottled     = "429"
	FaultConflict      = "409"
	// FaultTimeout: the request reaches the API server and takes effect, but
	// its answer is lost; the client sees a timeout.
	FaultTimeout = "timeout"
	// FaultWatchBroken: a watch ends early.
	FaultWatchBroken = "watch-broken"
	// FaultOutage: a request refused while the API server is down.
	FaultOutage = "outage"
)

// Proxy stands between the manager and the real API server, which it
// reaches as an administrator, and fails a share of the requests. It
// serves plain HTTP on the loopback interface.
type Proxy struct {
	upstream  *url.URL
	transport http.RoundTripper
	proxy     *httputil.ReverseProxy
	srv       *http.Server
	addr      string

	mu          sync.Mutex
	rng         *rand.Rand
	rate        float64
	outageUntil time.Time
	counts      map[string]int
	watches     map[int]context.CancelFunc
	nextWatch   int
}

// NewProxy starts a proxy to the API server of cfg that fails the given
// share of requests (0 to 1), with faults drawn from seed.
func NewProxy(cfg *rest.Config, seed uint64, rate float64) (*Proxy, error) {
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		upstream: upstream, transport: transport, addr: ln.Addr().String(),
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rate: rate,
		counts: map[string]int{}, watches: map[int]context.CancelFunc{},
	}
	p.proxy = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(upstream); r.Out.Host = upstream.Host },
		Transport:     transport,
		FlushInterval: -1,
		// A watch the proxy breaks ends with an error it would log.
		ErrorLog: log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeStatus(w, http.StatusBadGateway, "ServiceUnavailable", "chaos proxy: "+err.Error())
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Host is the proxy's address for a rest.Config or kubeconfig.
func (p *Proxy) Host() string { return "http://" + p.addr }

// Close stops the proxy.
func (p *Proxy) Close() error { return p.srv.Close() }

// Counts returns how many faults of each kind were injected.
func (p *Proxy) Counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.counts))
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// Outage makes the API server unreachable for d, as while it restarts:
// every watch breaks at once and every request is refused until then.
func (p *Proxy) Outage(d time.Duration) {
	p.mu.Lock()
	p.outageUntil = time.Now().Add(d)
	cancels := p.watches
	p.watches = map[int]context.CancelFunc{}
	p.counts[FaultWatchBroken] += len(cancels)
	p.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
}

// decide draws the fault for one request, "" for none.
func (p *Proxy) decide(r *http.Request, watch bool) (fault string, watchBreak time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.outageUntil) {
		p.counts[FaultOutage]++
		return FaultOutage, 0
	}
	if p.rng.Float64() >= p.rate {
		return "", 0
	}
	if watch {
		p.counts[FaultWatchBroken]++
		return FaultWatchBroken, time.Duration(1+p.rng.IntN(10)) * time.Second
	}
	kinds := []string{FaultInternalError, FaultThrottled, FaultTimeout}
	if r.Method == http.MethodPut || r.Method == http.MethodPatch {
		kinds = append(kinds, FaultConflict)
	}
	fault = kinds[p.rng.IntN(len(kinds))]
	p.counts[fault]++
	return fault, 0
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	watch := r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
	fault, watchBreak := p.decide(r, watch)
	switch fault {
	case FaultOutage:
		// A restarting API server refuses connections: the client sees the
		// connection close without an answer.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "chaos: the API server is restarting")
	case FaultInternalError:
		writeStatus(w, http.StatusInternalServerError, "InternalError", "chaos: an injected internal error")
	case FaultThrottled:
		w.Header().Set("Retry-After", "1")
		writeStatus(w, http.StatusTooManyRequests, "TooManyRequests", "chaos: too many requests, try again later")
	case FaultConflict:
		writeStatus(w, http.StatusConflict, "Conflict", "chaos: Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again")
	case FaultTimeout:
		p.applyAndLose(r)
		writeStatus(w, http.StatusGatewayTimeout, "Timeout", "chaos: the request timed out; its outcome is unknown")
	case FaultWatchBroken:
		ctx, cancel := context.WithTimeout(r.Context(), watchBreak)
		defer cancel()
		p.proxy.ServeHTTP(w, r.WithContext(ctx))
	default:
		if !watch {
			p.proxy.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		p.mu.Lock()
		id := p.nextWatch
		p.nextWatch++
		p.watches[id] = cancel
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.watches, id)
			p.mu.Unlock()
		}()
		p.proxy.ServeHTTP(w, r.WithContext(ctx))
	}
}

// applyAndLose sends the request to the API server and throws the answer
// away.
func (p *Proxy) applyAndLose(r *http.Request) {
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = p.upstream.Scheme, p.upstream.Host, p.upstream.Host, ""
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// writeStatus answers as the API server does, with a Status object.
func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": msg, "reason": reason, "code": code,
	})
}

// String summarises the faults injected.
func (p *Proxy) String() string { return fmt.Sprint(p.Counts()) }

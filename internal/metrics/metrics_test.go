package metrics_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
	"github.com/harvester/upgrade-toolkit/internal/rbactest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var (
	env *testenv.Env
	// managerSA has the role generated from this package's markers.
	managerSA *rbactest.Identity
)

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(asManager{m}, &env)) }

type asManager struct{ m *testing.M }

func (a asManager) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	managerSA, err = rbactest.Bind(ctx, env, types.NamespacedName{Namespace: cluster.HarvesterNamespace, Name: "upgrade-toolkit"}, rbactest.MetricsAuthRole)
	if err == nil {
		// The scraper, bound to the role the chart offers scrapers.
		_, err = rbactest.Bind(ctx, env, types.NamespacedName{Namespace: "default", Name: "prometheus"}, "config/rbac/metrics_reader_role.yaml")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return managerSA.Verdict(a.m.Run())
}

func TestSecureMetricsNeedAnAuthorizedToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := startServer(ctx, t, metrics.ServerOptions(freeAddr(t), true), "https")
	// The scraper is bound to the role the chart offers scrapers (TestMain);
	// the other ServiceAccount to nothing.
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nosy"}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		who        string
		token      string
		wantStatus int
	}{
		{"no one", "", http.StatusUnauthorized},
		// A token the API server does not accept is no one, not an error.
		{"a stranger", "not-a-token", http.StatusUnauthorized},
		{"a ServiceAccount without the metrics reader role", token(ctx, t, "nosy"), http.StatusForbidden},
		{"the scraper", token(ctx, t, "prometheus"), http.StatusOK},
	}
	for _, tt := range tests {
		status, body := scrape(t, url, tt.token)
		if status != tt.wantStatus {
			t.Errorf("%s got %d, want %d: %s", tt.who, status, tt.wantStatus, body)
		}
		if status == http.StatusOK && !strings.Contains(body, "# HELP") {
			t.Errorf("%s got no metrics: %.200s", tt.who, body)
		}
	}
}

func TestInsecureMetricsAreOpen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := startServer(ctx, t, metrics.ServerOptions(freeAddr(t), false), "http")
	if status, body := scrape(t, url, ""); status != http.StatusOK {
		t.Errorf("got %d: %s", status, body)
	}
}

// startServer runs a metrics server as the manager and returns its URL
// once it answers.
func startServer(ctx context.Context, t *testing.T, o metricsserver.Options, scheme string) string {
	t.Helper()
	cfg := managerSA.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := metricsserver.NewServer(o, cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metrics server: %v", err)
		}
	})
	url := scheme + "://" + o.BindAddress + "/metrics"
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := get(url, ""); err == nil {
			return url
		}
	}
	t.Fatalf("the metrics server at %s does not answer", url)
	return ""
}

func scrape(t *testing.T, url, token string) (int, string) {
	t.Helper()
	resp, err := get(url, token)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func get(url, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	//nolint:gosec // the server's certificate is self-signed
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return c.Do(req)
}

// token issues a token for a ServiceAccount of the default namespace.
func token(ctx context.Context, t *testing.T, sa string) string {
	t.Helper()
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("issuing a token for %s: %v", sa, err)
	}
	return tr.Status.Token
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// TestScrapersVerdictsAreKept: a scraper's token and access are asked of
// the API server once, not on every scrape, until their time is up; a
// denial is kept only briefly.
func TestScrapersVerdictsAreKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "snoop"}}); err != nil {
		t.Fatal(err)
	}
	cfg := managerSA.Config()
	var asked atomic.Int32
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) { asked.Add(1); return rt.RoundTrip(r) })
	})
	now := time.Now()
	check, err := metrics.NewCheck(cfg, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	scrape := func(tok string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://manager/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		status, _ := check(req)
		return status
	}
	for _, tt := range []struct {
		who        string
		token      string
		want       int
		later      time.Duration // when the verdict is asked again
		askedAgain bool
	}{
		{"the scraper", token(ctx, t, "prometheus"), http.StatusOK, 50 * time.Second, false},
		{"the scraper, its token's review expired", "", http.StatusOK, 2 * time.Minute, true},
		{"a ServiceAccount without the role", token(ctx, t, "snoop"), http.StatusForbidden, 40 * time.Second, true},
	} {
		tok := tt.token
		if tok == "" {
			tok = token(ctx, t, "prometheus")
		}
		if got := scrape(tok); got != tt.want {
			t.Fatalf("%s: got %d, want %d", tt.who, got, tt.want)
		}
		before := asked.Load()
		if got := scrape(tok); got != tt.want || asked.Load() != before {
			t.Errorf("%s, again at once: got %d and %d requests to the API server, want %d and none", tt.who, got, asked.Load()-before, tt.want)
		}
		now = now.Add(tt.later)
		before = asked.Load()
		if got := scrape(tok); got != tt.want || (asked.Load() != before) != tt.askedAgain {
			t.Errorf("%s, %s later: got %d and %d requests to the API server, want %d and asked again %v", tt.who, tt.later, got, asked.Load()-before, tt.want, tt.askedAgain)
		}
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

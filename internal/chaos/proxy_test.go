package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, &env)) }

// send makes one request through the proxy, without client-go (which would
// retry a 429 or a refused connection itself), and returns the API error
// the answer means, nil for a success.
func send(t *testing.T, p *Proxy, method, path string, body any) error {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(method, p.Host()+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 300 {
		return nil
	}
	var st metav1.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("%s %s: %d without a Status: %v", method, path, resp.StatusCode, err)
	}
	if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
		t.Errorf("a 429 without Retry-After")
	}
	return apierrors.FromObject(&st)
}

// Each injected fault is the API server's own error of that kind, as
// client-go reads it; a write whose answer was lost took effect.
func TestProxyFaultsAreTheAPIServersOwn(t *testing.T) {
	p, err := NewProxy(env.Config, 7, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	ctx := context.Background()
	seen := map[string]int{}
	for i := range 120 {
		name := fmt.Sprintf("cm-%d", i)
		cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name}}
		err := send(t, p, http.MethodPost, "/api/v1/namespaces/default/configmaps", cm)
		switch {
		case err == nil:
		case apierrors.IsInternalError(err):
			seen[FaultInternalError]++
		case apierrors.IsTooManyRequests(err):
			seen[FaultThrottled]++
		case apierrors.IsTimeout(err):
			seen[FaultTimeout]++
			if _, err := admin.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("a write whose answer was lost did not take effect: %v", err)
			}
		default:
			t.Fatalf("create %d: an error of no injected kind: %v", i, err)
		}
		patch := map[string]any{"data": map[string]string{"a": "b"}}
		req := "/api/v1/namespaces/default/configmaps/" + name
		if err := send(t, p, http.MethodPatch, req, patch); apierrors.IsConflict(err) {
			seen[FaultConflict]++
		}
		if err := send(t, p, http.MethodGet, req, nil); apierrors.IsConflict(err) {
			t.Error("a read failed with a conflict")
		}
	}
	counts := p.Counts()
	for _, kind := range []string{FaultInternalError, FaultThrottled, FaultTimeout, FaultConflict} {
		if seen[kind] == 0 || counts[kind] < seen[kind] {
			t.Errorf("%s: the client saw %d, the proxy counted %d", kind, seen[kind], counts[kind])
		}
	}
}

// An outage breaks the watches at once and refuses requests until it ends.
func TestProxyOutage(t *testing.T) {
	p, err := NewProxy(env.Config, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	c := kubernetes.NewForConfigOrDie(&rest.Config{Host: p.Host()})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := c.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	p.Outage(2 * time.Second)
	select {
	case _, open := <-w.ResultChan():
		for open {
			_, open = <-w.ResultChan()
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch survived the outage")
	}
	if err := send(t, p, http.MethodGet, "/api/v1/namespaces/default/configmaps", nil); err == nil {
		t.Error("a request during the outage succeeded")
	}
	time.Sleep(2 * time.Second)
	if err := send(t, p, http.MethodGet, "/api/v1/namespaces/default/configmaps", nil); err != nil {
		t.Errorf("after the outage: %v", err)
	}
	if p.Counts()[FaultOutage] == 0 || p.Counts()[FaultWatchBroken] != 1 {
		t.Errorf("counts %v", p.Counts())
	}
}

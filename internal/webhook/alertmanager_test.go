package webhook_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// fakeAlertmanager serves Alertmanager's API v2 list of alerts
// (GET /api/v2/alerts), as a real Alertmanager of rancher-monitoring would:
// Alertmanager itself is not built here. It checks that it is asked for
// the active alerts only, neither silenced nor inhibited.
type fakeAlertmanager struct {
	url    string
	mu     sync.Mutex
	alerts []map[string]any
	broken bool
}

func (a *fakeAlertmanager) start() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		q := r.URL.Query()
		if r.URL.Path != "/api/v2/alerts" || q.Get("active") != "true" || q.Get("silenced") != "false" || q.Get("inhibited") != "false" {
			http.Error(w, "unexpected request "+r.URL.String(), http.StatusBadRequest)
			return
		}
		if a.broken {
			http.Error(w, "alertmanager is restarting", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(append([]map[string]any{}, a.alerts...))
	}))
	a.url = srv.URL
}

// fire makes an alert fire for one test.
func (a *fakeAlertmanager) fire(t *testing.T, name, severity, summary string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.alerts = append(a.alerts, map[string]any{
		"labels":      map[string]string{"alertname": name, "severity": severity},
		"annotations": map[string]string{"summary": summary},
		"startsAt":    "2026-11-27T10:00:00Z",
		"status":      map[string]any{"state": "active"},
	})
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.alerts = nil
	})
}

// fail makes the Alertmanager answer with an error for one test.
func (a *fakeAlertmanager) fail(t *testing.T) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.broken = true
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.broken = false
	})
}

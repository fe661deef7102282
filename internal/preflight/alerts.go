package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Alert is an alert firing now, as Alertmanager reports it.
type Alert struct {
	// Name is its alertname label.
	Name string
	// Severity is its severity label (critical, warning, info, ...).
	Severity string
	// Summary is its summary annotation.
	Summary  string
	StartsAt time.Time
}

// AlertSeverityCritical is the severity whose alerts are a risk.
const AlertSeverityCritical = "critical"

// AlertSource gives the alerts firing now.
type AlertSource interface {
	Firing(ctx context.Context) ([]Alert, error)
}

// Alertmanager asks an Alertmanager's API v2 for the active alerts that are
// neither silenced nor inhibited: what a human on call is being told.
type Alertmanager struct {
	// URL is the Alertmanager's base address, e.g.
	// http://rancher-monitoring-alertmanager.cattle-monitoring-system:9093.
	URL string
	// Client does the request; http.DefaultClient when nil.
	Client *http.Client
}

// alertmanagerTimeout bounds the question: admission has its own deadline.
const alertmanagerTimeout = 5 * time.Second

// Firing implements AlertSource.
func (a Alertmanager) Firing(ctx context.Context) ([]Alert, error) {
	base, err := url.Parse(strings.TrimSuffix(a.URL, "/"))
	if err != nil || base.Scheme == "" || base.Host == "" {
		return nil, fmt.Errorf("alertmanager address %q is not an http(s) URL", a.URL)
	}
	u := base.JoinPath("api", "v2", "alerts")
	u.RawQuery = url.Values{"active": {"true"}, "silenced": {"false"}, "inhibited": {"false"}}.Encode()
	ctx, cancel := context.WithTimeout(ctx, alertmanagerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	c := a.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking Alertmanager at %s: %w", a.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("asking Alertmanager at %s: %s", a.URL, resp.Status)
	}
	var got []struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		StartsAt    time.Time         `json:"startsAt"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		return nil, fmt.Errorf("reading Alertmanager's alerts from %s: %w", a.URL, err)
	}
	out := make([]Alert, 0, len(got))
	for _, g := range got {
		out = append(out, Alert{Name: g.Labels["alertname"], Severity: g.Labels["severity"], Summary: g.Annotations["summary"], StartsAt: g.StartsAt})
	}
	return out, nil
}

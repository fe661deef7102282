// Package metrics configures the manager's metrics endpoint: Prometheus
// metrics over HTTPS for scrapers that the API server authenticates (a
// bearer token, checked with a TokenReview) and authorizes (get on the
// non-resource URL /metrics, checked with a SubjectAccessReview), as
// kube-controller-manager does. config/rbac/metrics_reader_role.yaml is the
// ClusterRole to bind a scraper (e.g. Prometheus) to.
package metrics

import (
	"crypto/tls"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// The permissions the manager needs to check scrapers.
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// ServerOptions returns the options of the metrics server listening on
// addr ("0" turns it off). Secure serves HTTPS, with a self-signed
// certificate, to authenticated and authorized scrapers only; otherwise
// plain HTTP to anyone, for local runs.
func ServerOptions(addr string, secure bool) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr}
	if secure {
		o.SecureServing = true
		o.FilterProvider = apiServerAuth
		// HTTP/1.1 only: HTTP/2 stream resets can exhaust the server
		// (CVE-2023-44487, CVE-2023-39325).
		o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return o
}

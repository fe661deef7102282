package apicount

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// requests is the manager's API requests, by verb and resource, as
// Prometheus sees them (controller-runtime's own client metrics have the
// method only).
var requests = &collector{
	counter: New(),
	desc: prometheus.NewDesc("upgrade_toolkit_api_requests_total",
		"Requests the manager made to the API server, by verb and resource.", []string{"verb", "resource"}, nil),
	bytes: prometheus.NewDesc("upgrade_toolkit_api_bytes_total",
		"Bytes of the bodies of the manager's API requests, sent or received (watch events included), by verb and resource.",
		[]string{"direction", "verb", "resource"}, nil),
}

var register sync.Once

// Instrument makes every client built from cfg count its requests in the
// upgrade_toolkit_api_requests_total metric of the manager's metrics
// endpoint, and their bytes in upgrade_toolkit_api_bytes_total.
func Instrument(cfg *rest.Config) *rest.Config {
	register.Do(func() { metrics.Registry.MustRegister(requests) })
	return requests.counter.Wrap(cfg)
}

type collector struct {
	counter     *Counter
	desc, bytes *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc; ch <- c.bytes }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for k, n := range c.counter.Snapshot() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), k.Verb, k.Resource)
	}
	for k, b := range c.counter.BytesSnapshot() {
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(b.Sent), "sent", k.Verb, k.Resource)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(b.Received), "received", k.Verb, k.Resource)
	}
}

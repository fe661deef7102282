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
}

var register sync.Once

// Instrument makes every client built from cfg count its requests in the
// upgrade_toolkit_api_requests_total metric of the manager's metrics
// endpoint.
func Instrument(cfg *rest.Config) *rest.Config {
	register.Do(func() { metrics.Registry.MustRegister(requests) })
	return requests.counter.Wrap(cfg)
}

type collector struct {
	counter *Counter
	desc    *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for k, n := range c.counter.Snapshot() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), k.Verb, k.Resource)
	}
}

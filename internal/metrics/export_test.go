package metrics

import (
	"net/http"
	"time"

	"k8s.io/client-go/rest"
)

// Check is the metrics filter's verdict on a request (200 to serve it), as
// the manager's identity cfg obtains it at the time now gives.
type Check func(r *http.Request) (int, string)

// NewCheck builds the filter's checker with a clock of the test's.
func NewCheck(cfg *rest.Config, now func() time.Time) (Check, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	a, err := newAuthorizer(cfg, hc)
	if err != nil {
		return nil, err
	}
	a.now = now
	return a.check, nil
}

// Package apicount counts the requests a client makes to the API server, by
// verb and resource, as seen by the client: for tests that assert a
// controller writes nothing while nothing changes, and for benchmarks.
package apicount

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// Key is a verb and a resource, e.g. {"patch", "upgradeplans/status"}.
type Key struct {
	Verb     string
	Resource string
}

// Counter counts requests. The zero value is not usable; use New.
type Counter struct {
	mu     sync.Mutex
	counts map[Key]int
}

// New returns an empty counter.
func New() *Counter { return &Counter{counts: map[Key]int{}} }

// Wrap makes every client built from cfg count its requests here.
func (c *Counter) Wrap(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper{next: rt, c: c}
	})
	return out
}

type roundTripper struct {
	next http.RoundTripper
	c    *Counter
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	r.c.add(Classify(req))
	return r.next.RoundTrip(req)
}

func (c *Counter) add(k Key) {
	c.mu.Lock()
	c.counts[k]++
	c.mu.Unlock()
}

// Classify names a request's verb the way the API server's audit log does
// (get, list, watch, create, update, patch, delete, deletecollection) and its
// resource as resource[/subresource].
func Classify(req *http.Request) Key {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	// /api/v1/... or /apis/group/version/...
	switch {
	case len(parts) > 0 && parts[0] == "api":
		parts = parts[min(2, len(parts)):]
	case len(parts) > 0 && parts[0] == "apis":
		parts = parts[min(3, len(parts)):]
	default:
		return Key{Verb: strings.ToLower(req.Method), Resource: req.URL.Path}
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	resource, named := "", false
	if len(parts) > 0 {
		resource = parts[0]
		named = len(parts) > 1
		if len(parts) > 2 {
			resource += "/" + parts[2]
		}
	}
	verb := ""
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(req.Method)
	}
	return Key{Verb: verb, Resource: resource}
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() map[Key]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Reset forgets the counts so far.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.counts = map[Key]int{}
	c.mu.Unlock()
}

// IsWrite reports whether a verb changes something.
func IsWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// Writes returns the write requests so far, by key.
func (c *Counter) Writes() map[Key]int {
	out := map[Key]int{}
	for k, n := range c.Snapshot() {
		if IsWrite(k.Verb) {
			out[k] = n
		}
	}
	return out
}

// Format lists counts one per line, sorted, for logs and reports.
func Format(counts map[Key]int) string {
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b Key) int {
		return strings.Compare(a.Verb+" "+a.Resource, b.Verb+" "+b.Resource)
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%-16s %-40s %d\n", k.Verb, k.Resource, counts[k])
	}
	return b.String()
}

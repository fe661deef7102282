// Package apicount counts the requests a client makes to the API server, by
// verb and resource, and the bytes of their bodies each way, as seen by the
// client: for tests that assert a controller writes nothing while nothing
// changes, and for benchmarks.
package apicount

import (
	"fmt"
	"io"
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

// Bytes are the bytes of requests' bodies: Sent to the API server, Received
// from it (a watch's events included, as they arrive).
type Bytes struct {
	Sent, Received int64
}

// Counter counts requests and their bytes. The zero value is not usable; use
// New.
type Counter struct {
	mu     sync.Mutex
	counts map[Key]int
	bytes  map[Key]Bytes
}

// New returns an empty counter.
func New() *Counter { return &Counter{counts: map[Key]int{}, bytes: map[Key]Bytes{}} }

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
	k := Classify(req)
	r.c.add(k, max(req.ContentLength, 0))
	resp, err := r.next.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, c: r.c, k: k}
	}
	return resp, err
}

func (c *Counter) add(k Key, sent int64) {
	c.mu.Lock()
	c.counts[k]++
	b := c.bytes[k]
	b.Sent += sent
	c.bytes[k] = b
	c.mu.Unlock()
}

// countingBody counts a response's bytes as the client reads them.
type countingBody struct {
	io.ReadCloser
	c *Counter
	k Key
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.c.mu.Lock()
		v := b.c.bytes[b.k]
		v.Received += int64(n)
		b.c.bytes[b.k] = v
		b.c.mu.Unlock()
	}
	return n, err
}

// Classify names a request's verb the way the API server's audit log does
// (get, list, watch, create, update, patch, delete, deletecollection) and its
// resource as resource[/subresource].
func Classify(req *http.Request) Key {
	r := Describe(req)
	if r.NonResource {
		return Key{Verb: r.Verb, Resource: r.Path}
	}
	return Key{Verb: r.Verb, Resource: r.Resource}
}

// Request is what the API server's authorizer sees of a request: its verb
// and either the resource it acts on or, for paths outside /api and /apis
// (e.g. /version), the path.
type Request struct {
	Verb string
	// Group is the API group, "" for the core group.
	Group string
	// Resource is resource[/subresource], e.g. "pods/log".
	Resource string
	// Namespace is "" for cluster-scoped resources and cluster-wide
	// requests.
	Namespace string
	// Name is "" for list, watch, create and deletecollection.
	Name string
	// NonResource marks a request for Path rather than a resource.
	NonResource bool
	Path        string
}

// Describe tells what a request to the API server asks for, as its
// authorizer does: the verb (get, list, watch, create, update, patch,
// delete, deletecollection), the group, resource[/subresource], namespace
// and name. Discovery paths (/api, /apis/group/version) are non-resource
// requests.
func Describe(req *http.Request) Request {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	r := Request{Path: req.URL.Path}
	// /api/v1/... or /apis/group/version/...
	switch {
	case len(parts) > 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) > 3 && parts[0] == "apis":
		r.Group = parts[1]
		parts = parts[3:]
	default:
		// Non-resource verbs are the lower-case HTTP methods.
		r.NonResource, r.Verb = true, strings.ToLower(req.Method)
		return r
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		r.Namespace, parts = parts[1], parts[2:]
	}
	r.Resource = parts[0]
	if len(parts) > 1 {
		r.Name = parts[1]
	}
	if len(parts) > 2 {
		r.Resource += "/" + parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			r.Verb = "watch"
		case r.Name != "":
			r.Verb = "get"
		default:
			r.Verb = "list"
		}
	case http.MethodPost:
		r.Verb = "create"
	case http.MethodPut:
		r.Verb = "update"
	case http.MethodPatch:
		r.Verb = "patch"
	case http.MethodDelete:
		r.Verb = "delete"
		if r.Name == "" {
			r.Verb = "deletecollection"
		}
	default:
		r.Verb = strings.ToLower(req.Method)
	}
	return r
}

// Snapshot returns the counts so far.
func (c *Counter) Snapshot() map[Key]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// BytesSnapshot returns the bytes so far, by key.
func (c *Counter) BytesSnapshot() map[Key]Bytes {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.bytes)
}

// Reset forgets the counts so far.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.counts, c.bytes = map[Key]int{}, map[Key]Bytes{}
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

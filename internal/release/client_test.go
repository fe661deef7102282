package release_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
)

// server serves the default fixture repo behind a handler that may
// misbehave, and counts the requests.
type server struct {
	*httptest.Server
	requests atomic.Int32
}

func newServer(t *testing.T, misbehave func(n int32, w http.ResponseWriter, r *http.Request) bool) *server {
	t.Helper()
	repo := releasetest.Handler(releasetest.New().Files())
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.requests.Add(1)
		if misbehave != nil && misbehave(n, w, r) {
			return
		}
		repo.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) client(t *testing.T, opts ...release.ClientOption) *release.Client {
	t.Helper()
	opts = append([]release.ClientOption{release.WithRetries(3, time.Millisecond), release.WithRequestTimeout(2 * time.Second)}, opts...)
	c, err := release.NewClient(s.URL+release.RepoRoot, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientFetchesTheRelease(t *testing.T) {
	s := newServer(t, nil)
	c := s.client(t)
	ctx := context.Background()
	want := releasetest.New()

	r, err := c.Release(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&want.Release, r); diff != "" {
		t.Errorf("Release (-want +got):\n%s", diff)
	}
	m, err := c.BundleMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&want.Bundle, m); diff != "" {
		t.Errorf("BundleMetadata (-want +got):\n%s", diff)
	}
	previous, err := c.ImageList(ctx, releasetest.PreviousVersion)
	if err != nil {
		t.Fatal(err)
	}
	current, err := c.ImageList(ctx, release.CurrentImageList)
	if err != nil {
		t.Fatal(err)
	}
	stale := release.StaleImages(previous, current, release.RetainedImageNames)
	wantStale := []string{
		"docker.io/longhornio/longhorn-manager:v1.10.1",
		"docker.io/rancher/fleet-agent:v0.13.0",
		"docker.io/rancher/fleet:v0.13.0",
		"docker.io/rancher/harvester-cluster-repo:v1.7.1",
		"docker.io/rancher/harvester-webhook:v1.7.1",
		"docker.io/rancher/harvester:v1.7.1",
		"docker.io/rancher/rancher-webhook:v0.8.0",
		"docker.io/rancher/rancher:v2.12.3",
		"docker.io/rancher/rke2-runtime:v1.33.5-rke2r1",
		"docker.io/rancher/system-agent-installer-rke2:v1.33.5-rke2r1",
		"registry.suse.com/suse/sles/15.7/virt-operator:1.6.2-150700.3.5.1",
	}
	if diff := cmp.Diff(wantStale, stale); diff != "" {
		t.Errorf("stale images (-want +got):\n%s", diff)
	}
	// Each entry's list is fetched by its path in the repo.
	data, err := c.Get(ctx, m.Images.RKE2[0].ListPath())
	if err != nil {
		t.Fatal(err)
	}
	if list, err := release.ParseImageList(data); err != nil || len(list) != 3 {
		t.Errorf("rke2 list: %v, %v", list, err)
	}
	if n := s.requests.Load(); n != 5 {
		t.Errorf("%d requests, want 5 (no retries)", n)
	}
}

func TestClientRetriesTransientFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(w http.ResponseWriter)
	}{
		{"503", func(w http.ResponseWriter) { http.Error(w, "starting", http.StatusServiceUnavailable) }},
		{"500", func(w http.ResponseWriter) { http.Error(w, "oops", http.StatusInternalServerError) }},
		{"429", func(w http.ResponseWriter) { http.Error(w, "slow down", http.StatusTooManyRequests) }},
		{"connection reset", func(w http.ResponseWriter) { panic(http.ErrAbortHandler) }},
		{"truncated body", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte("harvester: v1"))
			panic(http.ErrAbortHandler)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, func(n int32, w http.ResponseWriter, _ *http.Request) bool {
				if n <= 2 {
					tc.fail(w)
					return true
				}
				return false
			})
			r, err := s.client(t).Release(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if r.Harvester != releasetest.Version {
				t.Errorf("harvester = %q", r.Harvester)
			}
			if n := s.requests.Load(); n != 3 {
				t.Errorf("%d requests, want 3", n)
			}
		})
	}
}

func TestClientGivesUp(t *testing.T) {
	s := newServer(t, func(_ int32, w http.ResponseWriter, _ *http.Request) bool {
		http.Error(w, "down", http.StatusBadGateway)
		return true
	})
	_, err := s.client(t).Release(context.Background())
	var se *release.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusBadGateway {
		t.Fatalf("err = %v, want a 502 StatusError", err)
	}
	if !strings.Contains(err.Error(), "giving up after 3 attempts") || !strings.Contains(err.Error(), s.URL+"/harvester-iso/harvester-release.yaml") {
		t.Errorf("message %q does not say where and how often", err)
	}
	if n := s.requests.Load(); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

func TestClientDoesNotRetryClientErrors(t *testing.T) {
	s := newServer(t, func(_ int32, w http.ResponseWriter, _ *http.Request) bool {
		http.Error(w, "no", http.StatusForbidden)
		return true
	})
	_, err := s.client(t).Release(context.Background())
	var se *release.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusForbidden || errors.Is(err, release.ErrNotFound) {
		t.Fatalf("err = %v, want a 403 StatusError", err)
	}
	if n := s.requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestClientNotFound(t *testing.T) {
	s := newServer(t, nil)
	_, err := s.client(t).ImageList(context.Background(), "v1.6.0")
	if !errors.Is(err, release.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if !strings.Contains(err.Error(), "/harvester-iso/bundle/harvester/images-lists-archive/v1.6.0/image_list_all.txt: HTTP 404") {
		t.Errorf("message %q does not name the file", err)
	}
	if n := s.requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestClientMalformedContentIsNotRetried(t *testing.T) {
	s := newServer(t, func(_ int32, w http.ResponseWriter, _ *http.Request) bool {
		_, _ = w.Write([]byte("harvester: v1.8.0\nos: Harvester v1.8.0\n"))
		return true
	})
	_, err := s.client(t).Release(context.Background())
	if !errors.Is(err, release.ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
	want := s.URL + "/harvester-iso/harvester-release.yaml: harvesterChart: missing"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q does not start with %q", err, want)
	}
	if n := s.requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestClientRefusesHugeFiles(t *testing.T) {
	s := newServer(t, func(_ int32, w http.ResponseWriter, _ *http.Request) bool {
		_, _ = io.Copy(w, io.LimitReader(zeros{}, 17<<20))
		return true
	})
	_, err := s.client(t).Get(context.Background(), release.ReleaseFile)
	if !errors.Is(err, release.ErrMalformed) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v", err)
	}
	if n := s.requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestClientTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stall func(w http.ResponseWriter, r *http.Request)
	}{
		{"no headers", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{"stalled body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "100")
			_, _ = w.Write([]byte("harvester: v1.8.0\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, func(_ int32, w http.ResponseWriter, r *http.Request) bool {
				tc.stall(w, r)
				return true
			})
			start := time.Now()
			_, err := s.client(t, release.WithRequestTimeout(50*time.Millisecond), release.WithRetries(2, time.Millisecond)).
				Release(context.Background())
			if err == nil || !strings.Contains(err.Error(), "no complete response within 50ms") || !strings.Contains(err.Error(), "giving up after 2 attempts") {
				t.Fatalf("err = %v", err)
			}
			if n := s.requests.Load(); n != 2 {
				t.Errorf("%d requests, want 2", n)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

func TestClientConnectionRefused(t *testing.T) {
	s := httptest.NewServer(http.NotFoundHandler())
	url := s.URL + release.RepoRoot
	s.Close()
	c, err := release.NewClient(url, release.WithRetries(2, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Release(context.Background())
	if err == nil || !strings.Contains(err.Error(), "giving up after 2 attempts") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v", err)
	}
}

func TestClientStopsWhenTheContextEnds(t *testing.T) {
	s := newServer(t, func(_ int32, w http.ResponseWriter, _ *http.Request) bool {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return true
	})
	c := s.client(t, release.WithRetries(10, time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Release(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "HTTP 503") {
		t.Fatalf("err = %v, want the context's error and the last failure", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s to notice the context", d)
	}
	if n := s.requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestClientOpen(t *testing.T) {
	repo := releasetest.New()
	files := repo.Files()
	s := newServer(t, func(n int32, w http.ResponseWriter, r *http.Request) bool {
		switch n {
		case 1:
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return true
		case 2:
			<-r.Context().Done() // no headers within the timeout
			return true
		}
		// Headers at once, the body only after the request timeout: Open's
		// timeout covers the headers only.
		w.Header().Set("Content-Length", "262144")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(150 * time.Millisecond)
		_, _ = w.Write(files[release.RootfsFile].Data)
		return true
	})
	body, err := s.client(t, release.WithRequestTimeout(50*time.Millisecond)).Open(context.Background(), release.RootfsFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	if err := body.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, files[release.RootfsFile].Data) {
		t.Errorf("got %d bytes, not the file's %d", len(got), repo.RootfsSize)
	}
	if n := s.requests.Load(); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

func TestClientOpenNotFound(t *testing.T) {
	s := newServer(t, nil)
	_, err := s.client(t).Open(context.Background(), "bundle/nothing.tar.zst")
	if !errors.Is(err, release.ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
}

func TestClientRefusesBadInput(t *testing.T) {
	for _, u := range []string{"", "ftp://repo/harvester-iso/", "http:///harvester-iso/", "http://repo/harvester-iso/?x=1", "://"} {
		if _, err := release.NewClient(u); err == nil {
			t.Errorf("NewClient(%q) succeeded", u)
		}
	}
	s := newServer(t, nil)
	c := s.client(t)
	for _, p := range []string{"../etc/passwd", "/harvester-release.yaml", "bundle/../../x", "a b", "", "."} {
		if _, err := c.Get(context.Background(), p); err == nil {
			t.Errorf("Get(%q) succeeded", p)
		}
	}
	for _, v := range []string{"", "../v1.7.1", "v1.7.1/..", "v1.7 .1"} {
		if _, err := c.ImageList(context.Background(), v); !errors.Is(err, release.ErrInvalidVersion) {
			t.Errorf("ImageList(%q) = %v, want ErrInvalidVersion", v, err)
		}
	}
	if n := s.requests.Load(); n != 0 {
		t.Errorf("%d requests for bad input", n)
	}
}

func TestURLs(t *testing.T) {
	if got := release.BaseURL("harvester-system", "hvst-upgrade-864fh-repo"); got != "http://hvst-upgrade-864fh-repo.harvester-system.svc/harvester-iso/" {
		t.Errorf("BaseURL = %q", got)
	}
	for base, want := range map[string]string{
		"http://repo.ns.svc/harvester-iso/": "http://repo.ns.svc/harvester-iso/bundle/harvester/images/a+b.tar.zst",
		"http://repo.ns.svc/harvester-iso":  "http://repo.ns.svc/harvester-iso/bundle/harvester/images/a+b.tar.zst",
		"http://127.0.0.1:8080/":            "http://127.0.0.1:8080/bundle/harvester/images/a+b.tar.zst",
	} {
		c, err := release.NewClient(base)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.URL("bundle/harvester/images/a+b.tar.zst"); err != nil || got != want {
			t.Errorf("URL on %s = %q, %v; want %q", base, got, err, want)
		}
	}
}

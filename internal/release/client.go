package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// RepoRoot is the URL path under which the upgrade repo serves the content
// of the release ISO.
const RepoRoot = "/harvester-iso/"

// BaseURL is the repo's base URL inside the cluster for the repo Service
// in namespace, e.g.
// http://hvst-upgrade-x-repo.harvester-system.svc/harvester-iso/.
func BaseURL(namespace, service string) string {
	return "http://" + service + "." + namespace + ".svc" + RepoRoot
}

// Defaults of a Client.
const (
	// DefaultRequestTimeout bounds one attempt: the whole response of a
	// small file, or the response headers of an Open.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultAttempts is how many times a request is tried in all.
	DefaultAttempts = 4
	// DefaultBackoff is the wait before the first retry; it doubles up to
	// maxBackoff, with 20% jitter.
	DefaultBackoff = 500 * time.Millisecond

	maxBackoff = 10 * time.Second
	// maxFileSize bounds the files read into memory (release file, bundle
	// metadata, image lists: all far smaller).
	maxFileSize = 16 << 20
)

// ErrNotFound is matched (errors.Is) by the error for a file the repo does
// not have (HTTP 404). It is not retried.
var ErrNotFound = errors.New("not found in the upgrade repo")

// StatusError is an HTTP response other than 200 OK.
type StatusError struct {
	URL        string
	StatusCode int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("GET %s: HTTP %d %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode))
}

// Is makes errors.Is(err, ErrNotFound) true for a 404.
func (e *StatusError) Is(target error) bool {
	return target == ErrNotFound && e.StatusCode == http.StatusNotFound
}

// transient reports whether a status may succeed when retried.
func (e *StatusError) transient() bool {
	return e.StatusCode >= 500 || e.StatusCode == http.StatusTooManyRequests || e.StatusCode == http.StatusRequestTimeout
}

// Client reads the release from the upgrade repo. Each attempt has its own
// timeout; connection errors, timeouts, 408, 429 and 5xx responses are
// retried with exponential backoff, other responses are not. A Client is
// safe for concurrent use.
type Client struct {
	base     *url.URL
	http     *http.Client
	timeout  time.Duration
	attempts int
	backoff  time.Duration
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithRequestTimeout sets the timeout of one attempt (default
// DefaultRequestTimeout).
func WithRequestTimeout(d time.Duration) ClientOption { return func(c *Client) { c.timeout = d } }

// WithRetries sets how many times a request is tried in all (at least 1)
// and the wait before the first retry (defaults DefaultAttempts and
// DefaultBackoff). A reconciler that must not block long can use
// WithRetries(1, 0) and requeue instead.
func WithRetries(attempts int, backoff time.Duration) ClientOption {
	return func(c *Client) { c.attempts, c.backoff = max(attempts, 1), backoff }
}

// NewClient returns a client for the repo at baseURL, an http or https URL
// such as BaseURL(namespace, service) or a test server's URL + RepoRoot.
func NewClient(baseURL string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("repo base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("repo base URL %q: expected http://host[:port]/path/ without query or fragment", baseURL)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		u.RawPath = ""
	}
	c := &Client{base: u, http: &http.Client{}, timeout: DefaultRequestTimeout, attempts: DefaultAttempts, backoff: DefaultBackoff}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// URL is the absolute URL of a file given by its path in the repo, e.g.
// URL(ReleaseFile), for tools that download it themselves.
func (c *Client) URL(repoPath string) (string, error) {
	if !isRepoPath(repoPath) {
		return "", fmt.Errorf("repo path %q: expected a relative path without \"..\", spaces or control characters", repoPath)
	}
	return c.base.JoinPath(repoPath).String(), nil
}

// Release fetches and parses harvester-release.yaml.
func (c *Client) Release(ctx context.Context) (*Release, error) {
	return getParsed(ctx, c, ReleaseFile, ParseRelease)
}

// BundleMetadata fetches and parses bundle/metadata.yaml.
func (c *Client) BundleMetadata(ctx context.Context) (*BundleMetadata, error) {
	return getParsed(ctx, c, BundleMetadataFile, ParseBundleMetadata)
}

// ImageList fetches and parses the list of every image of a Harvester
// version, or of the release itself for CurrentImageList. A version the
// repo has no list for (non-GA ISOs ship none) fails with ErrNotFound.
func (c *Client) ImageList(ctx context.Context, version string) ([]string, error) {
	if version != CurrentImageList {
		if _, err := ParseVersion(version); err != nil {
			return nil, fmt.Errorf("image list: %w", err)
		}
	}
	return getParsed(ctx, c, ImageListPath(version), ParseImageList)
}

// getParsed fetches a file and parses it, naming the file by its URL in a
// content error.
func getParsed[T any](ctx context.Context, c *Client, repoPath string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	data, err := c.Get(ctx, repoPath)
	if err != nil {
		return zero, err
	}
	v, err := parse(data)
	if err != nil {
		var ce *ContentError
		if errors.As(err, &ce) {
			ce.File, _ = c.URL(repoPath)
		}
		return zero, err
	}
	return v, nil
}

// Get returns the content of a small file (at most 16 MiB), given by its
// path in the repo.
func (c *Client) Get(ctx context.Context, repoPath string) ([]byte, error) {
	u, err := c.URL(repoPath)
	if err != nil {
		return nil, err
	}
	var data []byte
	err = c.retry(ctx, u, func() (bool, error) {
		actx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		resp, retry, err := c.do(actx, u)
		if err != nil {
			return retry, c.explain(ctx, actx, err)
		}
		defer func() { _ = resp.Body.Close() }()
		data, err = io.ReadAll(io.LimitReader(resp.Body, maxFileSize+1))
		if err != nil {
			return true, fmt.Errorf("GET %s: reading the body: %w", u, c.explain(ctx, actx, err))
		}
		if len(data) > maxFileSize {
			return false, fmt.Errorf("GET %s: %w: larger than %d bytes", u, ErrMalformed, maxFileSize)
		}
		return false, nil
	})
	return data, err
}

// Open starts the download of a file of any size, given by its path in the
// repo. The request timeout bounds the wait for the response headers only;
// reading the body is bounded by ctx. The caller must close the body.
func (c *Client) Open(ctx context.Context, repoPath string) (io.ReadCloser, error) {
	u, err := c.URL(repoPath)
	if err != nil {
		return nil, err
	}
	var body io.ReadCloser
	err = c.retry(ctx, u, func() (bool, error) {
		actx, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(c.timeout, cancel)
		resp, retry, err := c.do(actx, u)
		inTime := timer.Stop()
		if err == nil && !inTime {
			_ = resp.Body.Close()
			err, retry = context.DeadlineExceeded, true
		}
		if err != nil {
			cancel()
			if !inTime && ctx.Err() == nil {
				return retry, fmt.Errorf("GET %s: no response within %s", u, c.timeout)
			}
			return retry, err
		}
		body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		return false, nil
	})
	return body, err
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	defer b.cancel()
	return b.ReadCloser.Close()
}

// do sends one GET and returns a 200 response, or an error and whether it
// is worth retrying.
func (c *Client) do(ctx context.Context, u string) (*http.Response, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, true, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, false, nil
	}
	// Drain a little so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	se := &StatusError{URL: u, StatusCode: resp.StatusCode}
	return nil, se.transient(), se
}

// explain replaces the error of an attempt that ran out of its own time by
// a message that says so.
func (c *Client) explain(ctx, attempt context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(attempt.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no complete response within %s: %w", c.timeout, err)
	}
	return err
}

// retry runs once until it succeeds, fails for good, the attempts are used
// up or ctx ends.
func (c *Client) retry(ctx context.Context, u string, once func() (bool, error)) error {
	backoff := wait.Backoff{Duration: c.backoff, Factor: 2, Jitter: 0.2, Steps: c.attempts, Cap: maxBackoff}
	for n := 1; ; n++ {
		retry, err := once()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("GET %s: %w", u, ctx.Err())
		case !retry:
			return err
		case n >= c.attempts:
			return fmt.Errorf("GET %s: giving up after %d attempts: %w", u, n, err)
		}
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("GET %s: %w while waiting to retry (last error: %v)", u, ctx.Err(), err)
		case <-t.C:
		}
	}
}

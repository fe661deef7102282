package repo_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvester/upgrade-toolkit/internal/repo"
	"github.com/harvester/upgrade-toolkit/internal/repo/isotest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// release is one xorriso-built release ISO shared by the tests that only
// read it.
var release struct {
	once      sync.Once
	tree, iso string
}

func releaseISO(t *testing.T) (tree, iso string) {
	t.Helper()
	release.once.Do(func() {
		dir, err := os.MkdirTemp("", "repo-test-")
		if err != nil {
			t.Fatal(err)
		}
		release.tree, release.iso = filepath.Join(dir, "tree"), filepath.Join(dir, "release.iso")
		isotest.WriteReleaseTree(t, release.tree, 3<<20)
		isotest.Build(t, release.tree, release.iso)
	})
	if release.iso == "" {
		t.Fatal("building the release ISO failed in an earlier test")
	}
	return release.tree, release.iso
}

// env is the API server of the object tests.
var env *testenv.Env

func TestMain(m *testing.M) {
	if serveForBenchmark() {
		return
	}
	flag.Parse()
	var code int
	if flag.Lookup("test.run").Value.String() == "^$" {
		code = m.Run() // benchmarks only: no API server needed
	} else {
		code = testenv.RunMain(m, &env)
	}
	for _, dir := range []string{filepath.Dir(release.iso), benchFixture.dir} {
		if dir != "." && dir != "" {
			_ = os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// running is a server started by start.
type running struct {
	base string // http://127.0.0.1:port
	stop context.CancelFunc
	done chan struct{}
	err  error // Run's result, once done is closed
}

func start(t *testing.T, opts repo.Options) *running {
	t.Helper()
	srv, err := repo.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{base: "http://" + ln.Addr().String(), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = srv.Run(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// startReady starts a server and waits until /readyz says ready.
func startReady(t *testing.T, opts repo.Options) *running {
	t.Helper()
	r := start(t, opts)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(r.base + repo.ReadyzPath)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("not ready after 30s: %d %s", resp.StatusCode, body)
			}
		}
		select {
		case <-r.done:
			t.Fatalf("the server stopped: %v", r.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// url is the address of a file of the ISO, with its path escaped.
func (r *running) url(rel string) string {
	return r.base + (&url.URL{Path: repo.PathPrefix + rel}).EscapedPath()
}

func do(t *testing.T, method, target string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req) // no redirects followed
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func sha512Hex(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum512(b)
	return hex.EncodeToString(sum[:])
}

func TestServesEveryFileByteIdentical(t *testing.T) {
	tree, iso := releaseISO(t)
	r := startReady(t, repo.Options{ISOPath: iso, SHA512: sha512Hex(t, iso)})
	for _, p := range isotest.Files(t, tree) {
		want := isotest.MustRead(t, tree, p)
		resp, body := do(t, http.MethodGet, r.url(p), nil)
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, want) {
			t.Errorf("GET %s: %s, %d bytes, want %d identical bytes", p, resp.Status, len(body), len(want))
			continue
		}
		if resp.ContentLength != int64(len(want)) {
			t.Errorf("GET %s: Content-Length %d, want %d", p, resp.ContentLength, len(want))
		}
		if etag := resp.Header.Get("ETag"); !strings.HasPrefix(etag, `"`) || len(etag) < 10 {
			t.Errorf("GET %s: ETag %q is not a strong validator", p, etag)
		}
		src, _ := os.Stat(filepath.Join(tree, p))
		if lm, err := http.ParseTime(resp.Header.Get("Last-Modified")); err != nil || !lm.Equal(src.ModTime().Truncate(time.Second)) {
			t.Errorf("GET %s: Last-Modified %q, want %v", p, resp.Header.Get("Last-Modified"), src.ModTime())
		}
	}
	for p, want := range map[string]string{
		"harvester-release.yaml": "application/yaml",
		"bundle/harvester/images/harvester-images-" + isotest.Version + ".tar.zst": "application/zstd",
		"bundle/harvester/images-lists-archive/current/image_list_all.txt":         "text/plain; charset=utf-8",
		"rootfs.squashfs": "application/octet-stream",
	} {
		resp, _ := do(t, http.MethodHead, r.url(p), nil)
		if got := resp.Header.Get("Content-Type"); got != want {
			t.Errorf("HEAD %s: Content-Type %q, want %q", p, got, want)
		}
	}
}

func TestHeadHasHeadersWithoutBody(t *testing.T) {
	tree, iso := releaseISO(t)
	r := startReady(t, repo.Options{ISOPath: iso})
	get, _ := do(t, http.MethodGet, r.url("rootfs.squashfs"), nil)
	head, body := do(t, http.MethodHead, r.url("rootfs.squashfs"), nil)
	if head.StatusCode != http.StatusOK || len(body) != 0 {
		t.Fatalf("HEAD: %s with %d body bytes", head.Status, len(body))
	}
	size := len(isotest.MustRead(t, tree, "rootfs.squashfs"))
	for _, h := range []string{"Content-Length", "ETag", "Last-Modified", "Content-Type", "Accept-Ranges"} {
		if head.Header.Get(h) == "" || head.Header.Get(h) != get.Header.Get(h) {
			t.Errorf("HEAD %s = %q, GET has %q", h, head.Header.Get(h), get.Header.Get(h))
		}
	}
	if head.Header.Get("Content-Length") != fmt.Sprint(size) {
		t.Errorf("Content-Length %s, want %d", head.Header.Get("Content-Length"), size)
	}
}

func TestRanges(t *testing.T) {
	tree, iso := releaseISO(t)
	r := startReady(t, repo.Options{ISOPath: iso})
	const p = "bundle/harvester/images/harvester-images-" + isotest.Version + ".tar.zst"
	src := isotest.MustRead(t, tree, p)
	n := len(src)
	for _, tc := range []struct {
		rng       string
		status    int
		want      []byte
		wantRange string
	}{
		{"bytes=0-99", 206, src[:100], fmt.Sprintf("bytes 0-99/%d", n)},
		{"bytes=1000000-1999999", 206, src[1000000:2000000], fmt.Sprintf("bytes 1000000-1999999/%d", n)},
		{"bytes=3000000-", 206, src[3000000:], fmt.Sprintf("bytes 3000000-%d/%d", n-1, n)},
		{"bytes=-500", 206, src[n-500:], fmt.Sprintf("bytes %d-%d/%d", n-500, n-1, n)},
		{fmt.Sprintf("bytes=%d-", n), 416, nil, fmt.Sprintf("bytes */%d", n)},
		{fmt.Sprintf("bytes=%d-%d", n+10, n+20), 416, nil, fmt.Sprintf("bytes */%d", n)},
		{"bytes=abc", 416, nil, ""},
		{"lines=1-2", 416, nil, ""}, // net/http refuses units other than bytes
	} {
		resp, body := do(t, http.MethodGet, r.url(p), map[string]string{"Range": tc.rng})
		if resp.StatusCode != tc.status {
			t.Errorf("Range %s: %s, want %d", tc.rng, resp.Status, tc.status)
			continue
		}
		if tc.want != nil && !bytes.Equal(body, tc.want) {
			t.Errorf("Range %s: %d bytes differ from the source's %d", tc.rng, len(body), len(tc.want))
		}
		if got := resp.Header.Get("Content-Range"); got != tc.wantRange {
			t.Errorf("Range %s: Content-Range %q, want %q", tc.rng, got, tc.wantRange)
		}
	}

	// Several ranges come back as multipart/byteranges.
	resp, body := do(t, http.MethodGet, r.url(p), map[string]string{"Range": "bytes=0-9,5000-5999,-3"})
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != 206 || err != nil || mt != "multipart/byteranges" {
		t.Fatalf("multi-range: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for _, want := range []struct {
		part []byte
		rng  string
	}{
		{src[0:10], fmt.Sprintf("bytes 0-9/%d", n)},
		{src[5000:6000], fmt.Sprintf("bytes 5000-5999/%d", n)},
		{src[n-3:], fmt.Sprintf("bytes %d-%d/%d", n-3, n-1, n)},
	} {
		part, err := mr.NextPart()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(part)
		if !bytes.Equal(got, want.part) || part.Header.Get("Content-Range") != want.rng {
			t.Errorf("part %s: %d bytes, Content-Range %q", want.rng, len(got), part.Header.Get("Content-Range"))
		}
	}
	if _, err := mr.NextPart(); err != io.EOF {
		t.Errorf("more parts than ranges: %v", err)
	}
}

func TestConditionalRequests(t *testing.T) {
	tree, iso := releaseISO(t)
	r := startReady(t, repo.Options{ISOPath: iso})
	const p = "bundle/metadata.yaml"
	src := isotest.MustRead(t, tree, p)
	first, _ := do(t, http.MethodGet, r.url(p), nil)
	etag, lastMod := first.Header.Get("ETag"), first.Header.Get("Last-Modified")
	other, _ := do(t, http.MethodGet, r.url("harvester-release.yaml"), nil)
	if etag == other.Header.Get("ETag") {
		t.Fatalf("two files share the ETag %s", etag)
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
		body   []byte
	}{
		{"If-None-Match matches", map[string]string{"If-None-Match": etag}, 304, nil},
		{"If-None-Match differs", map[string]string{"If-None-Match": `"other"`}, 200, src},
		{"If-Modified-Since not modified", map[string]string{"If-Modified-Since": lastMod}, 304, nil},
		{"If-Match differs", map[string]string{"If-Match": `"other"`}, 412, nil},
		{"If-Range matches", map[string]string{"Range": "bytes=0-4", "If-Range": etag}, 206, src[:5]},
		{"If-Range differs", map[string]string{"Range": "bytes=0-4", "If-Range": `"other"`}, 200, src},
	} {
		resp, body := do(t, http.MethodGet, r.url(p), tc.header)
		if resp.StatusCode != tc.status || (tc.body != nil && !bytes.Equal(body, tc.body)) {
			t.Errorf("%s: %s with %d bytes, want %d", tc.name, resp.Status, len(body), tc.status)
		}
	}
}

func TestNotFound(t *testing.T) {
	_, iso := releaseISO(t)
	r := startReady(t, repo.Options{ISOPath: iso})
	for _, target := range []string{
		r.url("no-such-file.yaml"),
		r.url("bundle/no/such/dir/"),
		r.url("harvester-release.yaml/"), // a file is not a directory
		r.base + "/",
		r.base + "/other/harvester-release.yaml",
	} {
		resp, body := do(t, http.MethodGet, target, nil)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "not found") {
			t.Errorf("GET %s: %s %q, want 404", target, resp.Status, body)
		}
	}
}

// rawRequest sends the request line exactly as given, without any client
// cleaning the path.
func rawRequest(t *testing.T, base, method, target string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: repo\r\nConnection: close\r\n\r\n", method, target); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestTraversalAttemptsAreRejected(t *testing.T) {
	_, iso := releaseISO(t)
	r := startReady(t, repo.Options{ISOPath: iso})
	for _, target := range []string{
		"/harvester-iso/../etc/passwd",
		"/harvester-iso/bundle/../../etc/passwd",
		"/harvester-iso/%2e%2e/%2e%2e/etc/passwd",
		"/harvester-iso/bundle/..%2f..%2fetc%2fpasswd",
		"/harvester-iso/bundle/%2E%2E/harvester-release.yaml",
		"/harvester-iso//etc/passwd",
		"/harvester-iso/%2fetc%2fpasswd",
		"/harvester-iso/bundle\\..\\..\\etc\\passwd",
		"/harvester-iso/bundle%5c..%5cmetadata.yaml",
		"/harvester-iso/./harvester-release.yaml",
		"/harvester-iso/bundle//metadata.yaml",
		"/harvester-iso/bundle%00/metadata.yaml",
		"http://repo/harvester-iso/../../etc/passwd",
	} {
		status, body := rawRequest(t, r.base, http.MethodGet, target)
		if status != http.StatusBadRequest || !strings.Contains(body, "invalid path") {
			t.Errorf("GET %s: %d %q, want 400 invalid path", target, status, body)
		}
	}
}

func TestOnlyGetAndHeadAreAllowed(t *testing.T) {
	_, iso := releaseISO(t)
	r := startReady(t, repo.Options{ISOPath: iso})
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, "PROPFIND"} {
		for _, target := range []string{r.url("harvester-release.yaml"), r.base + repo.ReadyzPath} {
			resp, body := do(t, method, target, nil)
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(string(body), "read-only") {
				t.Errorf("%s %s: %s, Allow %q, %q", method, target, resp.Status, resp.Header.Get("Allow"), body)
			}
		}
	}
}

func TestDirectories(t *testing.T) {
	_, iso := releaseISO(t)
	r := startReady(t, repo.Options{ISOPath: iso})
	for from, to := range map[string]string{
		r.base + "/harvester-iso":          "/harvester-iso/",
		r.url("bundle"):                    "/harvester-iso/bundle/",
		r.url("bundle/harvester") + "?x=1": "/harvester-iso/bundle/harvester/?x=1",
	} {
		resp, _ := do(t, http.MethodGet, from, nil)
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != to {
			t.Errorf("GET %s: %s to %q, want 301 to %q", from, resp.Status, resp.Header.Get("Location"), to)
		}
	}
	resp, body := do(t, http.MethodGet, r.url("bundle/"), nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("listing: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`<a href="metadata.yaml">metadata.yaml</a> 420`,
		`<a href="harvester/">harvester/</a> -`,
		`<a href="Spaces%20and%20%C3%BCn%C3%AFcode%20%C3%A9.txt">Spaces and ünïcode é.txt</a>`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the listing lacks %s:\n%s", want, body)
		}
	}
	if resp, _ := do(t, http.MethodGet, r.url(""), nil); resp.StatusCode != 200 {
		t.Errorf("root listing: %s", resp.Status)
	}
}

func TestChecksum(t *testing.T) {
	_, iso := releaseISO(t)
	sum := sha512Hex(t, iso)

	t.Run("zero padding added by the import is accepted", func(t *testing.T) {
		padded := copyFile(t, iso, make([]byte, 3<<20+512))
		startReady(t, repo.Options{ISOPath: padded, SHA512: strings.ToUpper(sum)})
	})

	for _, tc := range []struct {
		name   string
		image  string
		sha512 string
	}{
		{"wrong digest", iso, strings.Repeat("ab", 64)},
		{"data appended after the ISO", copyFile(t, iso, append(make([]byte, 4096), "junk"...)), sum},
		{"one byte changed", flipByte(t, iso, 40000), sum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			termLog := filepath.Join(t.TempDir(), "termination-log")
			if err := os.WriteFile(termLog, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r := start(t, repo.Options{ISOPath: tc.image, SHA512: tc.sha512, TerminationLog: termLog})
			<-r.done
			err := r.err
			var f *repo.Failure
			if !errors.As(err, &f) || f.ExitCode != repo.ExitCodeChecksumMismatch {
				t.Fatalf("Run = %v, want a checksum failure", err)
			}
			msg, _ := os.ReadFile(termLog)
			actual := sha512Hex(t, tc.image)
			for _, want := range []string{"checksum mismatch", "expected SHA-512 " + strings.ToLower(tc.sha512), "actual " + actual, "isoChecksum"} {
				if !strings.Contains(string(msg), want) {
					t.Errorf("termination message %q lacks %q", msg, want)
				}
			}
		})
	}

	if _, err := repo.NewServer(repo.Options{ISOPath: iso, SHA512: sum[:64]}); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("a SHA-256 digest: %v, want an error that says so", err)
	}
}

func TestUnusableISOsFailWithTheReason(t *testing.T) {
	_, iso := releaseISO(t)
	raw, err := os.ReadFile(iso)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		data []byte
		msg  string
	}{
		"truncated":    {raw[:len(raw)/3], "truncated"},
		"not an ISO":   {bytes.Repeat([]byte("not an iso "), 10000), "not an ISO 9660 image"},
		"empty volume": {nil, "too short"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			img, termLog := filepath.Join(dir, "disk.img"), filepath.Join(dir, "termination-log")
			for p, b := range map[string][]byte{img: tc.data, termLog: nil} {
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r := start(t, repo.Options{ISOPath: img, TerminationLog: termLog})
			<-r.done
			err := r.err
			var f *repo.Failure
			if !errors.As(err, &f) || f.ExitCode != repo.ExitCodeInvalidISO {
				t.Fatalf("Run = %v, want an invalid-ISO failure", err)
			}
			msg, _ := os.ReadFile(termLog)
			if !strings.Contains(string(msg), tc.msg) || !strings.Contains(string(msg), img) {
				t.Errorf("termination message %q lacks %q or the path", msg, tc.msg)
			}
		})
	}
}

func TestNotReadyAnswers503WithTheReason(t *testing.T) {
	h := repo.NewHandler(nil)
	for _, reason := range []string{"", "verifying the ISO's SHA-512: 10 of 6000 MiB hashed", "ISO checksum mismatch: expected SHA-512 aa, actual bb"} {
		if reason != "" {
			h.SetNotReady(reason)
		}
		for _, target := range []string{repo.ReadyzPath, repo.PathPrefix + "harvester-release.yaml"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
			want := reason
			if want == "" {
				want = "opening"
			}
			if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), want) {
				t.Errorf("GET %s while %q: %d %q", target, reason, rec.Code, rec.Body.String())
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, repo.HealthzPath, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("healthz while %q: %d", reason, rec.Code)
		}
	}
}

func TestAccessLog(t *testing.T) {
	_, iso := releaseISO(t)
	var buf syncBuffer
	r := startReady(t, repo.Options{ISOPath: iso, Logger: newJSONLogger(&buf)})
	do(t, http.MethodGet, r.url("harvester-release.yaml"), map[string]string{"Range": "bytes=0-9", "User-Agent": "node-1"})
	var found bool
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, `"msg":"request"`) && strings.Contains(line, `"path":"/harvester-iso/harvester-release.yaml"`) {
			found = true
			for _, want := range []string{`"status":206`, `"bytes":10`, `"range":"bytes=0-9"`, `"userAgent":"node-1"`, `"method":"GET"`} {
				if !strings.Contains(line, want) {
					t.Errorf("access log line %s lacks %s", line, want)
				}
			}
		}
	}
	if !found {
		t.Errorf("no access log line for the request in:\n%s", buf.String())
	}
}

func TestConcurrentClients(t *testing.T) {
	tree, iso := releaseISO(t)
	r := startReady(t, repo.Options{ISOPath: iso})
	const p = "rootfs.squashfs"
	src := isotest.MustRead(t, tree, p)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, r.url(p), nil)
			want := src
			if i%2 == 1 { // every other client resumes a download
				from := i * 9973 % len(src)
				req.Header.Set("Range", fmt.Sprintf("bytes=%d-", from))
				want = src[from:]
			}
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer func() { _ = resp.Body.Close() }()
			got, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(got, want) {
				errs <- fmt.Errorf("client %d: %d bytes (%v), want %d identical bytes", i, len(got), err, len(want))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// copyFile writes src followed by tail to a new file and returns its path.
func copyFile(t *testing.T, src string, tail []byte) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(p, append(b, tail...), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// flipByte copies src with one byte of file data changed.
func flipByte(t *testing.T, src string, at int) string {
	t.Helper()
	p := copyFile(t, src, nil)
	b, _ := os.ReadFile(p)
	b[len(b)-at] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newJSONLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, nil))
}

// TestMultiExtentFilesOverHTTP serves a file stored as several extents
// that are not adjacent in the image, whole and in ranges across extents.
func TestMultiExtentFilesOverHTTP(t *testing.T) {
	parts := [][]byte{bytes.Repeat([]byte("a"), 128<<10), bytes.Repeat([]byte("b"), 256<<10), bytes.Repeat([]byte("c"), 100<<10+7)}
	want := bytes.Join(parts, nil)
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, isotest.MultiExtentImage(parts), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startReady(t, repo.Options{ISOPath: img})
	resp, body := do(t, http.MethodGet, r.url("big.bin"), nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, want) {
		t.Fatalf("GET big.bin: %s, %d bytes, want %d identical bytes", resp.Status, len(body), len(want))
	}
	for _, rng := range [][2]int{{100 << 10, 200 << 10}, {128<<10 - 1, 384<<10 + 1}, {0, len(want) - 1}, {384 << 10, len(want) - 1}} {
		resp, body := do(t, http.MethodGet, r.url("big.bin"), map[string]string{"Range": fmt.Sprintf("bytes=%d-%d", rng[0], rng[1])})
		if resp.StatusCode != 206 || !bytes.Equal(body, want[rng[0]:rng[1]+1]) {
			t.Errorf("Range %v: %s, %d bytes", rng, resp.Status, len(body))
		}
	}
}

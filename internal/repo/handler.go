package repo

import (
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/harvester/upgrade-toolkit/internal/repo/iso9660"
)

// state is what the server can do right now. It is replaced as a whole.
type state struct {
	// img is set once the ISO is open and, if asked, verified.
	img *iso9660.Image
	// reason says why the server is not ready; empty when ready.
	reason string
}

// Handler serves the ISO's content and the health endpoints.
type Handler struct {
	state atomic.Pointer[state]
	log   *slog.Logger
}

// NewHandler returns a handler that is not ready yet: it answers 503 with
// "opening" until SetReady or SetNotReady is called.
func NewHandler(log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{log: log}
	h.SetNotReady("opening the ISO")
	return h
}

// SetReady makes the handler serve the image.
func (h *Handler) SetReady(img *iso9660.Image) { h.state.Store(&state{img: img}) }

// SetNotReady makes the handler answer content and readiness requests with
// 503 and the reason.
func (h *Handler) SetNotReady(reason string) { h.state.Store(&state{reason: reason}) }

const allowedMethods = "GET, HEAD"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	h.route(rec, r)
	level := slog.LevelInfo
	if r.URL.Path == HealthzPath || r.URL.Path == ReadyzPath {
		level = slog.LevelDebug // probes every few seconds would drown the log
	}
	h.log.LogAttrs(r.Context(), level, "request",
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("range", r.Header.Get("Range")),
		slog.Int("status", rec.status),
		slog.Int64("bytes", rec.bytes),
		slog.Float64("durationMs", float64(time.Since(start).Microseconds())/1000),
		slog.String("remote", r.RemoteAddr),
		slog.String("userAgent", r.UserAgent()),
	)
}

func (h *Handler) route(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", allowedMethods)
		httpError(w, http.StatusMethodNotAllowed, "method %s is not allowed: the repo is read-only and answers only GET and HEAD", r.Method)
		return
	}
	st := h.state.Load()
	switch p := r.URL.Path; {
	case p == HealthzPath:
		_, _ = io.WriteString(w, "ok\n")
	case p == ReadyzPath:
		if st.img == nil {
			httpError(w, http.StatusServiceUnavailable, "%s", st.reason)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	case p+"/" == PathPrefix:
		redirect(w, r, PathPrefix)
	case strings.HasPrefix(p, PathPrefix):
		if st.img == nil {
			w.Header().Set("Retry-After", "10")
			httpError(w, http.StatusServiceUnavailable, "the repo is not ready: %s", st.reason)
			return
		}
		serveContent(w, r, st.img, strings.TrimPrefix(p, PathPrefix))
	default:
		httpError(w, http.StatusNotFound, "%s not found: the repo serves the ISO under %s", p, PathPrefix)
	}
}

// serveContent serves rel, the path below PathPrefix.
func serveContent(w http.ResponseWriter, r *http.Request, img *iso9660.Image, rel string) {
	wantDir := rel == "" || strings.HasSuffix(rel, "/")
	name := strings.TrimSuffix(rel, "/")
	if name == "" {
		name = "."
	}
	// The decoded path is checked, so encoded forms (%2e%2e, %2f, %5c) are
	// caught too. ServeMux would clean and redirect; we refuse instead.
	if !fs.ValidPath(name) || strings.ContainsAny(name, "\\\x00") {
		httpError(w, http.StatusBadRequest, "invalid path %q: a path in the repo must not contain \".\" or \"..\" segments, empty segments, backslashes or NUL", r.URL.Path)
		return
	}
	f, err := img.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			httpError(w, http.StatusNotFound, "%s not found in the ISO", r.URL.Path)
			return
		}
		httpError(w, http.StatusNotFound, "%s cannot be opened: %v", r.URL.Path, err)
		return
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		httpError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	switch {
	case info.IsDir() && !wantDir:
		redirect(w, r, (&url.URL{Path: path.Base(name) + "/"}).EscapedPath())
	case info.IsDir():
		serveListing(w, img, name)
	case wantDir:
		httpError(w, http.StatusNotFound, "%s not found: %s is a file, not a directory", r.URL.Path, name)
	default:
		file := f.(*iso9660.File)
		w.Header().Set("ETag", etag(img, file, info.Size()))
		if ct, ok := contentTypes[path.Ext(name)]; ok {
			w.Header().Set("Content-Type", ct)
		}
		http.ServeContent(w, r, name, info.ModTime(), &content{File: file, img: img})
	}
}

// etag is a strong validator: the image's fingerprint and where and how
// long the file's data is in the image. Replicas serving the same image
// agree on it.
func etag(img *iso9660.Image, f *iso9660.File, size int64) string {
	var at int64
	if ext := f.Extents(); len(ext) > 0 {
		at = ext[0].Offset
	}
	return `"` + img.Fingerprint() + "-" + strconv.FormatInt(at, 16) + "-" + strconv.FormatInt(size, 16) + `"`
}

// contentTypes are the types of the files a release ISO holds, fixed here so
// that they do not depend on the host's mime.types; other extensions are
// left to ServeContent (extension table, then sniffing).
var contentTypes = map[string]string{
	".yaml":     "application/yaml",
	".yml":      "application/yaml",
	".txt":      "text/plain; charset=utf-8",
	".json":     "application/json",
	".zst":      "application/zstd",
	".gz":       "application/gzip",
	".tar":      "application/x-tar",
	".iso":      "application/x-iso9660-image",
	".squashfs": "application/octet-stream",
	".img":      "application/octet-stream",
	".sha256":   "text/plain; charset=utf-8",
	".sha512":   "text/plain; charset=utf-8",
}

// serveListing writes a minimal HTML index of a directory.
func serveListing(w http.ResponseWriter, img *iso9660.Image, name string) {
	entries, err := img.ReadDir(name)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	title := html.EscapeString(PathPrefix + strings.TrimPrefix(name+"/", "./"))
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>%s</title></head><body>\n<h1>%s</h1>\n<pre>\n", title, title)
	for _, e := range entries {
		n := e.Name()
		var size string
		if e.IsDir() {
			n += "/"
			size = "-"
		} else if info, err := e.Info(); err == nil {
			size = strconv.FormatInt(info.Size(), 10)
		}
		fmt.Fprintf(&b, "<a href=\"%s\">%s</a> %s\n", html.EscapeString((&url.URL{Path: n}).EscapedPath()), html.EscapeString(n), size)
	}
	b.WriteString("</pre></body></html>\n")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
}

// redirect sends a permanent redirect to target, relative to the request,
// keeping the query.
func redirect(w http.ResponseWriter, r *http.Request, target string) {
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, target, http.StatusMovedPermanently)
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	http.Error(w, fmt.Sprintf(format, args...), code)
}

// sendfileMin is the smallest body worth opening the image file for.
const sendfileMin = 64 << 10

// content is a file of the image as ServeContent reads it.
type content struct {
	*iso9660.File
	img *iso9660.Image
}

// sendTo copies the next n bytes to w. The file's data are byte ranges of
// the image file, so an *os.File of the image positioned at each range
// lets net/http hand them to sendfile(2): the kernel copies page cache to
// socket, as nginx does, instead of a read and a write per 32 KiB.
func (c *content) sendTo(w io.Writer, n int64) (int64, error) {
	rf, ok := w.(io.ReaderFrom)
	if !ok || n < sendfileMin {
		return io.Copy(struct{ io.Writer }{w}, io.LimitReader(c.File, n))
	}
	f, err := c.img.Reopen()
	if err != nil {
		return io.Copy(struct{ io.Writer }{w}, io.LimitReader(c.File, n))
	}
	defer func() { _ = f.Close() }()
	pos, err := c.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	var done int64
	for e := range c.Spans(pos, n) {
		if _, err := f.Seek(e.Offset, io.SeekStart); err != nil {
			return done, err
		}
		m, err := rf.ReadFrom(&io.LimitedReader{R: f, N: e.Length})
		done, pos = done+m, pos+m
		if err == nil && m < e.Length {
			err = io.ErrUnexpectedEOF // the image shrank under us
		}
		if err != nil {
			_, _ = c.Seek(pos, io.SeekStart)
			return done, err
		}
	}
	_, err = c.Seek(pos, io.SeekStart)
	return done, err
}

// recorder remembers the status and counts the body bytes for the access
// log. It passes ReadFrom through so that large bodies keep net/http's
// copy path.
type recorder struct {
	http.ResponseWriter
	status      int
	bytes       int64
	wroteHeader bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wroteHeader = true
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) ReadFrom(src io.Reader) (n int64, err error) {
	r.wroteHeader = true
	// ServeContent copies a single range as LimitReader(content).
	if lr, ok := src.(*io.LimitedReader); ok {
		if c, ok := lr.R.(*content); ok {
			n, err = c.sendTo(r.ResponseWriter, lr.N)
			lr.N -= n
			r.bytes += n
			return n, err
		}
	}
	if rf, ok := r.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(struct{ io.Writer }{r.ResponseWriter}, src)
	}
	r.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

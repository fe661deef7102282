package repo

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/harvester/upgrade-toolkit/internal/repo/iso9660"
)

// Options configure a Server.
type Options struct {
	// ISOPath is the image file, e.g. /iso/disk.img.
	ISOPath string
	// SHA512 is the expected hex SHA-512 of the ISO; empty skips the check.
	SHA512 string
	// TerminationLog is the file the message of a failure is written to:
	// the container's terminationMessagePath, which the kubelet creates. It
	// is written only if it exists; empty: never.
	TerminationLog string
	// Logger receives the access log and the server's own messages.
	Logger *slog.Logger
}

// Server serves an ISO over HTTP.
type Server struct {
	opts    Options
	want    []byte
	handler *Handler
}

// Timeouts of the HTTP server. There is no write timeout: a node may take
// long to download a multi-gigabyte archive.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	shutdownTimeout   = 20 * time.Second
	progressInterval  = 10 * time.Second
)

// NewServer checks the options.
func NewServer(opts Options) (*Server, error) {
	if opts.ISOPath == "" {
		return nil, errors.New("the ISO path is empty: pass --iso with the image file, e.g. /iso/disk.img")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, handler: NewHandler(opts.Logger)}
	if opts.SHA512 != "" {
		want, err := ParseSHA512(opts.SHA512)
		if err != nil {
			return nil, err
		}
		s.want = want
	}
	return s, nil
}

// Run serves HTTP on ln until ctx is done. Meanwhile it opens the ISO and
// verifies its checksum, and becomes ready when both succeed. A terminal
// failure is written to the termination log and returned as a *Failure
// once the HTTP server has stopped.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	log := s.opts.Logger
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("listening", "address", ln.Addr().String(), "iso", s.opts.ISOPath)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var img *iso9660.Image
	var prepareErr error
	prepared := make(chan struct{})
	go func() {
		defer close(prepared)
		img, prepareErr = s.prepare(ctx)
	}()

	var result error
	select {
	case err := <-serveErr:
		cancel()
		<-prepared
		result = fmt.Errorf("serving HTTP on %s: %w", ln.Addr(), err)
	case <-prepared:
		result = s.afterPrepare(ctx, img, prepareErr, serveErr, ln)
	case <-ctx.Done():
		<-prepared
	}
	if result == nil {
		s.handler.SetNotReady("shutting down")
	}
	shutdownCtx, stop := context.WithTimeout(context.Background(), shutdownTimeout)
	defer stop()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close() // downloads still running: clients resume with Range
	}
	if img != nil {
		_ = img.Close()
	}
	return result
}

// afterPrepare serves a prepared image until ctx is done, or reports why
// the image cannot be served.
func (s *Server) afterPrepare(ctx context.Context, img *iso9660.Image, err error, serveErr <-chan error, ln net.Listener) error {
	if err == nil {
		s.handler.SetReady(img)
		select {
		case err := <-serveErr:
			return fmt.Errorf("serving HTTP on %s: %w", ln.Addr(), err)
		case <-ctx.Done():
			return nil
		}
	}
	if errors.Is(err, context.Canceled) {
		return nil // stopped while preparing
	}
	var f *Failure
	if !errors.As(err, &f) {
		f = &Failure{ExitCode: 1, Message: err.Error()}
	}
	s.handler.SetNotReady(f.Message)
	s.opts.Logger.Error("the ISO cannot be served", "reason", f.Message)
	s.writeTerminationLog(f.Message)
	return err
}

// prepare opens the ISO and verifies its checksum.
func (s *Server) prepare(ctx context.Context) (*iso9660.Image, error) {
	log := s.opts.Logger
	start := time.Now()
	img, err := iso9660.OpenFile(s.opts.ISOPath)
	if err != nil {
		if errors.Is(err, iso9660.ErrTruncated) || errors.Is(err, iso9660.ErrNotISO9660) {
			return nil, &Failure{ExitCode: ExitCodeInvalidISO, Message: fmt.Sprintf("the ISO cannot be read: %v. Delete the ISO's VirtualMachineImage so that it is downloaded again.", err)}
		}
		return nil, fmt.Errorf("opening the ISO: %w", err)
	}
	log.Info("ISO opened", "names", img.Names(), "entries", img.Entries(), "volumeBytes", img.VolumeSize(), "duration", time.Since(start).String())
	if s.want == nil {
		log.Warn("no --sha512 given: the ISO is served without checking its integrity")
		return img, nil
	}
	f, err := os.Open(s.opts.ISOPath)
	if err != nil {
		return nil, errors.Join(err, img.Close())
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return nil, errors.Join(err, img.Close())
	}
	total := st.Size()
	var done atomic.Int64
	report := func() string {
		return fmt.Sprintf("verifying the ISO's SHA-512: %d of %d MiB hashed", done.Load()>>20, total>>20)
	}
	s.handler.SetNotReady(report())
	lastLog := time.Now()
	start = time.Now()
	err = verifyChecksum(ctx, f, total, img, s.want, func(n int64) {
		done.Store(n)
		s.handler.SetNotReady(report())
		if time.Since(lastLog) >= progressInterval {
			lastLog = time.Now()
			log.Info("verifying", "hashedBytes", n, "totalBytes", total)
		}
	})
	if err != nil {
		return nil, errors.Join(err, img.Close())
	}
	log.Info("ISO checksum verified", "sha512", s.opts.SHA512, "bytes", total, "duration", time.Since(start).String())
	return img, nil
}

// writeTerminationLog records the message for the kubelet, which copies it
// into the container's status (at most 4096 bytes are kept).
func (s *Server) writeTerminationLog(msg string) {
	if s.opts.TerminationLog == "" {
		return
	}
	f, err := os.OpenFile(s.opts.TerminationLog, os.O_WRONLY|os.O_TRUNC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return // not in a container
	}
	if err == nil {
		_, err = f.WriteString(msg)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		s.opts.Logger.Error("writing the termination message", "file", s.opts.TerminationLog, "error", err)
	}
}

package sim

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
)

// podLogs keeps what the work of each Job's pod logged, as the container
// runtime keeps a container's log, for the kubelets' /containerLogs: the
// toolkit quotes the end of a failed Job's log in the plan and captures
// every Job's log. Each line has the time it was written. A log lives as
// long as its pod object: a kubelet serves the log of the pods it knows,
// and forgets a pod once its object is gone from the API server.
type podLogs struct {
	mu   sync.Mutex
	logs map[string]*podLog
	// requests counts the reads served, by pod, for as long as the
	// simulator runs.
	requests map[string]*LogRequests
}

// LogRequests are the requests for a pod's log a kubelet served.
type LogRequests struct {
	// Follows are the requests that followed the log as it was written;
	// Reads the others.
	Follows, Reads int
}

// podLog is one container's log.
type podLog struct {
	lines []logLine
	// ended: the container exited; a follow stops at the end.
	ended bool
	// changed is closed, and replaced, whenever a line is written or the
	// container ends.
	changed chan struct{}
}

type logLine struct {
	at   time.Time
	text string
}

func podLogKey(namespace, pod string) string { return namespace + "/" + pod }

// logger returns a logger that writes the pod's log.
func (l *podLogs) logger(pod *corev1.Pod) logr.Logger {
	key := podLogKey(pod.Namespace, pod.Name)
	return funcr.New(func(prefix, args string) {
		l.write(key, strings.TrimSpace(prefix+" "+args))
	}, funcr.Options{})
}

// get returns the pod's log, made if create and missing; l.mu is held.
func (l *podLogs) get(key string, create bool) *podLog {
	if l.logs == nil {
		l.logs = map[string]*podLog{}
	}
	p := l.logs[key]
	if p == nil && create {
		p = &podLog{changed: make(chan struct{})}
		l.logs[key] = p
	}
	return p
}

func (p *podLog) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// start makes the log of a pod whose container starts: empty, as a
// kubelet's for a container that has written nothing yet.
func (l *podLogs) start(namespace, pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.get(podLogKey(namespace, pod), true)
}

func (l *podLogs) write(key, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.get(key, true)
	p.lines = append(p.lines, logLine{at: time.Now(), text: line})
	p.notify()
}

// end records that the pod's container exited: its log is complete.
func (l *podLogs) end(namespace, pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.get(podLogKey(namespace, pod), false); p != nil && !p.ended {
		p.ended = true
		p.notify()
	}
}

// remove forgets the log of a pod whose object is gone.
func (l *podLogs) remove(namespace, pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.get(podLogKey(namespace, pod), false); p != nil {
		p.ended = true
		p.notify()
		delete(l.logs, podLogKey(namespace, pod))
	}
}

// logOptions are the kubelet's /containerLogs query parameters the
// simulator serves (k8s.io/api/core/v1 PodLogOptions).
type logOptions struct {
	follow     bool
	timestamps bool
	// since: lines written before it are left out (sinceTime, or
	// sinceSeconds before now).
	since time.Time
	// tail: only the last tail lines; < 0 is all.
	tail int
}

// kubeletTimestamp is how the kubelet stamps each line when asked for
// timestamps: RFC 3339 with nanoseconds, fixed width.
const kubeletTimestamp = "2006-01-02T15:04:05.000000000Z07:00"

// serve writes the pod's log as the kubelet does: the lines since
// opts.since, the last opts.tail of them, each with its timestamp when
// asked; with follow, then every new line until the container ended, the
// pod is gone, or ctx ends. It reports false when the pod has no log.
func (l *podLogs) serve(ctx context.Context, w io.Writer, flush func(), namespace, pod string, opts logOptions) bool {
	key := podLogKey(namespace, pod)
	l.mu.Lock()
	p := l.get(key, false)
	if p == nil {
		l.mu.Unlock()
		return false
	}

	var out []logLine
	for _, line := range p.lines {
		if !line.at.Before(opts.since) {
			out = append(out, line)
		}
	}
	if opts.tail >= 0 && len(out) > opts.tail {
		out = out[len(out)-opts.tail:]
	}
	next, ended, changed := len(p.lines), p.ended, p.changed
	l.mu.Unlock()
	write := func(lines []logLine) {
		for _, line := range lines {
			if opts.timestamps {
				_, _ = fmt.Fprintf(w, "%s %s\n", line.at.UTC().Format(kubeletTimestamp), line.text)
			} else {
				_, _ = fmt.Fprintln(w, line.text)
			}
		}
		flush()
	}
	write(out)
	for opts.follow && !ended {
		select {
		case <-ctx.Done():
			return true
		case <-changed:
		}
		l.mu.Lock()
		var fresh []logLine
		if p.lines != nil && next < len(p.lines) {
			fresh = append(fresh, p.lines[next:]...)
		}
		next, ended, changed = len(p.lines), p.ended, p.changed
		l.mu.Unlock()
		write(fresh)
	}
	return true
}

// tail returns the last lines of the pod's log (all of it for lines <= 0),
// and whether the pod has one.
func (l *podLogs) tail(namespace, pod string, lines int) ([]byte, bool) {
	var b strings.Builder
	opts := logOptions{tail: -1}
	if lines > 0 {
		opts.tail = lines
	}
	ok := l.serve(context.Background(), &b, func() {}, namespace, pod, opts)
	return []byte(b.String()), ok
}

// count counts a request for the pod's log a kubelet received.
func (l *podLogs) count(namespace, pod string, follow bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := podLogKey(namespace, pod)
	if l.requests == nil {
		l.requests = map[string]*LogRequests{}
	}
	r := l.requests[key]
	if r == nil {
		r = &LogRequests{}
		l.requests[key] = r
	}
	if follow {
		r.Follows++
	} else {
		r.Reads++
	}
}

// LogRequests returns the requests for the pod's log its kubelet served.
func (s *Sim) LogRequests(namespace, pod string) LogRequests {
	s.podLogs.mu.Lock()
	defer s.podLogs.mu.Unlock()
	if r := s.podLogs.requests[podLogKey(namespace, pod)]; r != nil {
		return *r
	}
	return LogRequests{}
}

// PodLog returns what the pod's container has logged so far, as `kubectl
// logs` prints it, and whether the kubelet still has it.
func (s *Sim) PodLog(namespace, pod string) (string, bool) {
	b, ok := s.podLogs.tail(namespace, pod, 0)
	return string(b), ok
}

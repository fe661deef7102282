package upgradelog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// follow is one log stream of a running container, open until the
// container ends, the stream breaks or the capture stops it.
type follow struct {
	cancel context.CancelFunc
	done   chan struct{}
	// Set before done is closed: how the stream ended, and when.
	err     error
	endedAt time.Time
	// stopped: the capture ended it; nothing to report.
	stopped atomic.Bool
}

// errNoAnswer: the kubelet did not answer a request within answerTimeout.
var errNoAnswer = fmt.Errorf("the kubelet did not answer within %s", answerTimeout)

// follow makes sure a running container's log is followed. It reports
// whether the container is taken care of without a read in this pass (a
// follow is open, or one failed less than Interval ago: its error is
// returned), and false when no follow may be opened (too many are).
func (c *capturer) follow(pod *corev1.Pod, pl *podLog, container string, l *containerLog, limit int) (bool, error) {
	node, now := pod.Spec.NodeName, c.nowFor()
	pl.mu.Lock()
	f := pl.follows[container]
	pl.mu.Unlock()
	if f != nil {
		select {
		case <-f.done:
			// Ended and the container runs: it failed, or its end is not
			// in the pod's status yet. Again, but no sooner than Interval.
			if now.Sub(f.endedAt) < c.opts.Interval {
				return true, f.err
			}
		default:
			return true, nil
		}
	}
	if !c.kubelets.mayTry(node, now) {
		return true, c.kubelets.lastError(node)
	}
	c.mu.Lock()
	base, queue := c.base, c.queue
	if base == nil || c.follows >= c.opts.MaxFollows {
		c.mu.Unlock()
		return false, nil
	}
	c.follows++
	c.mu.Unlock()
	ctx, cancel := context.WithCancelCause(base)
	f = &follow{cancel: func() { cancel(context.Canceled) }, done: make(chan struct{})}
	pl.mu.Lock()
	pl.follows[container] = f
	opts := &corev1.PodLogOptions{Container: container, Timestamps: true, Follow: true}
	if s := l.since(); s != nil {
		opts.SinceTime = &metav1.Time{Time: *s}
	}
	l.resume()
	pl.mu.Unlock()
	key := client.ObjectKeyFromObject(pod)
	go func() {
		f.err = c.stream(ctx, cancel, pod.Namespace, pod.Name, node, opts, pl, l, limit)
		f.endedAt = c.nowFor()
		c.mu.Lock()
		c.follows--
		c.mu.Unlock()
		stopped := f.stopped.Load()
		close(f.done)
		if !stopped {
			// Its end, or its failure, is the pod's business now.
			queue.Add(reconcile.Request{NamespacedName: key})
		}
	}()
	return true, nil
}

// stream follows a container's log into l until it ends. A kubelet that
// sends no answer within answerTimeout has failed.
func (c *capturer) stream(ctx context.Context, cancel context.CancelCauseFunc, namespace, pod, node string, opts *corev1.PodLogOptions, pl *podLog, l *containerLog, limit int) error {
	start := c.nowFor()
	timer := time.AfterFunc(answerTimeout, func() { cancel(errNoAnswer) })
	rc, err := c.kube.CoreV1().Pods(namespace).GetLogs(pod, opts).Stream(ctx)
	answered := timer.Stop()
	if err != nil {
		if !answered {
			err = errNoAnswer
		}
		if ctx.Err() == nil || !answered {
			c.kubelets.failed(node, err, start)
		}
		return err
	}
	defer func() { _ = rc.Close() }()
	c.kubelets.answered(node)
	if err := feed(rc, pl, l, limit); err != nil {
		if ctx.Err() == nil {
			c.kubelets.failed(node, err, start)
		}
		return err
	}
	return nil
}

// readOnce reads a container's log from where the kept one ends to its end
// now, within timeout.
func (c *capturer) readOnce(ctx context.Context, pod *corev1.Pod, pl *podLog, container string, l *containerLog, limit int, timeout time.Duration) error {
	node, start := pod.Spec.NodeName, c.nowFor()
	if !c.kubelets.mayTry(node, start) {
		return c.kubelets.lastError(node)
	}
	pl.mu.Lock()
	opts := &corev1.PodLogOptions{Container: container, Timestamps: true}
	if s := l.since(); s != nil {
		opts.SinceTime = &metav1.Time{Time: *s}
	}
	l.resume()
	pl.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rc, err := c.kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, opts).Stream(ctx)
	if err == nil {
		err = feed(rc, pl, l, limit)
		_ = rc.Close()
	}
	if err != nil {
		c.kubelets.failed(node, err, start)
		return err
	}
	c.kubelets.answered(node)
	return nil
}

// feed keeps the lines of a log read with timestamps, up to its end.
func feed(r io.Reader, pl *podLog, l *containerLog, limit int) error {
	br := bufio.NewReaderSize(r, 4<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			pl.mu.Lock()
			if l.feed(line, limit) {
				// Saved only when it changed: a quiet container costs no
				// write.
				pl.saved = false
			}
			pl.mu.Unlock()
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// How a container's latest follow stands.
const (
	notFollowed = iota
	following
	followedToEnd
	followFailed
)

// followState says how the container's latest follow stands.
func (pl *podLog) followState(container string) int {
	pl.mu.Lock()
	f := pl.follows[container]
	pl.mu.Unlock()
	if f == nil {
		return notFollowed
	}
	select {
	case <-f.done:
		if f.err == nil && !f.stopped.Load() {
			return followedToEnd
		}
		return followFailed
	default:
		return following
	}
}

// stopFollow ends the container's follow, if any, and waits for it, so
// that the container's log is read by one reader at a time.
func (pl *podLog) stopFollow(container string) {
	pl.mu.Lock()
	f := pl.follows[container]
	delete(pl.follows, container)
	pl.mu.Unlock()
	if f == nil {
		return
	}
	select {
	case <-f.done:
		return
	default:
	}
	f.stopped.Store(true)
	f.cancel()
	<-f.done
}

// stopFollows ends every follow of the pod.
func (pl *podLog) stopFollows() {
	pl.mu.Lock()
	var cs []string
	for name := range pl.follows {
		cs = append(cs, name)
	}
	pl.mu.Unlock()
	for _, name := range cs {
		pl.stopFollow(name)
	}
}

// Package waitfor is how the job commands wait: every wait names what it
// waits for, has a deadline, logs what it sees whenever that changes, and
// when it gives up says what it last saw and what the operator can do.
package waitfor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// ErrTimeout is matched (errors.Is) by the error of a wait that ran out of
// time.
var ErrTimeout = errors.New("timed out")

// TimeoutError says what a wait waited for, how long, what it saw last and
// what to do about it.
type TimeoutError struct {
	What  string
	After time.Duration
	Last  string
	Hint  string
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("gave up after %s waiting for %s", e.After, e.What)
	if e.Last != "" {
		msg += ": " + e.Last
	}
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// Is makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// Condition checks once whether the wait is over. When it is not, status
// says what it sees instead, for the log and for the timeout message. An
// error counts as "not yet" (API servers restart during an upgrade) and is
// reported as the status, unless it is wrapped with Permanent, which ends
// the wait at once.
type Condition func(ctx context.Context) (done bool, status string, err error)

type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

// Permanent marks an error that retrying cannot fix.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanent{err: err}
}

// Wait describes one wait.
type Wait struct {
	// What is waited for, e.g. "node n1 to run kubelet v1.35.2+rke2r1".
	What string
	// Timeout bounds the wait.
	Timeout time.Duration
	// Interval is the time between two checks.
	Interval time.Duration
	// Hint says what the operator can do when the wait gives up.
	Hint string
}

// Until checks cond at once and then every Interval until it is done, it
// fails permanently, ctx ends or Timeout passes.
func (w Wait) Until(ctx context.Context, cond Condition) error {
	logger := log.FromContext(ctx)
	start := time.Now()
	last := ""
	// The deadline bounds the waiting, not a check: a check under way when
	// it passes runs with ctx, so that its result is the last status.
	err := wait.PollUntilContextTimeout(ctx, w.Interval, w.Timeout, true, func(context.Context) (bool, error) {
		done, status, err := cond(ctx)
		if p := (*permanent)(nil); errors.As(err, &p) {
			return false, p.err
		}
		if err != nil {
			status = err.Error()
		}
		if done {
			return true, nil
		}
		if status != last {
			logger.Info("waiting for "+w.What, "status", status)
			last = status
		}
		return false, nil
	})
	switch {
	case err == nil:
		logger.Info("done waiting for "+w.What, "after", time.Since(start).Round(time.Millisecond).String())
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("stopped waiting for %s: %w", w.What, ctx.Err())
	case wait.Interrupted(err):
		return &TimeoutError{What: w.What, After: w.Timeout, Last: last, Hint: w.Hint}
	}
	return fmt.Errorf("waiting for %s: %w", w.What, err)
}

package waitfor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/harvester/upgrade-toolkit/internal/waitfor"
)

func wait(timeout time.Duration) waitfor.Wait {
	return waitfor.Wait{What: "the thing", Timeout: timeout, Interval: 5 * time.Millisecond, Hint: "poke it"}
}

func TestUntil(t *testing.T) {
	t.Run("done at once", func(t *testing.T) {
		calls := 0
		err := wait(time.Second).Until(t.Context(), func(context.Context) (bool, string, error) { calls++; return true, "", nil })
		if err != nil || calls != 1 {
			t.Errorf("err %v after %d checks, want nil after 1", err, calls)
		}
	})
	t.Run("gives up with the last status and the hint", func(t *testing.T) {
		err := wait(50*time.Millisecond).Until(t.Context(), func(context.Context) (bool, string, error) { return false, "2 left", nil })
		var te *waitfor.TimeoutError
		if !errors.As(err, &te) || !errors.Is(err, waitfor.ErrTimeout) {
			t.Fatalf("err = %v, want a TimeoutError", err)
		}
		if want := "gave up after 50ms waiting for the thing: 2 left; poke it"; err.Error() != want {
			t.Errorf("message %q, want %q", err, want)
		}
	})
	t.Run("transient errors are a status", func(t *testing.T) {
		calls := 0
		err := wait(time.Second).Until(t.Context(), func(context.Context) (bool, string, error) {
			calls++
			if calls < 3 {
				return false, "", errors.New("connection refused")
			}
			return true, "", nil
		})
		if err != nil || calls != 3 {
			t.Errorf("err %v after %d checks, want nil after 3", err, calls)
		}
		err = wait(30*time.Millisecond).Until(t.Context(), func(context.Context) (bool, string, error) {
			return false, "", errors.New("connection refused")
		})
		if !errors.Is(err, waitfor.ErrTimeout) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("err = %v, want a timeout quoting the error", err)
		}
	})
	t.Run("permanent errors end the wait", func(t *testing.T) {
		calls := 0
		cause := errors.New("forbidden")
		err := wait(time.Second).Until(t.Context(), func(context.Context) (bool, string, error) {
			calls++
			return false, "", waitfor.Permanent(cause)
		})
		if !errors.Is(err, cause) || errors.Is(err, waitfor.ErrTimeout) || calls != 1 {
			t.Errorf("err %v after %d checks, want the cause after 1", err, calls)
		}
	})
	t.Run("a cancelled context is not a timeout", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		go func() { time.Sleep(20 * time.Millisecond); cancel() }()
		err := wait(time.Minute).Until(ctx, func(context.Context) (bool, string, error) { return false, "", nil })
		if !errors.Is(err, context.Canceled) || errors.Is(err, waitfor.ErrTimeout) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
}

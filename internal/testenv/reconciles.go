package testenv

import (
	"context"
	"fmt"
	"time"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Reconciles is how many reconciles of the named controller have ended in
// this process, by controller-runtime's own count (its metric
// controller_runtime_reconcile_total, which every manager of the process
// adds to).
func Reconciles(controller string) (int, error) {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					n += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return n, nil
}

// WholePass waits until the named controller, which has one worker, has run
// a whole reconcile that began after the call, and returns how many
// reconciles ended meanwhile: its reconciles run one at a time, so of two
// that end after the call the second began after it. touch asks for a
// reconcile (a change of the object the test waits on); it is called until
// then. A test that asserts that nothing happened waits for this, instead
// of for a while: whatever the controller was shown before the call, it has
// acted on.
func WholePass(ctx context.Context, controller string, touch func() error) (int, error) {
	before, err := Reconciles(controller)
	if err != nil {
		return 0, err
	}
	for {
		n, err := Reconciles(controller)
		if err != nil {
			return 0, err
		}
		if n-before >= 2 {
			return n - before, nil
		}
		if err := touch(); err != nil {
			return n - before, err
		}
		select {
		case <-ctx.Done():
			return n - before, fmt.Errorf("waiting for a whole reconcile of %s (%d ended): %w", controller, n-before, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

package testenv

import (
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Reconciles is how many reconciles of the named controller have ended in
// this process, by controller-runtime's own count (its metric
// controller_runtime_reconcile_total, which every manager of the process
// adds to). A test that asserts that nothing happened waits for reconciles
// counted after the change, instead of for a while.
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

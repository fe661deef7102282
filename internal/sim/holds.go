package sim

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// RulePodHeld: a pod of the upgrade being deleted keeps the log capture's
// finalizer no longer than the Checker's hold allowance (the capture's
// bound and some slack). The hold counts from the latest of when its
// deletion was seen, the end of its grace period (a running pod waits that
// long for its kubelet anyway) and the manager's latest start (nothing
// releases a pod while the manager is down). Checked only once a run tells
// the Checker that its manager started (ManagerStarted): the chaos runs,
// whose faults delay every write of the manager, the release included,
// leave it off.
const RulePodHeld = "pod-held"

// heldPod is a pod being deleted that carries the capture's finalizer.
type heldPod struct {
	plan string
	// since is when its hold began to count.
	since time.Time
}

// ManagerStarted tells the Checker that the toolkit's manager (re)started
// at, and that a pod's hold may last allowance from then on.
func (c *Checker) ManagerStarted(at time.Time, allowance time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.managerStart, c.holdAllowance = at, allowance
}

// ObservePod tracks the holds of the upgrade's pods being deleted.
func (c *Checker) ObservePod(p *corev1.Pod) {
	plan := p.Labels[v1beta1.LabelUpgradePlan]
	if plan == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	key := p.Namespace + "/" + p.Name
	held := p.DeletionTimestamp != nil && slices.Contains(p.Finalizers, v1beta1.FinalizerLogCapture)
	h, tracked := c.held[key]
	switch {
	case held && !tracked:
		c.held[key] = heldPod{plan: plan, since: later(time.Now(), p.DeletionTimestamp.Time)}
	case !held && tracked:
		c.checkHold(key, h, time.Now())
		delete(c.held, key)
	}
}

// podGone ends the hold of a pod deleted for good.
func (c *Checker) podGone(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	key := p.Namespace + "/" + p.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, tracked := c.held[key]; tracked {
		c.checkHold(key, h, time.Now())
		delete(c.held, key)
	}
}

// checkHolds checks the plan's pods still held at now.
func (c *Checker) checkHolds(plan string, now time.Time) {
	for key, h := range c.held {
		if h.plan == plan {
			c.checkHold(key, h, now)
		}
	}
}

// checkHold reports a hold that lasted past the allowance at now; c.mu is
// held.
func (c *Checker) checkHold(key string, h heldPod, now time.Time) {
	if c.holdAllowance <= 0 {
		return
	}
	held := now.Sub(later(h.since, c.managerStart))
	c.longestHold[h.plan] = max(c.longestHold[h.plan], held)
	if held > c.holdAllowance {
		c.report(Violation{Plan: h.plan, Rule: RulePodHeld, Message: fmt.Sprintf(
			"pod %s was held by the log capture's finalizer %s after its deletion began (allowed: %s)", key, held.Round(100*time.Millisecond), c.holdAllowance)})
	}
}

// LongestHold is the longest a pod of the plan was held by the log
// capture, counted as RulePodHeld counts it; zero before a manager started
// or when no pod was held.
func (c *Checker) LongestHold(plan string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.longestHold[plan]
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

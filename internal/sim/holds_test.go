package sim

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// A pod held by the capture past the allowance after its deletion began is
// a violation; one let go within it, or held while the manager was down, or
// before its grace period ended, is not.
func TestCheckerPodHeld(t *testing.T) {
	pod := func(name string, deleting time.Time, held bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{v1beta1.LabelUpgradePlan: "up"}}}
		if !deleting.IsZero() {
			p.DeletionTimestamp = &metav1.Time{Time: deleting}
		}
		if held {
			p.Finalizers = []string{v1beta1.FinalizerLogCapture}
		}
		return p
	}
	now := time.Now()
	c := NewChecker()
	c.ObservePod(pod("off", now, true))
	c.podGone(pod("off", now, false))
	if len(c.Violations()) > 0 {
		t.Fatalf("a violation before any manager started: %v", c.Violations())
	}

	c.ManagerStarted(now.Add(-time.Minute), 100*time.Millisecond)
	c.ObservePod(pod("quick", now, true))
	c.ObservePod(pod("quick", now, false)) // let go at once
	c.ObservePod(pod("grace", now.Add(time.Hour), true))
	c.podGone(pod("grace", now.Add(time.Hour), true)) // its grace period runs
	c.ObservePod(pod("long", now, true))
	c.ObservePod(pod("kept", time.Time{}, true)) // held, not deleted
	if v := c.Violations(); len(v) > 0 {
		t.Fatalf("violations for holds within the allowance: %v", v)
	}
	time.Sleep(150 * time.Millisecond)
	c.podGone(pod("long", now, true))
	v := c.Violations()
	if len(v) != 1 || v[0].Rule != RulePodHeld || v[0].Plan != "up" {
		t.Fatalf("violations %v, want one %s for pod ns/long", v, RulePodHeld)
	}
	if got := c.LongestHold("up"); got < 150*time.Millisecond || got > time.Minute {
		t.Errorf("longest hold %s, want the 150 ms or more ns/long was held", got)
	}

	// Still held at the plan's end.
	c.ObservePod(pod("stuck", now, true))
	time.Sleep(150 * time.Millisecond)
	c.mu.Lock()
	c.checkHolds("up", time.Now())
	c.mu.Unlock()
	if v := c.Violations(); len(v) != 2 {
		t.Errorf("a pod still held at the plan's end is not reported: %v", v)
	}
	// A manager started since: the hold counts from then.
	c.ManagerStarted(time.Now(), time.Minute)
	c.ObservePod(pod("restarted", now.Add(-time.Hour), true))
	c.podGone(pod("restarted", now, true))
	if v := c.Violations(); len(v) != 2 {
		t.Errorf("a hold over a manager's absence is reported: %v", v)
	}
}

package upgradelog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// A kubelet is down once every read through it failed for the bound, and
// tried again only every probeInterval; one answer makes it up again.
func TestKubeletsDown(t *testing.T) {
	var k kubelets
	t0 := time.Now()
	bound := 5 * time.Second
	if k.down("node-1", t0, bound) || !k.mayTry("node-1", t0) {
		t.Fatal("a kubelet never tried is down, or not worth a try")
	}
	k.failed("node-1", errors.New("refused"), t0)
	if k.down("node-1", t0.Add(bound-time.Millisecond), bound) {
		t.Error("down before the bound")
	}
	if !k.down("node-1", t0.Add(bound), bound) {
		t.Error("not down after failing for the bound")
	}
	if k.down("node-2", t0.Add(bound), bound) {
		t.Error("another node's failure counts")
	}
	// Within probeInterval of the first failure a read may try every
	// retryInterval.
	soon := t0.Add(retryInterval)
	if !k.mayTry("node-1", soon) || k.mayTry("node-1", soon.Add(retryInterval/2)) || !k.mayTry("node-1", soon.Add(retryInterval)) {
		t.Error("a failing kubelet is not tried once per retryInterval")
	}
	probe := soon.Add(retryInterval + probeInterval)
	if !k.mayTry("node-1", probe) || k.mayTry("node-1", probe.Add(time.Second)) {
		t.Error("a down kubelet is not tried exactly once per probeInterval")
	}
	if !k.mayTry("node-1", probe.Add(probeInterval)) {
		t.Error("a down kubelet is never tried again")
	}
	since, err := k.failure("node-1", t0.Add(bound))
	if !since.Equal(t0) || err == nil || err.Error() != "refused" {
		t.Errorf("failure = %v, %v; want since the first failure, with the last error", since, err)
	}
	k.answered("node-1")
	if k.down("node-1", t0.Add(time.Minute), bound) {
		t.Error("down after it answered")
	}
	// A failure long ago is forgotten.
	k.failed("node-3", errors.New("refused"), t0)
	k.get("node-3").lastFailure = t0
	if k.down("node-3", t0.Add(downMemory), bound) {
		t.Error("a failure older than downMemory still counts")
	}
}

var schemaPods = corev1.Resource("pods")

func TestIncompleteReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewInternalError(errors.New(`Get "https://192.0.2.1:10250/containerLogs/x/y/z": EOF`)), v1beta1.LogKubeletUnreachable},
		{apierrors.NewServiceUnavailable("no endpoints"), v1beta1.LogKubeletUnreachable},
		{errNoAnswer, v1beta1.LogKubeletTimeout},
		{fmt.Errorf("reading: %w", context.DeadlineExceeded), v1beta1.LogKubeletTimeout},
		{apierrors.NewNotFound(schemaPods, "p"), v1beta1.LogNotFound},
		{apierrors.NewForbidden(schemaPods, "p", errors.New("no")), v1beta1.LogReadFailed},
		{nil, v1beta1.LogReadFailed},
	} {
		if got := incompleteReason(tc.err); got != tc.want {
			t.Errorf("incompleteReason(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

// The Incomplete condition names each node once, with its pods and why.
func TestIncompleteCondition(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC))
	gap := &v1beta1.IncompleteLog{Reason: v1beta1.LogKubeletUnreachable, Message: "EOF\nmore", Since: since}
	logs := []v1beta1.CapturedLog{
		{Namespace: "ns", Pod: "a", Container: "c1", Node: "node-1", Incomplete: gap},
		{Namespace: "ns", Pod: "a", Container: "c2", Node: "node-1", Incomplete: gap},
		{Namespace: "ns", Pod: "b", Container: "c", Node: "node-2", Incomplete: gap},
		{Namespace: "ns", Pod: "c", Container: "c", Node: "node-3", Complete: true},
	}
	c := IncompleteCondition(logs)
	want := "3 log(s) were let go before they could be read to their end, because the kubelets of their nodes did not answer; what was read is kept: " +
		"node node-1 (1 pod(s); KubeletUnreachable since 2026-11-27T05:00:00Z: EOF), node node-2 (1 pod(s); KubeletUnreachable since 2026-11-27T05:00:00Z: EOF)"
	if c.Status != metav1.ConditionTrue || c.Reason != v1beta1.LogKubeletUnreachable || c.Message != want {
		t.Errorf("condition %s %s %q\nwant message %q", c.Status, c.Reason, c.Message, want)
	}
	if c := IncompleteCondition(logs[3:]); c.Status != metav1.ConditionFalse {
		t.Errorf("condition with every log read: %+v", c)
	}
	var many []v1beta1.CapturedLog
	for i := range 30 {
		many = append(many, v1beta1.CapturedLog{Pod: "p", Node: fmt.Sprintf("node-%02d", i), Incomplete: gap})
	}
	if c := IncompleteCondition(many); !strings.HasSuffix(c.Message, "and 20 more") {
		t.Errorf("a condition naming 30 nodes does not stop at ten: %s", c.Message)
	}
}

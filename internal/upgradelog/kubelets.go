package upgradelog

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
)

// kubelets remembers, per node, how the capture's reads through its
// kubelet went, so that a kubelet that does not answer costs one failed
// read, not one per pod: a pod being deleted on its node is let go at once,
// and the node is tried again only every probeInterval.
type kubelets struct {
	mu  sync.Mutex
	by  map[string]*kubelet
	log logr.Logger
}

type kubelet struct {
	// failingSince is when the reads began to fail, zero while they
	// succeed; lastFailure the latest failure, err its error.
	failingSince, lastFailure time.Time
	err                       error
	// lastTry is the latest read tried while failing.
	lastTry time.Time
}

// retryInterval is how often a kubelet whose reads began to fail is tried
// again, and probeInterval how often once they have failed that long.
const (
	retryInterval = time.Second
	probeInterval = 30 * time.Second
)

// downMemory is how long a failure counts: a kubelet last seen failing
// longer ago is tried again, whatever it did then.
const downMemory = 2 * time.Minute

func (k *kubelets) get(node string) *kubelet {
	if k.by == nil {
		k.by = map[string]*kubelet{}
	}
	kl := k.by[node]
	if kl == nil {
		kl = &kubelet{}
		k.by[node] = kl
	}
	return kl
}

// answered records a read through the node's kubelet that succeeded.
func (k *kubelets) answered(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	*k.get(node) = kubelet{}
}

// failed records a read begun at start that failed with err. The first
// failure after the kubelet answered is logged, at the default level: once
// per node, not per pod.
func (k *kubelets) failed(node string, err error, start time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kl := k.get(node)
	if kl.failingSince.IsZero() {
		k.log.Info("cannot read the upgrade's pod logs through the kubelet of a node; they are kept as far as read, and a pod being deleted there is let go",
			"node", node, "reason", incompleteReason(err), "error", err.Error())
	}
	if kl.failingSince.IsZero() || start.Before(kl.failingSince) {
		kl.failingSince = start
	}
	kl.lastFailure, kl.err = time.Now(), err
}

// failing reports whether the node's reads fail, and since when.
func (kl *kubelet) failing(now time.Time) bool {
	return !kl.failingSince.IsZero() && now.Sub(kl.lastFailure) < downMemory
}

// down reports whether every read through the node's kubelet has failed
// for at least bound: a pod being deleted there cannot have its log read.
func (k *kubelets) down(node string, now time.Time, bound time.Duration) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	kl := k.get(node)
	return kl.failing(now) && now.Sub(kl.failingSince) >= bound
}

// mayTry reports whether a read through the node's kubelet is worth
// trying now: it answers, or, while it fails, it was last tried
// retryInterval ago (probeInterval once it has failed that long): the pods
// of a node that does not answer do not each ask. It counts as a try.
func (k *kubelets) mayTry(node string, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	kl := k.get(node)
	if !kl.failing(now) {
		return true
	}
	every := retryInterval
	if now.Sub(kl.failingSince) >= probeInterval {
		every = probeInterval
	}
	if now.Sub(kl.lastTry) < every {
		return false
	}
	kl.lastTry = now
	return true
}

// lastError is the error of the node's latest failed read.
func (k *kubelets) lastError(node string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.get(node).err; err != nil {
		return err
	}
	return errors.New("no read through its kubelet has succeeded")
}

// failure says why the node's reads fail and since when; zero when they
// do not.
func (k *kubelets) failure(node string, now time.Time) (time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	kl := k.get(node)
	if !kl.failing(now) {
		return time.Time{}, nil
	}
	return kl.failingSince, kl.err
}

// incompleteReason classifies the error of a failed read.
func incompleteReason(err error) string {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return v1beta1.LogReadFailed
	case errors.Is(err, errNoAnswer), errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return v1beta1.LogKubeletTimeout
	case apierrors.IsNotFound(err):
		return v1beta1.LogNotFound
	case errors.As(err, &status) && status.Status().Code >= http.StatusInternalServerError:
		// The API server's proxy to the kubelet failed: refused, reset,
		// a certificate it cannot verify.
		return v1beta1.LogKubeletUnreachable
	}
	return v1beta1.LogReadFailed
}

// maxMessage bounds the error kept with an incomplete log.
const maxMessage = 512

// letGo releases a pod being deleted whose log cannot be read: each of its
// containers not read to the end is marked incomplete with why, what was
// read is saved (one try: a failure is logged, not waited on), and the
// node's kubelet is named once per plan.
func (c *capturer) letGo(ctx context.Context, ul *v1beta1.UpgradeLog, plan *v1beta1.UpgradePlan, pod *corev1.Pod, pl *podLog) error {
	node, now := pod.Spec.NodeName, c.nowFor()
	since, err := c.kubelets.failure(node, now)
	if since.IsZero() {
		since = pl.unreadSince
	}
	if since.IsZero() {
		since = now
	}
	if err == nil {
		err = errors.New("the log could not be read before the pod was deleted")
	}
	msg := err.Error()
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	gap := &v1beta1.IncompleteLog{Reason: incompleteReason(err), Message: msg, Since: metav1.NewTime(since.UTC().Truncate(time.Second))}
	pl.stopFollows()
	marked := 0
	pl.mu.Lock()
	for _, ct := range containers(pod) {
		if !started(ct.status) {
			continue
		}
		l := pl.containers[ct.name]
		if l == nil {
			l = &containerLog{}
			pl.containers[ct.name] = l
		}
		if !l.complete && l.incomplete == nil {
			l.incomplete = gap
			pl.saved = false
			marked++
		}
	}
	pl.mu.Unlock()
	if err := c.save(ctx, ul, plan.Name, pod, pl); err != nil {
		logger(ctx).Error(err, "saving what was read of the log of a pod let go")
	}
	for range marked {
		metrics.CountIncompleteLog(gap.Reason)
	}
	if marked > 0 {
		c.warn(plan, node, gap)
	}
	return c.finish(ctx, pod, pl)
}

// warn tells, once per plan and node, that the node's kubelet does not
// answer: a Warning event on the plan.
func (c *capturer) warn(plan *v1beta1.UpgradePlan, node string, gap *v1beta1.IncompleteLog) {
	key := plan.Name + "/" + node
	c.mu.Lock()
	if c.warned == nil {
		c.warned = map[string]bool{}
	}
	told := c.warned[key]
	c.warned[key] = true
	c.mu.Unlock()
	if told {
		return
	}
	c.events.Eventf(plan, corev1.EventTypeWarning, v1beta1.EventLogIncomplete,
		"the kubelet of node %s does not answer the API server's log requests (%s since %s: %s): the logs of the upgrade's pods on %s are kept as far as they were read, and marked incomplete (upgrade-toolkit logs %s); check that the control plane reaches port 10250 of %s and that its kubelet's serving certificate is valid",
		node, gap.Reason, gap.Since.UTC().Format(time.RFC3339), firstLine(gap.Message), node, plan.Name, node)
}

// firstLine is an error's first line, for a one-line message.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// logger is the capture's logger.
func logger(ctx context.Context) logr.Logger { return log.FromContext(ctx) }

package upgradelog

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// ensureUpgradeLog returns the plan's UpgradeLog, made if missing: named
// after the plan and owned by it, so that it goes with the plan. It may be
// the cache's own: read it, never change it.
func ensureUpgradeLog(ctx context.Context, c client.Client, plan *v1beta1.UpgradePlan) (*v1beta1.UpgradeLog, error) {
	ul := &v1beta1.UpgradeLog{}
	// The cache's own, not a copy: the caller reads only its identity, and
	// its status lists every log.
	err := c.Get(ctx, client.ObjectKey{Name: plan.Name}, ul, client.UnsafeDisableDeepCopy)
	if err == nil {
		return ul, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	ul = &v1beta1.UpgradeLog{
		ObjectMeta: metav1.ObjectMeta{Name: plan.Name, Labels: map[string]string{v1beta1.LabelUpgradeLog: plan.Name}},
		Spec:       v1beta1.UpgradeLogSpec{UpgradePlan: plan.Name},
	}
	if err := controllerutil.SetOwnerReference(plan, ul, c.Scheme()); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, ul); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return ul, c.Get(ctx, client.ObjectKey{Name: plan.Name}, ul)
		}
		return nil, fmt.Errorf("creating the UpgradeLog %s: %w", plan.Name, err)
	}
	return ul, nil
}

// statusWriter keeps each UpgradeLog's status the list of its ConfigMaps'
// logs. It writes a status at most every writeInterval, so that a running
// container's log saved every few seconds does not rewrite the UpgradeLog
// as often: the ConfigMaps hold the live figures.
type statusWriter struct {
	c       client.Client
	mu      sync.Mutex
	written map[string]time.Time
}

// statusInterval is the least time between two writes of an UpgradeLog's
// status.
const statusInterval = 5 * time.Second

// perLogInterval stretches the time between two writes of a long list: each
// write sends the whole list (about 250 bytes per log, four logs per node),
// so at a fixed interval the bytes written per node would grow with the
// cluster. Stretched, they stay flat: the list is written about as many
// times per upgrade whatever its length (a 500-node upgrade's 2,000 logs
// every 100 s).
const perLogInterval = 50 * time.Millisecond

// writeInterval is the least time between two writes of a status that lists
// logs logs.
func writeInterval(logs int) time.Duration {
	return max(statusInterval, time.Duration(logs)*perLogInterval)
}

func setupStatus(mgr ctrl.Manager) error {
	toLog := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if plan := o.GetLabels()[v1beta1.LabelUpgradeLog]; plan != "" && o.GetNamespace() == cluster.HarvesterNamespace {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: plan}}}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).Named("upgradelog-status").
		For(&v1beta1.UpgradeLog{}).
		Watches(&corev1.ConfigMap{}, toLog).
		Complete(&statusWriter{c: mgr.GetClient(), written: map[string]time.Time{}})
}

func (w *statusWriter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ul := &v1beta1.UpgradeLog{}
	// The cache's own, read only: most passes write nothing, and the status
	// lists every log. A copy is made to write.
	if err := w.c.Get(ctx, req.NamespacedName, ul, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// Within the interval, not even the summary is made: each save of a
	// log brings a pass, and the summary reads every ConfigMap.
	w.mu.Lock()
	wait := writeInterval(len(ul.Status.Logs)) - time.Since(w.written[ul.Name])
	w.mu.Unlock()
	if wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	cms := &corev1.ConfigMapList{}
	// Read only: the cache's own objects, not copies.
	if err := w.c.List(ctx, cms, client.InNamespace(cluster.HarvesterNamespace), client.MatchingLabels{v1beta1.LabelUpgradeLog: ul.Spec.UpgradePlan}, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, err
	}
	st := Summarize(cms.Items)
	st.Conditions = slices.Clone(ul.Status.Conditions)
	truncated := 0
	for _, l := range st.Logs {
		if l.Truncated {
			truncated++
		}
	}
	cond := metav1.Condition{Type: v1beta1.ConditionTruncated, Status: metav1.ConditionFalse, Reason: "WithinLimits", Message: "every log is kept whole"}
	if truncated > 0 {
		cond = metav1.Condition{Type: v1beta1.ConditionTruncated, Status: metav1.ConditionTrue, Reason: "LimitReached",
			Message: fmt.Sprintf("%d log(s) were longer than the limit kept; a mark line in each says how many lines were dropped", truncated)}
	}
	cond.ObservedGeneration = ul.Generation
	meta.SetStatusCondition(&st.Conditions, cond)
	incomplete := IncompleteCondition(st.Logs)
	incomplete.ObservedGeneration = ul.Generation
	meta.SetStatusCondition(&st.Conditions, incomplete)
	if reflect.DeepEqual(st, ul.Status) {
		return reconcile.Result{}, nil
	}
	ul = &v1beta1.UpgradeLog{ObjectMeta: *ul.ObjectMeta.DeepCopy(), Spec: ul.Spec, Status: st}
	if err := w.c.Status().Update(ctx, ul); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	w.mu.Lock()
	w.written[ul.Name] = time.Now()
	w.mu.Unlock()
	return reconcile.Result{}, nil
}

// Summarize lists the logs that the ConfigMaps keep, by namespace, pod and
// container.
func Summarize(cms []corev1.ConfigMap) v1beta1.UpgradeLogStatus {
	var st v1beta1.UpgradeLogStatus
	for i := range cms {
		cm := &cms[i]
		for name, s := range states(cm) {
			l := v1beta1.CapturedLog{
				Namespace: cm.Annotations[annotationNamespace], Pod: cm.Annotations[annotationPod], Container: name,
				Job: cm.Annotations[annotationJob], Node: cm.Annotations[annotationNode],
				Component: cm.Labels[v1beta1.LabelUpgradeComponent], JobType: cm.Labels[v1beta1.LabelJobType],
				ConfigMap: cm.Name, Key: Key(name), Bytes: s.Bytes, Lines: s.Lines,
				Complete: s.Complete, Truncated: s.DroppedLines > 0, Incomplete: s.Incomplete,
			}
			if !s.First.IsZero() {
				l.FirstTimestamp = &metav1.Time{Time: s.First}
			}
			if !s.Last.IsZero() {
				l.LastTimestamp = &metav1.Time{Time: s.Last}
			}
			st.Logs = append(st.Logs, l)
			st.Bytes += s.Bytes
		}
	}
	sort.Slice(st.Logs, func(i, j int) bool {
		a, b := st.Logs[i], st.Logs[j]
		if !a.FirstTimestamp.Equal(b.FirstTimestamp) && a.FirstTimestamp != nil && b.FirstTimestamp != nil {
			return a.FirstTimestamp.Before(b.FirstTimestamp)
		}
		if a.Namespace+"/"+a.Pod != b.Namespace+"/"+b.Pod {
			return a.Namespace+"/"+a.Pod < b.Namespace+"/"+b.Pod
		}
		return a.Container < b.Container
	})
	return st
}

// IncompleteCondition is the UpgradeLog's Incomplete condition: True when
// logs were let go before their end, naming each node, its pods and why.
func IncompleteCondition(logs []v1beta1.CapturedLog) metav1.Condition {
	type nodeGap struct {
		pods map[string]bool
		gap  *v1beta1.IncompleteLog
	}
	byNode := map[string]*nodeGap{}
	var nodes []string
	count := 0
	for _, l := range logs {
		if l.Incomplete == nil {
			continue
		}
		count++
		g := byNode[l.Node]
		if g == nil {
			g = &nodeGap{pods: map[string]bool{}, gap: l.Incomplete}
			byNode[l.Node] = g
			nodes = append(nodes, l.Node)
		}
		g.pods[l.Namespace+"/"+l.Pod] = true
	}
	if count == 0 {
		return metav1.Condition{Type: v1beta1.ConditionIncomplete, Status: metav1.ConditionFalse, Reason: "EveryLogRead", Message: "no log was let go before its end"}
	}
	sort.Strings(nodes)
	parts := make([]string, 0, len(nodes))
	reason := ""
	for _, n := range nodes {
		g := byNode[n]
		parts = append(parts, fmt.Sprintf("node %s (%d pod(s); %s since %s: %s)", orDash(n), len(g.pods), g.gap.Reason, g.gap.Since.UTC().Format(time.RFC3339), firstLine(g.gap.Message)))
		if reason == "" {
			reason = g.gap.Reason
		} else if reason != g.gap.Reason {
			reason = v1beta1.LogReadFailed
		}
	}
	return metav1.Condition{Type: v1beta1.ConditionIncomplete, Status: metav1.ConditionTrue, Reason: reason,
		Message: fmt.Sprintf("%d log(s) were let go before they could be read to their end, because the kubelets of their nodes did not answer; what was read is kept: %s", count, names.List(parts))}
}

// Package upgradelog keeps the logs of the pods an upgrade runs: the
// toolkit's own Jobs and the system-upgrade-controller Jobs of its Plans.
// A running container's log is followed (streamed from the kubelet through
// the API server) as it is written, and read once more after the container
// ended; it is kept in a ConfigMap per pod (gzip), owned by the plan's
// UpgradeLog, whose status lists them. A finalizer holds each pod until its
// log was read to the end, so that a pod deleted right after it finished
// keeps its log long enough; a restarted manager goes on from the last line
// kept.
//
// The capture is a helper: it never costs the upgrade it serves. A pod
// being deleted is held only while its log can be read, and at most
// HoldBound once reading fails (docs/architecture.md, "What may hold a pod,
// a node or the plan"); what was read is kept, and the log says why it is
// incomplete.
package upgradelog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// Options configure the capture.
type Options struct {
	// Enabled runs the capture, for every plan whose spec.logEnabled is
	// not false. Off, nothing of it runs: no pod is watched or held and no
	// UpgradeLog is made.
	Enabled bool
	// Limits bound what is kept; zero values take DefaultLimits'.
	Limits Limits
	// Interval is how often what a followed container logged is saved, and
	// how often a container that cannot be followed is read; 0 is
	// DefaultInterval. A container's end is read at once.
	Interval time.Duration
	// HoldBound is the longest a pod being deleted is held once reading its
	// log fails, and the longest one read of it may take; 0 is
	// DefaultHoldBound.
	HoldBound time.Duration
	// MaxFollows is how many running containers' logs are followed at
	// once; beyond it they are read every Interval. 0 is DefaultMaxFollows.
	MaxFollows int
}

// DefaultInterval is how often a running container's log is saved: what a
// manager restart makes the capture read again, no more.
const DefaultInterval = 10 * time.Second

// DefaultHoldBound: a pod being deleted whose log cannot be read is let go
// within five seconds. A drain, a Job's cleanup or the plan's end waits no
// longer than that on a log.
const DefaultHoldBound = 5 * time.Second

// DefaultMaxFollows bounds the log streams held open: a few per node Job
// running at once, and the image preload's on a large cluster.
const DefaultMaxFollows = 64

// answerTimeout bounds a read of a pod that is not being deleted, and the
// wait for a follow's first answer: a kubelet that has not answered by then
// is not answering.
const answerTimeout = 10 * time.Second

// Namespaces are where the upgrade's pods run: the toolkit's Jobs in
// harvester-system, system-upgrade-controller's in cattle-system.
var Namespaces = []string{cluster.HarvesterNamespace, cluster.CattleNamespace}

// ConfigMap is the name of the ConfigMap that keeps a pod's log.
func ConfigMap(plan, pod string) string { return names.Join(plan, "log", pod) }

// Key is a container's key in its pod's log ConfigMap.
func Key(container string) string { return container + ".log.gz" }

// What the capture asks of the API: the pods and their logs, the log
// ConfigMaps and the UpgradeLogs. Its Warning events on the plans are
// recorded with the manager role's permission, which is always bound where
// the capture runs.
//
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=pods,verbs=list;watch;patch
// +kubebuilder:rbac:groups="",namespace=cattle-system,resources=pods,verbs=list;watch;patch
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=pods/log,verbs=get
// +kubebuilder:rbac:groups="",namespace=cattle-system,resources=pods/log,verbs=get
// +kubebuilder:rbac:groups="",namespace=harvester-system,resources=configmaps,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradeplans,verbs=list;watch
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradelogs,verbs=list;watch;create
// +kubebuilder:rbac:groups=management.harvesterhci.io,resources=upgradelogs/status,verbs=update

// capturer reads and keeps the logs of the upgrade's pods.
type capturer struct {
	c      client.Client
	api    client.Reader
	kube   kubernetes.Interface
	events record.EventRecorder
	opts   Options
	mu     sync.Mutex
	pods   map[types.NamespacedName]*podLog
	// kept is what each plan's log ConfigMaps keep: counted from the cache
	// once per plan, then kept up to date by save, so that the plan's limit
	// costs no pass over every ConfigMap.
	kept map[string]*keptBytes
	// kubelets is how the reads through each node's kubelet went.
	kubelets kubelets
	// warned are the plan/node pairs whose kubelet was named.
	warned map[string]bool
	// follows counts the log streams open.
	follows int
	// base is the controller's context, which the log streams live in, and
	// queue its work queue, which a stream's end adds its pod to; both set
	// when the controller starts.
	base   context.Context
	queue  workqueue.TypedRateLimitingInterface[reconcile.Request]
	nowFor func() time.Time
}

// keptBytes is the text the log ConfigMaps of one plan keep, by ConfigMap.
type keptBytes struct {
	total int64
	by    map[string]int64
}

// set records that the ConfigMap name keeps n bytes.
func (k *keptBytes) set(name string, n int64) {
	k.total += n - k.by[name]
	k.by[name] = n
}

// podLog is what is kept of one pod.
type podLog struct {
	uid types.UID
	// finished: the log was kept to its end, or let go, and the pod
	// released; only this is remembered of it, until the pod is gone.
	finished bool
	// mu guards containers' text and saved, which the pod's follows feed.
	mu         sync.Mutex
	containers map[string]*containerLog
	// saved: the ConfigMap holds all of it.
	saved bool
	// follows are the pod's log streams, open or ended, by container.
	follows map[string]*follow
	// unreadSince is when reading the log of the pod, being deleted, began
	// to fail.
	unreadSince time.Time
}

// Setup adds the capture and the UpgradeLog status to the manager; with
// opts.Enabled off it adds nothing.
func Setup(mgr ctrl.Manager, opts Options) error {
	if !opts.Enabled {
		return nil
	}
	if opts.Limits.Container <= 0 {
		opts.Limits.Container = DefaultLimits.Container
	}
	if opts.Limits.Plan <= 0 {
		opts.Limits.Plan = DefaultLimits.Plan
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.HoldBound <= 0 {
		opts.HoldBound = DefaultHoldBound
	}
	if opts.MaxFollows <= 0 {
		opts.MaxFollows = DefaultMaxFollows
	}
	kube, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	c := &capturer{
		c: mgr.GetClient(), api: mgr.GetAPIReader(), kube: kube, events: mgr.GetEventRecorderFor("upgrade-toolkit-log-capture"),
		opts: opts, pods: map[types.NamespacedName]*podLog{}, kept: map[string]*keptBytes{}, nowFor: time.Now,
		kubelets: kubelets{log: mgr.GetLogger().WithName("upgradelog-capture")},
	}
	upgradePods := predicate.NewPredicateFuncs(func(o client.Object) bool {
		l := o.GetLabels()
		return l[v1beta1.LabelUpgradePlan] != "" && l[batchv1.JobNameLabel] != "" && slices.Contains(Namespaces, o.GetNamespace())
	})
	if err := ctrl.NewControllerManagedBy(mgr).Named("upgradelog-capture").
		For(&corev1.Pod{}, builder.WithPredicates(upgradePods)).
		// The controller's context and queue, for the log streams.
		WatchesRawSource(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.base, c.queue = ctx, q
			return nil
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(c); err != nil {
		return err
	}
	return setupStatus(mgr)
}

// conflictRetry is how soon a pass runs again whose finalizer patch lost a
// race with another writer of the pod (the scheduler, the kubelet, the Job
// controller write pods often while they start), or whose save of a log
// ConfigMap found it already made (the cache had not yet seen the last
// save).
const conflictRetry = 100 * time.Millisecond

// deletingRetry is how soon the read of a pod being deleted is tried again
// after it failed, within HoldBound.
const deletingRetry = time.Second

func (c *capturer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := c.reconcile(ctx, req)
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// Expected, not an error: the next pass reads the pod again.
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

func (c *capturer) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := c.c.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	planName := pod.Labels[v1beta1.LabelUpgradePlan]
	plan := &v1beta1.UpgradePlan{}
	// Read only, and large on a large cluster (a status entry per node):
	// the cache's own, not a copy.
	if err := c.c.Get(ctx, client.ObjectKey{Name: planName}, plan, client.UnsafeDisableDeepCopy); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		plan = nil
	}
	if plan == nil || plan.DeletionTimestamp != nil || !plan.LogCaptureEnabled(true) {
		// Nothing to keep the log for (the plan goes, or opted out): let
		// the pod go.
		c.mu.Lock()
		delete(c.kept, planName)
		c.mu.Unlock()
		c.forget(req.NamespacedName)
		return reconcile.Result{}, c.release(ctx, pod)
	}
	pl, err := c.load(ctx, plan.Name, pod)
	if err != nil {
		return reconcile.Result{}, err
	}
	if c.done(pod, pl) {
		return reconcile.Result{}, c.finish(ctx, pod, pl)
	}
	ul, err := ensureUpgradeLog(ctx, c.c, plan)
	if err != nil {
		return reconcile.Result{}, err
	}
	if pod.DeletionTimestamp == nil && !controllerutil.ContainsFinalizer(pod, v1beta1.FinalizerLogCapture) {
		// A system-upgrade-controller pod, seen for the first time (the
		// toolkit's own carry the finalizer from their template).
		if err := c.hold(ctx, pod); err != nil {
			return reconcile.Result{}, err
		}
	}
	deleting := pod.DeletionTimestamp != nil
	if deleting && c.kubelets.down(pod.Spec.NodeName, c.nowFor(), c.opts.HoldBound) {
		// Its kubelet has not answered for a while: nothing more can be
		// read, and the pod is let go at once.
		return reconcile.Result{}, c.letGo(ctx, ul, plan, pod, pl)
	}
	started := c.nowFor()
	readErr := c.read(ctx, plan.Name, pod, pl)
	if err := c.save(ctx, ul, plan.Name, pod, pl); err != nil {
		if deleting && c.nowFor().Sub(pod.DeletionTimestamp.Time) > c.opts.HoldBound {
			// The log cannot be kept: never hold a deleted pod for ever.
			logger(ctx).Error(err, "letting a deleted pod go without its log saved")
			c.forget(req.NamespacedName)
			return reconcile.Result{}, c.release(ctx, pod)
		}
		return reconcile.Result{}, err
	}
	if readErr != nil {
		logger(ctx).V(1).Info("reading the pod's log", "error", readErr.Error())
		if !deleting {
			return reconcile.Result{RequeueAfter: c.opts.Interval}, nil
		}
		if pl.unreadSince.IsZero() {
			pl.unreadSince = started
		}
		if c.nowFor().Sub(pl.unreadSince) >= c.opts.HoldBound {
			return reconcile.Result{}, c.letGo(ctx, ul, plan, pod, pl)
		}
		return reconcile.Result{RequeueAfter: deletingRetry}, nil
	}
	pl.unreadSince = time.Time{}
	if c.done(pod, pl) {
		return reconcile.Result{}, c.finish(ctx, pod, pl)
	}
	next := c.opts.Interval
	if deleting {
		// Its containers end by the end of its grace period at the latest:
		// be back then, for the last bytes.
		next = min(next, max(pod.DeletionTimestamp.Sub(c.nowFor()), 0)+conflictRetry)
	}
	return reconcile.Result{RequeueAfter: next}, nil
}

// containers are the pod's containers, init containers first, each with
// its status (nil before it started).
func containers(pod *corev1.Pod) []struct {
	name   string
	status *corev1.ContainerStatus
} {
	var out []struct {
		name   string
		status *corev1.ContainerStatus
	}
	add := func(specs []corev1.Container, statuses []corev1.ContainerStatus) {
		for _, s := range specs {
			var st *corev1.ContainerStatus
			for i := range statuses {
				if statuses[i].Name == s.Name {
					st = &statuses[i]
				}
			}
			out = append(out, struct {
				name   string
				status *corev1.ContainerStatus
			}{s.Name, st})
		}
	}
	add(pod.Spec.InitContainers, pod.Status.InitContainerStatuses)
	add(pod.Spec.Containers, pod.Status.ContainerStatuses)
	return out
}

// started reports whether the container ran, so that it has a log.
func started(st *corev1.ContainerStatus) bool {
	return st != nil && (st.State.Running != nil || st.State.Terminated != nil || st.LastTerminationState.Terminated != nil)
}

// ended reports whether no container of the pod runs or will run.
func ended(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// final reports whether no more lines can come from any container of the
// pod: it ended, or its deletion's grace period is over.
func (c *capturer) final(pod *corev1.Pod) bool {
	return ended(pod) || (pod.DeletionTimestamp != nil && c.nowFor().After(pod.DeletionTimestamp.Time))
}

// done reports whether the pod's log was captured to its end: every
// container that ran was read after it ended, and none will run.
func (c *capturer) done(pod *corev1.Pod, pl *podLog) bool {
	if pl.finished {
		return true
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if !pl.saved || !c.final(pod) {
		return false
	}
	for _, ct := range containers(pod) {
		if l := pl.containers[ct.name]; started(ct.status) && (l == nil || !l.complete) {
			return false
		}
	}
	return true
}

// finish lets go of a pod whose log is kept (or given up), and of its text
// in memory.
func (c *capturer) finish(ctx context.Context, pod *corev1.Pod, pl *podLog) error {
	pl.stopFollows()
	c.mu.Lock()
	c.pods[client.ObjectKeyFromObject(pod)] = &podLog{uid: pod.UID, finished: true}
	c.mu.Unlock()
	return c.release(ctx, pod)
}

// read brings each started container's log up to date: a running one is
// followed (or read, when no more follows may open), one that ended is read
// from where the kept one ends, after its follow stopped, and marked
// complete.
func (c *capturer) read(ctx context.Context, plan string, pod *corev1.Pod, pl *podLog) error {
	final, deleting := c.final(pod), pod.DeletionTimestamp != nil
	var errs []error
	for _, ct := range containers(pod) {
		if !started(ct.status) {
			continue
		}
		pl.mu.Lock()
		l := pl.containers[ct.name]
		if l == nil {
			l = &containerLog{}
			pl.containers[ct.name] = l
			pl.saved = false
		}
		complete, size := l.complete, l.size()
		pl.mu.Unlock()
		if complete {
			continue
		}
		limit, err := c.limit(ctx, plan, pod, size)
		if err != nil {
			return err
		}
		ends := final || ct.status.State.Terminated != nil
		switch {
		case !ends && !deleting:
			followed, err := c.follow(pod, pl, ct.name, l, limit)
			if err != nil {
				errs = append(errs, fmt.Errorf("container %s: %w", ct.name, err))
			}
			if followed || err != nil {
				continue
			}
		case ends && pl.followState(ct.name) == followedToEnd:
			// A follow ends cleanly only once the container exited:
			// nothing is left to read.
			pl.mu.Lock()
			l.complete, pl.saved = true, false
			pl.mu.Unlock()
			continue
		case ends && !deleting && pl.followState(ct.name) == following && !endedLongAgo(ct.status, c.nowFor()):
			// Its last bytes come with the follow, whose end brings the
			// pod back.
			continue
		}
		pl.stopFollow(ct.name)
		timeout := answerTimeout
		if deleting {
			timeout = c.opts.HoldBound
		}
		if err := c.readOnce(ctx, pod, pl, ct.name, l, limit, timeout); err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", ct.name, err))
			continue
		}
		if ends {
			pl.mu.Lock()
			l.complete, pl.saved = true, false
			pl.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// endedLongAgo reports whether the container ended more than
// answerTimeout ago (or its end time is unknown): its follow should have
// ended by now.
func endedLongAgo(st *corev1.ContainerStatus, now time.Time) bool {
	t := st.State.Terminated
	return t == nil || t.FinishedAt.IsZero() || now.Sub(t.FinishedAt.Time) > answerTimeout
}

// limit is how much the container's log may keep: the per-container limit,
// less what the plan's other logs already keep beyond the plan's limit.
func (c *capturer) limit(ctx context.Context, plan string, pod *corev1.Pod, size int64) (int, error) {
	kept, err := c.keptOf(ctx, plan)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	others := kept.total - kept.by[ConfigMap(plan, pod.Name)]
	c.mu.Unlock()
	return c.opts.Limits.forContainer(others, size), nil
}

// keptOf returns the tally of what the plan's log ConfigMaps keep, counted
// from the cache the first time.
func (c *capturer) keptOf(ctx context.Context, plan string) (*keptBytes, error) {
	c.mu.Lock()
	k := c.kept[plan]
	c.mu.Unlock()
	if k != nil {
		return k, nil
	}
	cms := &corev1.ConfigMapList{}
	// Read only: the cache's own objects, not copies.
	if err := c.c.List(ctx, cms, client.InNamespace(cluster.HarvesterNamespace), client.MatchingLabels{v1beta1.LabelUpgradeLog: plan}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	k = &keptBytes{by: map[string]int64{}}
	for i := range cms.Items {
		k.set(cms.Items[i].Name, keptIn(states(&cms.Items[i])))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kept[plan] == nil {
		c.kept[plan] = k
	}
	return c.kept[plan], nil
}

// keptIn is the text a log ConfigMap's containers keep.
func keptIn(st map[string]containerState) int64 {
	var n int64
	for _, s := range st {
		n += s.Bytes
	}
	return n
}

// load returns what is kept of the pod's log: in memory, else from its
// ConfigMap (after a manager restart), else nothing yet.
func (c *capturer) load(ctx context.Context, plan string, pod *corev1.Pod) (*podLog, error) {
	key := client.ObjectKeyFromObject(pod)
	c.mu.Lock()
	pl := c.pods[key]
	c.mu.Unlock()
	if pl != nil && pl.uid == pod.UID {
		return pl, nil
	}
	if pl != nil {
		pl.stopFollows()
	}
	pl = &podLog{uid: pod.UID, containers: map[string]*containerLog{}, follows: map[string]*follow{}}
	cm := &corev1.ConfigMap{}
	err := c.api.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: ConfigMap(plan, pod.Name)}, cm)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, err
	case cm.Annotations[annotationPodUID] != string(pod.UID):
		// A pod of the same name before this one (a Job's retry has another
		// name; this is a leftover): start again.
	default:
		for name, s := range states(cm) {
			text, err := Gunzip(cm.BinaryData[Key(name)])
			if err != nil {
				return nil, fmt.Errorf("reading the kept log of %s/%s %s: %w", pod.Namespace, pod.Name, name, err)
			}
			if pl.containers[name], err = restore(text, s); err != nil {
				return nil, err
			}
		}
		pl.saved = true
	}
	c.mu.Lock()
	c.pods[key] = pl
	c.mu.Unlock()
	return pl, nil
}

// forget drops what is kept in memory of a pod, and stops its follows.
func (c *capturer) forget(key types.NamespacedName) {
	c.mu.Lock()
	pl := c.pods[key]
	delete(c.pods, key)
	c.mu.Unlock()
	if pl != nil && !pl.finished {
		pl.stopFollows()
	}
}

// Annotations on a log ConfigMap: where the log comes from.
const (
	annotationPodUID    = v1beta1.Prefix + "upgrade-log-pod-uid"
	annotationNamespace = v1beta1.Prefix + "upgrade-log-namespace"
	annotationPod       = v1beta1.Prefix + "upgrade-log-pod"
	annotationJob       = v1beta1.Prefix + "upgrade-log-job"
	annotationNode      = v1beta1.Prefix + "upgrade-log-node"
)

// states reads the containers' states of a log ConfigMap.
func states(cm *corev1.ConfigMap) map[string]containerState {
	s := map[string]containerState{}
	_ = json.Unmarshal([]byte(cm.Annotations[v1beta1.AnnotationLogState]), &s)
	return s
}

// save writes the pod's log ConfigMap when it changed.
func (c *capturer) save(ctx context.Context, ul *v1beta1.UpgradeLog, plan string, pod *corev1.Pod, pl *podLog) error {
	pl.mu.Lock()
	if len(pl.containers) == 0 {
		// No container ran: nothing to keep (a pod deleted before it
		// started must not wait for one).
		pl.saved = true
	}
	if pl.saved {
		pl.mu.Unlock()
		return nil
	}
	st := map[string]containerState{}
	texts := map[string][]byte{}
	for name, l := range pl.containers {
		st[name] = l.state()
		texts[name] = l.text()
	}
	// Lines a follow adds from here on make the pod unsaved again.
	pl.saved = true
	pl.mu.Unlock()
	data := map[string][]byte{}
	for name, text := range texts {
		data[Key(name)] = Gzip(text)
	}
	stateJSON, err := json.Marshal(st)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: ConfigMap(plan, pod.Name)}}
	_, err = controllerutil.CreateOrUpdate(ctx, c.c, cm, func() error {
		cm.Labels = map[string]string{
			v1beta1.LabelUpgradeLog:       plan,
			v1beta1.LabelUpgradeComponent: pod.Labels[v1beta1.LabelUpgradeComponent],
		}
		if jt := pod.Labels[v1beta1.LabelJobType]; jt != "" {
			cm.Labels[v1beta1.LabelJobType] = jt
		}
		cm.Annotations = map[string]string{
			annotationPodUID: string(pod.UID), annotationNamespace: pod.Namespace, annotationPod: pod.Name,
			annotationJob: pod.Labels[batchv1.JobNameLabel], annotationNode: pod.Spec.NodeName,
			v1beta1.AnnotationLogState: string(stateJSON),
		}
		cm.BinaryData = data
		return controllerutil.SetOwnerReference(ul, cm, c.c.Scheme())
	})
	if err != nil {
		pl.mu.Lock()
		pl.saved = false
		pl.mu.Unlock()
		return fmt.Errorf("saving the log of %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.mu.Lock()
	if k := c.kept[plan]; k != nil {
		k.set(cm.Name, keptIn(st))
	}
	c.mu.Unlock()
	return nil
}

// hold puts the capture's finalizer on a pod.
func (c *capturer) hold(ctx context.Context, pod *corev1.Pod) error {
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(pod, v1beta1.FinalizerLogCapture)
	return client.IgnoreNotFound(c.c.Patch(ctx, pod, patch))
}

// release removes the capture's finalizer from a pod.
func (c *capturer) release(ctx context.Context, pod *corev1.Pod) error {
	return Release(ctx, c.c, pod)
}

// Release lets a pod go that the capture holds: it removes the finalizer
// and marks the pod done (v1beta1.LabelLogCaptureDone), which takes it out
// of the manager's cache. It changes pod: pass a copy, never the cache's.
func Release(ctx context.Context, c client.Client, pod *corev1.Pod) error {
	if !controllerutil.ContainsFinalizer(pod, v1beta1.FinalizerLogCapture) {
		return nil
	}
	patch := client.MergeFromWithOptions(pod.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(pod, v1beta1.FinalizerLogCapture)
	metav1.SetMetaDataLabel(&pod.ObjectMeta, v1beta1.LabelLogCaptureDone, "true")
	return client.IgnoreNotFound(c.Patch(ctx, pod, patch))
}

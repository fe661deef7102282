package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/nodestate"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/sim"
)

// The world's floor: what a phase cannot take less than in the world it
// runs in. A phase's critical path is its Jobs, from their creation to
// their end (the real Job controller, scheduler and kwok, and the
// simulated work), and, in NodeUpgrade, the nodes' reboots and Rancher's
// turns in the rollout of each machine (its drain, with the evictions and
// migrations it waits for, the new plan applied, the uncordon: from the
// toolkit's answer to a drain hook to Rancher's next request or the end of
// the machine's drain, read from the machine-plan Secret's annotations);
// system-upgrade-controller's turns in ImagePreload and ImageCleanup (from
// the toolkit's write of a Plan, or the end of one of its Jobs, to the
// next Job the controller makes for it: a turn the Job's creation closes,
// so that a turn left open by a Plan with nothing more to run counts
// nothing); the floor of a phase is the time within it during which one
// of them was under way, as a watch of the world sees them. What a phase takes beyond
// its floor is the toolkit's own time (and the latency of the watches).
// The image cleanup that runs during NodeUpgrade is not on its path: it
// counts for ImageCleanup only, within that phase, with the removal of the
// plan's Jobs and pods that the plan's end waits for (the garbage
// collector's deletion of a deleted Job's pods, and a pod's termination
// once the log capture let it go; the capture's hold is the toolkit's).

// span is an interval of the world's work; end is zero while it lasts.
type span struct{ start, end time.Time }

// The kinds of the world's work on a critical path.
const (
	workJob     = "Jobs"
	workReboot  = "reboots"
	workRancher = "Rancher's turns"
	workRemoval = "removals"
	workSUC     = "system-upgrade-controller's turns"
)

// timeline records the world's work by the step whose critical path it is
// on, and when the plan entered each step, as the watches see them.
type timeline struct {
	mu      sync.Mutex
	jobs    map[string]*stepSpan // by namespace/name
	reboots map[string]*span     // the reboot under way, by node
	rancher map[string]*span     // Rancher's turn under way, by machine-plan Secret
	done    []stepSpan           // reboots, the controllers' turns and removals that ended
	// sucWork is, by system-upgrade-controller Plan (namespace/name), when
	// the controller was last given work: the Plan written by the toolkit
	// (created, or its spec changed), or one of its Jobs ended.
	sucWork map[string]time.Time
	// deletedJobs are when the plan's Jobs were seen deleted, by UID;
	// removing are the plan's pods being deleted, by namespace/name, with
	// when nothing held them any more (zero while the capture holds one).
	deletedJobs map[types.UID]time.Time
	removing    map[string]time.Time
	entered     map[string]time.Time // by step
	// lastUpgraded and succeeded: when the plan's last node was recorded
	// upgraded, and when the plan reached Succeeded.
	lastUpgraded, succeeded time.Time
	// says is what the plan said it was doing (its phase and Progressing
	// message), each time that changed.
	says []saying
}

// saying is what the plan said from a moment on.
type saying struct {
	at   time.Time
	text string
}

type stepSpan struct {
	step string
	kind string
	span
}

// jobSteps names the step whose critical path a Job of a component is on.
var jobSteps = map[string]string{
	v1beta1.ComponentImagePreload:   v1beta1.StepImagePreload,
	v1beta1.ComponentClusterUpgrade: v1beta1.StepClusterUpgrade,
	v1beta1.ComponentNodeUpgrade:    v1beta1.StepNodeUpgrade,
	v1beta1.ComponentImageCleanup:   v1beta1.StepImageCleanup,
}

func newTimeline() *timeline {
	return &timeline{jobs: map[string]*stepSpan{}, reboots: map[string]*span{}, rancher: map[string]*span{}, entered: map[string]time.Time{},
		deletedJobs: map[types.UID]time.Time{}, removing: map[string]time.Time{}, sucWork: map[string]time.Time{}}
}

// watchWorld starts the watches of the plan's Jobs and pods, of the
// nodes' reboots and of the machine-plan Secrets; the plan's states come
// through see.
func watchWorld(ctx context.Context, cfg *rest.Config) (*timeline, error) {
	t := newTimeline()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	jobs := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = v1beta1.LabelUpgradePlan
	})).Batch().V1().Jobs().Informer()
	onJob := func(o any) {
		if j, ok := o.(*batchv1.Job); ok {
			t.job(j)
		}
	}
	onJobGone := func(o any) {
		if j, ok := deleted(o).(*batchv1.Job); ok {
			t.jobGone(j.UID)
		}
	}
	if _, err := jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onJob, UpdateFunc: func(_, o any) { onJob(o) }, DeleteFunc: onJobGone}); err != nil {
		return nil, err
	}
	pods := metadatainformer.NewFilteredMetadataInformer(meta,
		schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "", 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = v1beta1.LabelUpgradePlan }).Informer()
	onPod := func(o any) {
		if p, ok := o.(*metav1.PartialObjectMetadata); ok {
			t.pod(p)
		}
	}
	onPodGone := func(o any) {
		if p, ok := deleted(o).(*metav1.PartialObjectMetadata); ok {
			t.podGone(p.Namespace + "/" + p.Name)
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, o any) { onPod(o) }, DeleteFunc: onPodGone}); err != nil {
		return nil, err
	}
	nodes := metadatainformer.NewFilteredMetadataInformer(meta,
		schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", 0, cache.Indexers{}, nil).Informer()
	onNode := func(o any) {
		if n, ok := o.(*metav1.PartialObjectMetadata); ok {
			t.node(n.Name, n.Annotations[sim.AnnotationReboot] != "")
		}
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onNode, UpdateFunc: func(_, o any) { onNode(o) }}); err != nil {
		return nil, err
	}
	secrets := metadatainformer.NewFilteredMetadataInformer(meta,
		schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, cluster.FleetLocalNamespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = cluster.LabelMachineName }).Informer()
	onSecret := func(o any) {
		if s, ok := o.(*metav1.PartialObjectMetadata); ok {
			t.machine(s.Name, rancherTurn(s.Annotations))
		}
	}
	if _, err := secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onSecret, UpdateFunc: func(_, o any) { onSecret(o) }}); err != nil {
		return nil, err
	}
	plans := metadatainformer.NewFilteredMetadataInformer(meta,
		upgradev1.GroupVersion.WithResource("plans"), cluster.CattleNamespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = v1beta1.LabelUpgradePlan }).Informer()
	// A Plan created, or its spec changed (a new generation), is work given
	// to the controller; its status writes are the controller's own.
	onPlan := func(o any) {
		if p, ok := o.(*metav1.PartialObjectMetadata); ok {
			t.sucGiven(p.Namespace + "/" + p.Name)
		}
	}
	onPlanUpdate := func(old, o any) {
		was, ok1 := old.(*metav1.PartialObjectMetadata)
		is, ok2 := o.(*metav1.PartialObjectMetadata)
		if ok1 && ok2 && was.Generation != is.Generation {
			onPlan(o)
		}
	}
	if _, err := plans.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPlan, UpdateFunc: onPlanUpdate}); err != nil {
		return nil, err
	}
	informers := []cache.SharedIndexInformer{jobs, nodes, secrets, pods, plans}
	synced := make([]cache.InformerSynced, 0, len(informers))
	for _, i := range informers {
		go i.RunWithContext(ctx)
		synced = append(synced, i.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, fmt.Errorf("listing Jobs, Nodes, pods, Plans and machine-plan Secrets to time the world: %w", ctx.Err())
	}
	return t, nil
}

func (t *timeline) job(j *batchv1.Job) {
	step := jobSteps[j.Labels[v1beta1.LabelUpgradeComponent]]
	if step == "" {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	key := j.Namespace + "/" + j.Name + "/" + string(j.UID)
	sucPlan := ""
	if name := j.Labels[cluster.LabelSUCPlan]; name != "" {
		sucPlan = j.Namespace + "/" + name
	}
	s := t.jobs[key]
	if s == nil {
		s = &stepSpan{step: step, kind: workJob, span: span{start: now}}
		t.jobs[key] = s
		if given, ok := t.sucWork[sucPlan]; ok {
			t.done = append(t.done, stepSpan{step: step, kind: workSUC, span: span{given, now}})
			delete(t.sucWork, sucPlan)
		}
	}
	if s.end.IsZero() && slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
		return (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue
	}) {
		s.end = now
		if sucPlan != "" {
			t.sucWork[sucPlan] = now
		}
	}
}

// sucGiven records that the toolkit wrote a system-upgrade-controller Plan.
func (t *timeline) sucGiven(plan string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sucWork[plan] = now
}

func (t *timeline) node(name string, rebooting bool) {
	t.track(t.reboots, name, workReboot, rebooting)
}

func (t *timeline) machine(secret string, rancherBusy bool) {
	t.track(t.rancher, secret, workRancher, rancherBusy)
}

// track opens the NodeUpgrade work of a kind under way on key, or ends it.
func (t *timeline) track(open map[string]*span, key, kind string, busy bool) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	s := open[key]
	switch {
	case busy && s == nil:
		open[key] = &span{start: now}
	case !busy && s != nil:
		s.end = now
		t.done = append(t.done, stepSpan{step: v1beta1.StepNodeUpgrade, kind: kind, span: *s})
		delete(open, key)
	}
}

// deleted unwraps a deletion the informer missed the last state of.
func deleted(o any) any {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return o
}

func (t *timeline) jobGone(uid types.UID) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deletedJobs[uid] = now
}

// pod records the world's part of a pod's removal: from its Job's deletion
// to the garbage collector's deletion of the pod, and from when the log
// capture let it go to its end (podGone).
func (t *timeline) pod(p *metav1.PartialObjectMetadata) {
	if p.DeletionTimestamp == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	free, seen := t.removing[key]
	if !seen {
		if owner := metav1.GetControllerOfNoCopy(p); owner != nil {
			if at, ok := t.deletedJobs[owner.UID]; ok {
				t.done = append(t.done, stepSpan{step: v1beta1.StepImageCleanup, kind: workRemoval, span: span{at, now}})
			}
		}
	}
	if free.IsZero() && !slices.Contains(p.Finalizers, v1beta1.FinalizerLogCapture) {
		free = now
	}
	t.removing[key] = free
}

func (t *timeline) podGone(key string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if free := t.removing[key]; !free.IsZero() {
		t.done = append(t.done, stepSpan{step: v1beta1.StepImageCleanup, kind: workRemoval, span: span{free, now}})
	}
	delete(t.removing, key)
}

// rancherTurn: the machine whose plan Secret has these annotations is in
// Rancher's hands: its rollout began (drain options written) and no drain
// hook of the toolkit's awaits its answer.
func rancherTurn(ann map[string]string) bool {
	awaits := func(request, answer string) bool {
		return ann[request] != "" && ann[answer] != ann[request]
	}
	return ann[cluster.AnnotationRancherDrainOptions] != "" &&
		!awaits(cluster.AnnotationRancherPreDrain, v1beta1.AnnotationPreHook) &&
		!awaits(cluster.AnnotationRancherPostDrain, v1beta1.AnnotationPostHook)
}

// see records one state of the plan: the step it is in, and whether its
// last node is upgraded.
func (t *timeline) see(p *v1beta1.UpgradePlan, nodes int) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if p.Status.CurrentPhase == v1beta1.PhaseSucceeded && t.succeeded.IsZero() {
		t.succeeded = now
	}
	if st, ok := pipeline.StepOf(p.Status.CurrentPhase); ok {
		if _, seen := t.entered[st.Name]; !seen {
			t.entered[st.Name] = now
		}
	}
	text := string(p.Status.CurrentPhase)
	if c := p.Condition(v1beta1.ConditionProgressing); c != nil {
		text += ": " + c.Message
	}
	if n := len(t.says); n == 0 || t.says[n-1].text != text {
		t.says = append(t.says, saying{now, text})
	}
	if !t.lastUpgraded.IsZero() || len(p.Status.NodeUpgradeStatuses) < nodes {
		return
	}
	for _, st := range p.Status.NodeUpgradeStatuses {
		if !nodestate.Finished(st.State) {
			return
		}
	}
	t.lastUpgraded = now
}

// tail is the time from the last node recorded upgraded to Succeeded.
func (t *timeline) tail() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.succeeded.Sub(t.lastUpgraded)
}

// steps returns, for each step the plan went through, when the watch saw
// it enter the step and leave it (for the next step, or Succeeded): the
// step's time at the precision of the watch, where the status's
// timestamps have whole seconds.
func (t *timeline) steps() map[string]span {
	out := map[string]span{}
	for i, st := range pipeline.Steps {
		in, ok := t.entered[st.Name]
		if !ok {
			continue
		}
		left := t.succeeded
		for _, next := range pipeline.Steps[i+1:] {
			if at, ok := t.entered[next.Name]; ok {
				left = at
				break
			}
		}
		out[st.Name] = span{in, left}
	}
	return out
}

// phases returns each step's time, as the watch saw it (steps).
func (t *timeline) phases() map[string]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]time.Duration{}
	for name, s := range t.steps() {
		out[name] = s.end.Sub(s.start)
	}
	return out
}

// work is every span of the world's work, ended or not.
func (t *timeline) work() []stepSpan {
	work := slices.Clone(t.done)
	for _, s := range t.jobs {
		work = append(work, *s)
	}
	for kind, open := range map[string]map[string]*span{workReboot: t.reboots, workRancher: t.rancher} {
		for _, s := range open {
			work = append(work, stepSpan{step: v1beta1.StepNodeUpgrade, kind: kind, span: *s})
		}
	}
	return work
}

// floors returns each step's floor: the time, within the step, during
// which work on its critical path was under way; of the kinds given, or of
// every kind without one.
func (t *timeline) floors(kinds ...string) map[string]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	work := t.work()
	out := map[string]time.Duration{}
	for name, in := range t.steps() {
		var spans []span
		for _, w := range work {
			if w.step == name && (len(kinds) == 0 || slices.Contains(kinds, w.kind)) {
				spans = append(spans, w.span)
			}
		}
		out[name] = covered(spans, in.start, in.end)
	}
	return out
}

// covered is the time within [from, to] that the spans cover (an open
// span lasts to to).
func covered(spans []span, from, to time.Time) time.Duration {
	if !to.After(from) {
		return 0
	}
	total := to.Sub(from)
	for _, g := range uncovered(spans, from, to) {
		total -= g.end.Sub(g.start)
	}
	return total
}

// toolkitTime lists, for a step, the longest stretches in which no work
// of the world on its path was under way (the toolkit's own time), the
// longest first, each with what the plan said during it.
func (t *timeline) toolkitTime(step string, longest int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	in, ok := t.steps()[step]
	if !ok {
		return ""
	}
	var spans []span
	for _, w := range t.work() {
		if w.step == step {
			spans = append(spans, w.span)
		}
	}
	idle := uncovered(spans, in.start, in.end)
	slices.SortFunc(idle, func(a, b span) int { return cmp.Compare(b.end.Sub(b.start), a.end.Sub(a.start)) })
	var b strings.Builder
	for _, g := range idle[:min(longest, len(idle))] {
		fmt.Fprintf(&b, "  toolkit    %-20s +%.3fs for %s:", step, g.start.Sub(in.start).Seconds(), g.end.Sub(g.start).Round(time.Millisecond))
		for i, s := range t.says {
			next := in.end
			if i+1 < len(t.says) {
				next = t.says[i+1].at
			}
			if next.After(g.start) && s.at.Before(g.end) {
				fmt.Fprintf(&b, " [+%.3fs %.120s]", s.at.Sub(in.start).Seconds(), s.text)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// uncovered is the parts of [from, to] that no span covers (an open span
// lasts to to).
func uncovered(spans []span, from, to time.Time) []span {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	var out []span
	at := from
	for _, s := range spans {
		start, end := s.start, s.end
		if end.IsZero() || end.After(to) {
			end = to
		}
		if start.Before(from) {
			start = from
		}
		if !end.After(start) {
			continue
		}
		if start.After(at) {
			out = append(out, span{at, start})
		}
		if end.After(at) {
			at = end
		}
	}
	if to.After(at) {
		out = append(out, span{at, to})
	}
	return out
}

// floorTimes lists each phase's time beside its floor, in pipeline order,
// and, where they differ, beside the floor of its Jobs and reboots alone.
func floorTimes(phases, floors, jobsAndReboots map[string]time.Duration) string {
	var b strings.Builder
	for _, st := range pipeline.Steps {
		d, ok := phases[st.Name]
		f := floors[st.Name]
		if !ok || f <= 0 {
			continue
		}
		fmt.Fprintf(&b, "  floor      %-20s %s of %s: %.2fx", st.Name, f.Round(time.Millisecond), d.Round(time.Millisecond), d.Seconds()/f.Seconds())
		if j := jobsAndReboots[st.Name]; j > 0 && j != f {
			fmt.Fprintf(&b, " (%s of %s alone: %.2fx)", workJob+" and "+workReboot, j.Round(time.Millisecond), d.Seconds()/j.Seconds())
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestCovered(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name     string
		spans    []span
		from, to float64
		want     time.Duration
	}{
		{"none", nil, 0, 10, 0},
		{"apart", []span{{at(1), at(2)}, {at(4), at(7)}}, 0, 10, 4 * time.Second},
		{"overlapping, out of order", []span{{at(4), at(7)}, {at(1), at(5)}, {at(6), at(6.5)}}, 0, 10, 6 * time.Second},
		{"clipped to the window", []span{{at(-3), at(2)}, {at(8), at(15)}}, 0, 10, 4 * time.Second},
		{"open, to the window's end", []span{{at(7), time.Time{}}}, 0, 10, 3 * time.Second},
		{"outside", []span{{at(11), at(12)}}, 0, 10, 0},
	} {
		if got := covered(tc.spans, at(tc.from), at(tc.to)); got != tc.want {
			t.Errorf("%s: covered %s, want %s", tc.name, got, tc.want)
		}
		var idle time.Duration
		for _, g := range uncovered(tc.spans, at(tc.from), at(tc.to)) {
			if !g.end.After(g.start) || g.start.Before(at(tc.from)) || g.end.After(at(tc.to)) || covered(tc.spans, g.start, g.end) != 0 {
				t.Errorf("%s: uncovered [%s, %s] is empty, outside the window or covered", tc.name, g.start, g.end)
			}
			idle += g.end.Sub(g.start)
		}
		if want := at(tc.to).Sub(at(tc.from)) - tc.want; idle != want {
			t.Errorf("%s: %s uncovered, want %s", tc.name, idle, want)
		}
	}
}

// Rancher's turn in a machine's rollout, as the machine-plan Secret's
// annotations say it, step by step of the handshake.
func TestRancherTurn(t *testing.T) {
	const opts = `{"enabled":true}`
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{"not rolling", nil, false},
		{"drain options written: cordon, ask the pre-drain hook", map[string]string{cluster.AnnotationRancherDrainOptions: opts}, true},
		{"pre-drain hook asked", map[string]string{cluster.AnnotationRancherDrainOptions: opts, cluster.AnnotationRancherPreDrain: opts}, false},
		{"pre-drain hook answered: drain, apply, ask the post-drain hook", map[string]string{
			cluster.AnnotationRancherDrainOptions: opts, cluster.AnnotationRancherPreDrain: opts, v1beta1.AnnotationPreHook: opts,
		}, true},
		{"post-drain hook asked", map[string]string{
			cluster.AnnotationRancherDrainOptions: opts, cluster.AnnotationRancherPreDrain: opts, v1beta1.AnnotationPreHook: opts,
			cluster.AnnotationRancherUncordon: opts, cluster.AnnotationRancherPostDrain: opts,
		}, false},
		{"post-drain hook answered: uncordon, clear", map[string]string{
			cluster.AnnotationRancherDrainOptions: opts, cluster.AnnotationRancherPreDrain: opts, v1beta1.AnnotationPreHook: opts,
			cluster.AnnotationRancherUncordon: opts, cluster.AnnotationRancherPostDrain: opts, v1beta1.AnnotationPostHook: opts,
		}, true},
		{"a stale answer to another rollout", map[string]string{
			cluster.AnnotationRancherDrainOptions: opts, cluster.AnnotationRancherPreDrain: opts, v1beta1.AnnotationPreHook: `{}`,
		}, false},
	} {
		if got := rancherTurn(tc.ann); got != tc.want {
			t.Errorf("%s: Rancher's turn %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A pod's removal counts from its Job's deletion to the garbage
// collector's deletion of the pod, and from the log capture's release to
// its end; the capture's hold does not count.
func TestRemovalLeavesOutTheCapturesHold(t *testing.T) {
	tl := newTimeline()
	tl.entered[v1beta1.StepImageCleanup] = time.Now()
	pod := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p",
		OwnerReferences: []metav1.OwnerReference{{Kind: "Job", Name: "j", UID: "job-uid", Controller: ptr.To(true)}},
		Finalizers:      []string{v1beta1.FinalizerLogCapture}}}
	tl.pod(pod) // not being deleted: nothing
	tl.jobGone("job-uid")
	time.Sleep(20 * time.Millisecond) // the garbage collector
	pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	tl.pod(pod)
	time.Sleep(100 * time.Millisecond) // held by the capture
	pod.Finalizers = nil
	tl.pod(pod)
	time.Sleep(20 * time.Millisecond) // terminating
	tl.podGone("ns/p")
	tl.succeeded = time.Now()
	got := tl.floors(workRemoval)[v1beta1.StepImageCleanup]
	if got < 40*time.Millisecond || got >= 100*time.Millisecond {
		t.Errorf("removal floor %s, want the 40 ms or so of the collector and the termination, without the capture's 100 ms hold", got)
	}
}

// Work still under way when the floor is read counts for its kind: a
// reboot not yet ended is in the Jobs-and-reboots floor, an open turn of
// Rancher's only in the whole one.
func TestOpenWorkKeepsItsKind(t *testing.T) {
	tl := newTimeline()
	tl.entered[v1beta1.StepNodeUpgrade] = time.Now()
	tl.node("n1", true)
	time.Sleep(50 * time.Millisecond)
	tl.machine("m2", true)
	time.Sleep(50 * time.Millisecond)
	tl.succeeded = time.Now()
	if got := tl.floors(workJob, workReboot)[v1beta1.StepNodeUpgrade]; got < 90*time.Millisecond {
		t.Errorf("Jobs-and-reboots floor %s, want the open reboot's 100 ms", got)
	}
	if got := tl.floors(workRancher)[v1beta1.StepNodeUpgrade]; got < 40*time.Millisecond || got >= 90*time.Millisecond {
		t.Errorf("Rancher's floor %s, want the open turn's 50 ms", got)
	}
}

// A turn of system-upgrade-controller's runs from the toolkit's write of a
// Plan, or the end of one of its Jobs, to the next Job made for it; work
// given that makes no Job counts nothing.
func TestSUCTurn(t *testing.T) {
	tl := newTimeline()
	tl.entered[v1beta1.StepImagePreload] = time.Now()
	job := func(name string, ended bool) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "cattle-system", Name: name, UID: types.UID(name),
			Labels: map[string]string{v1beta1.LabelUpgradeComponent: v1beta1.ComponentImagePreload, cluster.LabelSUCPlan: "preload"}}}
		if ended {
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
		}
		return j
	}
	tl.sucGiven("cattle-system/preload")
	time.Sleep(30 * time.Millisecond) // the controller's turn
	tl.job(job("a", false))
	time.Sleep(50 * time.Millisecond) // the Job
	tl.job(job("a", true))
	time.Sleep(30 * time.Millisecond) // the controller's turn
	tl.job(job("b", false))
	tl.job(job("b", true))
	time.Sleep(100 * time.Millisecond) // nothing more to run
	tl.succeeded = time.Now()
	if got := tl.floors(workSUC)[v1beta1.StepImagePreload]; got < 60*time.Millisecond || got >= 100*time.Millisecond {
		t.Errorf("system-upgrade-controller's floor %s, want its two turns of 30 ms, without the 100 ms after its last Job", got)
	}
	if got := tl.floors()[v1beta1.StepImagePreload]; got < 110*time.Millisecond || got >= 200*time.Millisecond {
		t.Errorf("whole floor %s, want the 110 ms or so of the turns and the Job", got)
	}
}

// Package planstatus writes an UpgradePlan's status and feeds the manager's
// cache of plans, so that a node step costs the same on a cluster of 500
// nodes as on one of 5.
//
// A plan's status holds an entry per node, and the API server answers a write
// with the whole object and sends the whole object to every watcher: on a
// large cluster, each of the many small writes of an upgrade would bring the
// whole plan back twice. Here a status write sends only what changed and asks
// for the metadata in return; the manager watches plans as metadata and reads
// a plan whole only when someone else changed it. The plan this process wrote
// last is known: the watch reports it for the write's resourceVersion without
// reading it back. Everything that reads plans from the cache still sees
// whole plans, as the API server holds them.
package planstatus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// writeWait bounds how long a watch event waits for the answer of a write
// under way before it reads the plan whole.
const writeWait = 10 * time.Second

// Resource is the plans' API resource.
var Resource = v1beta1.GroupVersion.WithResource("upgradeplans")

// Store writes plans' statuses and keeps, for each plan, the whole plan at
// the last resourceVersion this process wrote or read.
type Store struct {
	meta  metadata.ResourceInterface
	mu    sync.Mutex
	known map[string]*v1beta1.UpgradePlan
	// writing holds, for a plan whose status is being written, a channel
	// closed once the write is over: its watch event often arrives before
	// its answer, and waits for it rather than reading the plan.
	writing map[string]chan struct{}
}

// New builds a Store that talks to the API server of cfg.
func New(cfg *rest.Config) (*Store, error) {
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the metadata client: %w", err)
	}
	return &Store{meta: meta.Resource(Resource), known: map[string]*v1beta1.UpgradePlan{}, writing: map[string]chan struct{}{}}, nil
}

// WriteStatus writes working's status as a merge patch from stored, the
// plan as last read, with stored's resourceVersion (a conflict when the plan
// changed since). It reports whether it wrote: nothing is sent when the
// status did not change. After a write, working carries the new metadata
// (its resourceVersion).
func (s *Store) WriteStatus(ctx context.Context, stored, working *v1beta1.UpgradePlan) (bool, error) {
	patch, applied, err := statusPatch(stored, working)
	if err != nil {
		return false, fmt.Errorf("computing the status patch of plan %s: %w", working.Name, err)
	}
	if patch == nil {
		return false, nil
	}
	defer s.startWrite(working.Name)()
	got, err := s.meta.Patch(ctx, working.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return false, err
	}
	// The lock held: the server's plan is the stored one with this status.
	s.remember(&v1beta1.UpgradePlan{
		TypeMeta: stored.TypeMeta, ObjectMeta: *got.ObjectMeta.DeepCopy(),
		Spec: *stored.Spec.DeepCopy(), Status: applied,
	})
	working.ObjectMeta = got.ObjectMeta
	return true, nil
}

// Latest returns the plan to decide on, given cached, the cache's copy: the
// known plan when the cache does not show it yet, else cached. Between a
// write's answer and its watch event, a pass started by another change would
// decide on the plan as it was before the write and send the same patch
// again, which the API server refuses (a conflict) after reading the whole
// plan. The known plan is never behind the cache: every plan the cache gets
// (the list, the watch) is known first. It returns cached itself or a copy
// of its own.
func (s *Store) Latest(cached *v1beta1.UpgradePlan) *v1beta1.UpgradePlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if known := s.known[cached.Name]; known != nil && known.ResourceVersion != cached.ResourceVersion {
		return known.DeepCopy()
	}
	return cached
}

// startWrite marks a write of plan name under way, until the function it
// returns is called.
func (s *Store) startWrite(name string) (done func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writing[name] = ch
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.writing[name] == ch {
			delete(s.writing, name)
		}
		close(ch)
	}
}

// writeOf returns the channel of the write of plan name under way, if any.
func (s *Store) writeOf(name string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writing[name]
}

// remember keeps p as the plan at its resourceVersion. It is not changed
// afterwards: the cache and the watch share it.
func (s *Store) remember(p *v1beta1.UpgradePlan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.known[p.Name] = p
}

// at returns the plan name at resourceVersion rv, if known.
func (s *Store) at(name, rv string) *v1beta1.UpgradePlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.known[name]; p != nil && p.ResourceVersion == rv {
		return p
	}
	return nil
}

// forget drops the plan name, gone, and returns the last known copy.
func (s *Store) forget(name string) *v1beta1.UpgradePlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.known[name]
	delete(s.known, name)
	return p
}

// NewInformer is the cache's informer constructor (cache.Options): the
// informer of UpgradePlans lists them whole and watches them through the
// Store; every other informer is client-go's own.
func (s *Store) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	if _, ok := obj.(*v1beta1.UpgradePlan); ok {
		whole := toolscache.ToListerWatcherWithContext(lw)
		lw = &toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				list, err := whole.ListWithContext(ctx, opts)
				if plans, ok := list.(*v1beta1.UpgradePlanList); ok {
					for i := range plans.Items {
						s.remember(plans.Items[i].DeepCopy())
					}
				}
				return list, err
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return s.watch(ctx, whole, opts)
			},
		}
	}
	return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
}

// watch watches plans as metadata and reports each change as the whole
// plan: the known one when the change is this process's write, else the plan
// read whole (through whole, the informer's own list).
func (s *Store) watch(ctx context.Context, whole toolscache.ListerWatcherWithContext, opts metav1.ListOptions) (watch.Interface, error) {
	in, err := s.meta.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := make(chan watch.Event)
	w := watch.NewProxyWatcher(out)
	go func() {
		defer close(out)
		defer in.Stop()
		for {
			var ev watch.Event
			select {
			case <-w.StopChan():
				return
			case e, ok := <-in.ResultChan():
				if !ok {
					return
				}
				var err error
				if ev, err = s.whole(ctx, whole, e); err != nil {
					ev = watch.Event{Type: watch.Error, Object: statusOf(err)}
				}
			}
			if ev.Object == nil {
				continue
			}
			select {
			case <-w.StopChan():
				return
			case out <- ev:
			}
			if ev.Type == watch.Error {
				// The informer watches again from the last plan it got.
				return
			}
		}
	}()
	return w, nil
}

// whole turns a metadata watch event into the informer's: the whole plan
// (nil when it is gone by the time it is read: its deletion follows).
func (s *Store) whole(ctx context.Context, whole toolscache.ListerWatcherWithContext, e watch.Event) (watch.Event, error) {
	m, ok := e.Object.(*metav1.PartialObjectMetadata)
	if !ok {
		// An error (a Status): the informer handles it.
		return e, nil
	}
	switch e.Type {
	case watch.Bookmark:
		return watch.Event{Type: e.Type, Object: &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: m.ResourceVersion, Annotations: m.Annotations,
		}}}, nil
	case watch.Deleted:
		p := &v1beta1.UpgradePlan{}
		if last := s.forget(m.Name); last != nil {
			*p = *last
		}
		p.ObjectMeta = m.ObjectMeta
		return watch.Event{Type: e.Type, Object: p}, nil
	}
	p := s.at(m.Name, m.ResourceVersion)
	if write := s.writeOf(m.Name); p == nil && write != nil {
		// Bounded: a write whose answer never comes must not stall the
		// watch; the plan is then read whole.
		timer := time.NewTimer(writeWait)
		select {
		case <-write:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return watch.Event{}, ctx.Err()
		}
		timer.Stop()
		p = s.at(m.Name, m.ResourceVersion)
	}
	if p == nil {
		var err error
		if p, err = s.read(ctx, whole, m.Name); err != nil || p == nil {
			return watch.Event{}, err
		}
	}
	// The informer strips fields from the metadata it keeps: its own copy.
	cp := *p
	cp.ObjectMeta = *p.ObjectMeta.DeepCopy()
	return watch.Event{Type: e.Type, Object: &cp}, nil
}

// read reads the plan name whole, as it is now (it may be newer than the
// change that asked for it), and remembers it.
func (s *Store) read(ctx context.Context, whole toolscache.ListerWatcherWithContext, name string) (*v1beta1.UpgradePlan, error) {
	list, err := whole.ListWithContext(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		return nil, fmt.Errorf("reading plan %s: %w", name, err)
	}
	plans, ok := list.(*v1beta1.UpgradePlanList)
	if !ok {
		return nil, fmt.Errorf("reading plan %s: got a %T", name, list)
	}
	if len(plans.Items) == 0 {
		return nil, nil
	}
	p := &plans.Items[0]
	s.remember(p)
	return p, nil
}

// statusOf is the Status a watch error event carries for err.
func statusOf(err error) runtime.Object {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		st = apierrors.NewInternalError(err)
	}
	status := st.Status()
	return &status
}

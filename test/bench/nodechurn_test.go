package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// nodeChurn counts the updates of the world's Nodes by who made them (the
// field manager whose managedFields entry each update changed): every one
// reaches the manager's Node watch, so a run whose world updated its Nodes
// more than another's is not comparable with it. It watches metadata only,
// which carries the managedFields and costs the API server little.
type nodeChurn struct {
	mu      sync.Mutex
	updates map[string]int
	// last is each Node's managedFields as last seen.
	last map[string][]metav1.ManagedFieldsEntry
}

func watchNodeChurn(ctx context.Context, cfg *rest.Config) (*nodeChurn, error) {
	nodes := metadata.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"})
	c := &nodeChurn{updates: map[string]int{}, last: map[string][]metav1.ManagedFieldsEntry{}}
	w, err := c.relist(ctx, nodes)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c.follow(ctx, w)
			if ctx.Err() != nil {
				return
			}
			// The watch ended (its resource version too old, say): what
			// happened since its last event is not counted, and said so.
			c.mu.Lock()
			c.updates["(not counted: the watch was listed again)"]++
			c.mu.Unlock()
			for w = nil; w == nil && ctx.Err() == nil; {
				if w, err = c.relist(ctx, nodes); err != nil {
					time.Sleep(time.Second)
				}
			}
		}
	}()
	return c, nil
}

// relist reads every Node's managedFields and watches from there.
func (c *nodeChurn) relist(ctx context.Context, nodes metadata.ResourceInterface) (watch.Interface, error) {
	list, err := nodes.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	for _, n := range list.Items {
		c.last[n.Name] = n.ManagedFields
	}
	c.mu.Unlock()
	return watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return nodes.Watch(ctx, opts)
		},
	})
}

// follow counts the watch's updates until it or ctx ends.
func (c *nodeChurn) follow(ctx context.Context, w watch.Interface) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			if m, isMeta := ev.Object.(*metav1.PartialObjectMetadata); isMeta && ev.Type == watch.Modified {
				c.count(m)
			}
		}
	}
}

func (c *nodeChurn) count(m *metav1.PartialObjectMetadata) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := c.last[m.Name]
	c.last[m.Name] = m.ManagedFields
	// A writer's entry keeps its time to the second: its second update of
	// the same fields within a second leaves managedFields as they were.
	by := "(writer not known: a repeat within a second)"
	for _, e := range m.ManagedFields {
		if !slices.ContainsFunc(before, func(b metav1.ManagedFieldsEntry) bool { return sameEntry(b, e) }) {
			by = e.Manager + " " + string(e.Operation)
			if e.Subresource != "" {
				by += " " + e.Subresource
			}
			break
		}
	}
	c.updates[by]++
}

// sameEntry tells whether two managedFields entries are the same write.
func sameEntry(a, b metav1.ManagedFieldsEntry) bool {
	return a.Manager == b.Manager && a.Operation == b.Operation && a.Subresource == b.Subresource &&
		a.Time.Equal(b.Time) && (a.FieldsV1 == nil) == (b.FieldsV1 == nil) &&
		(a.FieldsV1 == nil || string(a.FieldsV1.Raw) == string(b.FieldsV1.Raw))
}

// total and String report the counts so far.
func (c *nodeChurn) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.updates {
		n += v
	}
	return n
}

func (c *nodeChurn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, by := range slices.Sorted(maps.Keys(c.updates)) {
		fmt.Fprintf(&b, "  node updates by %-44s %6d\n", by, c.updates[by])
	}
	return b.String()
}

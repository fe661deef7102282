package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// nodeChurn counts the updates of the world's Nodes by who made them (the
// field manager whose managedFields entry each update changed): every one
// reaches the manager's Node watch, so a run whose world updated its Nodes
// more than another's is not comparable with it. It watches metadata only,
// which carries the managedFields and costs the API server little.
type nodeChurn struct {
	mu      sync.Mutex
	updates map[string]int
}

// watchNodeChurn counts from when the Nodes are listed until ctx ends.
func watchNodeChurn(ctx context.Context, cfg *rest.Config) (*nodeChurn, error) {
	c := &nodeChurn{updates: map[string]int{}}
	nodes := metadatainformer.NewFilteredMetadataInformer(metadata.NewForConfigOrDie(cfg),
		schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", 0, cache.Indexers{}, nil).Informer()
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(o, n any) {
			was, is := o.(*metav1.PartialObjectMetadata), n.(*metav1.PartialObjectMetadata)
			if was.ResourceVersion != is.ResourceVersion { // not a relist's replay
				c.count(was, is)
			}
		},
	}); err != nil {
		return nil, err
	}
	go nodes.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		return nil, fmt.Errorf("listing the Nodes to count their updates: %w", ctx.Err())
	}
	return c, nil
}

func (c *nodeChurn) count(was, is *metav1.PartialObjectMetadata) {
	// A writer's entry keeps its time to the second: its second update of
	// the same fields within a second leaves managedFields as they were.
	by := "(writer not known: a repeat within a second)"
	for _, e := range is.ManagedFields {
		if !slices.ContainsFunc(was.ManagedFields, func(b metav1.ManagedFieldsEntry) bool { return sameEntry(b, e) }) {
			by = e.Manager + " " + string(e.Operation)
			if e.Subresource != "" {
				by += " " + e.Subresource
			}
			break
		}
	}
	c.mu.Lock()
	c.updates[by]++
	c.mu.Unlock()
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

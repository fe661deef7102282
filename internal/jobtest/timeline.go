package jobtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// Timeline is an ordered, concurrency-safe record of what a job did, so a
// test can assert that one step came before another.
type Timeline struct {
	mu     sync.Mutex
	events []string
}

// Add appends one event.
func (tl *Timeline) Add(e string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, e)
}

// Events returns a copy of the events so far.
func (tl *Timeline) Events() []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.events)
}

// Index returns the position of the first event containing s, or -1.
func (tl *Timeline) Index(s string) int {
	return slices.IndexFunc(tl.Events(), func(e string) bool { return strings.Contains(e, s) })
}

// Reset forgets every event.
func (tl *Timeline) Reset() {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = nil
}

func (tl *Timeline) String() string { return strings.Join(tl.Events(), "\n") }

// RecordingClient is a client of the test API server that adds each of its
// writes (but not Events, which only report) to tl as
// "api <verb> <type> <namespace/name>".
func RecordingClient(cfg *rest.Config, scheme *runtime.Scheme, tl *Timeline) client.Client {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	write := func(verb string, obj client.Object) {
		if _, ok := obj.(*corev1.Event); !ok {
			tl.Add(fmt.Sprintf("api %s %T %s", verb, obj, client.ObjectKeyFromObject(obj)))
		}
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			write("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			write("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			write("patch", obj)
			return c.Patch(ctx, obj, p, opts...)
		},
	})
}

package bench

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// TestNodeChurnNamesTheWriter: on a real API server, each update of a Node
// is counted once, under the field manager that made it, an update of a
// value its writer already owns included (a second later: managedFields
// keep their time to the second).
func TestNodeChurnNamesTheWriter(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"a": "1"}}}
	if err := c.Create(ctx, node, client.FieldOwner("creator")); err != nil {
		t.Fatal(err)
	}
	churn, err := watchNodeChurn(ctx, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	update := func(owner string, change func(*corev1.Node)) {
		t.Helper()
		before := node.DeepCopy()
		change(node)
		if err := c.Patch(ctx, node, client.MergeFrom(before), client.FieldOwner(owner)); err != nil {
			t.Fatal(err)
		}
	}
	update("labeller", func(n *corev1.Node) { n.Labels["b"] = "1" }) // a field of its own
	time.Sleep(1100 * time.Millisecond)
	update("labeller", func(n *corev1.Node) { n.Labels["b"] = "2" }) // the same field, a new value
	update("cordoner", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	want := map[string]int{"labeller Update": 2, "cordoner Update": 1}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return churn.total() == 3, nil
	})
	churn.mu.Lock()
	defer churn.mu.Unlock()
	if err != nil || len(churn.updates) != len(want) {
		t.Fatalf("counted %v, want %v", churn.updates, want)
	}
	for by, n := range want {
		if churn.updates[by] != n {
			t.Errorf("counted %v, want %v", churn.updates, want)
		}
	}
}

package planstatus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/planstatus"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, &env)) }

// nodes is the size of the test's plan: large enough that a whole plan is
// much bigger than a node's step.
const nodes = 100

// steps is how many node steps the test writes: the watch event of a write
// often arrives before the write's answer.
const steps = 20

// TestStoreWritesStepsAndWatchesMetadata: on a real API server, a status
// write sends and receives about a node's worth of bytes whatever the plan's
// size, the cache shows the write without reading the plan back and holds
// what the API server holds; a change by someone else is read whole; a stale
// write conflicts; a deleted plan leaves the cache.
func TestStoreWritesStepsAndWatchesMetadata(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	counter := apicount.New()
	cfg := counter.Wrap(env.Config)
	store, err := planstatus.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cfg, cache.Options{Scheme: env.Scheme, NewInformer: store.NewInformer, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()

	plan := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "store-test"}, Spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")}}
	must(t, env.Client.Create(ctx, plan))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), plan) })
	at := metav1.NewTime(time.Now().Truncate(time.Second))
	plan.Status.CurrentPhase = v1beta1.PhaseNodeUpgrading
	plan.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for i := range nodes {
		plan.Status.NodeUpgradeStatuses[fmt.Sprintf("node-%03d", i)] = v1beta1.NodeUpgradeStatus{
			State: v1beta1.NodeStateImagePreloaded, Message: "waiting for its turn", LastTransitionTime: &at,
		}
	}
	must(t, env.Client.Status().Update(ctx, plan))
	cached := waitFor(ctx, t, c, "the cache shows the plan's nodes", func(p *v1beta1.UpgradePlan) bool {
		return len(p.Status.NodeUpgradeStatuses) == nodes
	})

	// Node steps, at times finer than the API's second; the last one
	// is node-007's.
	counter.Reset()
	shown := cached
	for i := range steps {
		working := shown.DeepCopy()
		later := metav1.NewTime(time.Now())
		working.Status.NodeUpgradeStatuses[fmt.Sprintf("node-%03d", 7+steps-1-i)] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeStatePreDraining, LastTransitionTime: &later}
		wrote, err := store.WriteStatus(ctx, shown, working)
		if err != nil || !wrote {
			t.Fatalf("WriteStatus: %v, %v; want a write", wrote, err)
		}
		if working.ResourceVersion == shown.ResourceVersion {
			t.Errorf("the working copy kept resourceVersion %s after the write", working.ResourceVersion)
		}
		// A pass that reads the cache before it shows the write decides on
		// the written plan, not on the one the write replaced.
		node := fmt.Sprintf("node-%03d", 7+steps-1-i)
		if latest := store.Latest(shown.DeepCopy()); latest.ResourceVersion != working.ResourceVersion || latest.Status.NodeUpgradeStatuses[node].State != v1beta1.NodeStatePreDraining {
			t.Errorf("Latest of the cache's copy from before write %d: resourceVersion %s, %s %s; want the write's (%s, PreDraining)",
				i, latest.ResourceVersion, node, latest.Status.NodeUpgradeStatuses[node].State, working.ResourceVersion)
		}
		shown = waitFor(ctx, t, c, "the cache shows the step", func(p *v1beta1.UpgradePlan) bool {
			return p.ResourceVersion == working.ResourceVersion
		})
		if latest := store.Latest(shown); latest != shown {
			t.Errorf("Latest of a cache that shows the write returned another copy (resourceVersion %s)", latest.ResourceVersion)
		}
	}
	server := &v1beta1.UpgradePlan{}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(plan), server))
	if !equality.Semantic.DeepEqual(shown.Status, server.Status) || !equality.Semantic.DeepEqual(shown.Spec, server.Spec) {
		t.Errorf("the cache holds\n%+v\nthe API server\n%+v", shown.Status.NodeUpgradeStatuses["node-007"], server.Status.NodeUpgradeStatuses["node-007"])
	}
	whole, err := wholeSize(server)
	if err != nil {
		t.Fatal(err)
	}
	bytes := counter.BytesSnapshot()
	for _, k := range []apicount.Key{{Verb: "patch", Resource: "upgradeplans/status"}, {Verb: "watch", Resource: "upgradeplans"}} {
		if got := bytes[k].Received / steps; got == 0 || got > int64(whole)/4 {
			t.Errorf("%s %s received %d bytes per node step; the whole plan is %d", k.Verb, k.Resource, got, whole)
		}
	}
	if got := counter.Snapshot(); got[apicount.Key{Verb: "list", Resource: "upgradeplans"}]+got[apicount.Key{Verb: "get", Resource: "upgradeplans"}] != 0 {
		t.Errorf("the store read the plan back after its own writes: %v", got)
	}

	// Nothing changed: nothing sent.
	if wrote, err := store.WriteStatus(ctx, shown, shown.DeepCopy()); err != nil || wrote {
		t.Errorf("WriteStatus of an unchanged status: %v, %v; want no write", wrote, err)
	}

	// Someone else's change is read whole.
	counter.Reset()
	annotated := server.DeepCopy()
	annotated.Annotations = map[string]string{v1beta1.AnnotationRetry: "1"}
	must(t, env.Client.Update(ctx, annotated))
	waitFor(ctx, t, c, "the cache shows the user's annotation and every node", func(p *v1beta1.UpgradePlan) bool {
		return p.Annotations[v1beta1.AnnotationRetry] == "1" && len(p.Status.NodeUpgradeStatuses) == nodes &&
			p.Status.NodeUpgradeStatuses["node-007"].State == v1beta1.NodeStatePreDraining
	})
	if got := counter.Snapshot()[apicount.Key{Verb: "list", Resource: "upgradeplans"}]; got == 0 {
		t.Errorf("the cache shows a change it did not read")
	}

	// A write from a stale copy conflicts and changes nothing.
	stale := shown.DeepCopy()
	stale.Status.NodeUpgradeStatuses["node-008"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeStatePreDraining}
	if _, err := store.WriteStatus(ctx, shown, stale); !apierrors.IsConflict(err) {
		t.Errorf("a write from resourceVersion %s after a change: %v, want a conflict", shown.ResourceVersion, err)
	}

	must(t, env.Client.Delete(ctx, plan))
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(plan), &v1beta1.UpgradePlan{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the deleted plan stays in the cache: %v", err)
	}
}

// waitFor waits until the cached plan store-test satisfies ok and returns it.
func waitFor(ctx context.Context, t *testing.T, c cache.Cache, what string, ok func(*v1beta1.UpgradePlan) bool) *v1beta1.UpgradePlan {
	t.Helper()
	var got *v1beta1.UpgradePlan
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p := &v1beta1.UpgradePlan{}
		// Not there yet: the cache has not seen it.
		if found := c.Get(ctx, client.ObjectKey{Name: "store-test"}, p) == nil; !found {
			return false, nil
		}
		got = p
		return ok(p), nil
	}); err != nil {
		t.Fatalf("waiting until %s: %v (last seen %+v)", what, err, got)
	}
	return got
}

func wholeSize(p *v1beta1.UpgradePlan) (int, error) {
	data, err := json.Marshal(p)
	return len(data), err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

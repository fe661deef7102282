package cluster_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// countingReader counts the reads that reach the API server.
type countingReader struct {
	client.Reader
	gets int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets++
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestPlanProgressReaderReadsEachVersionOnce: a machine plan is read from
// the API server again only when its Secret changed.
func TestPlanProgressReaderReadsEachVersionOnce(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cluster.FleetLocalNamespace}}
	if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	plan := []byte(`{"files":[]}`)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "custom-progress-machine-plan"},
		Type: cluster.MachinePlanSecretType, Data: map[string][]byte{cluster.MachinePlanKey: plan}}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	api := &countingReader{Reader: env.Client}
	r := &cluster.PlanProgressReader{Reader: api}
	for range 3 {
		p, err := r.Read(ctx, sec)
		if err != nil {
			t.Fatal(err)
		}
		if p.Applied {
			t.Fatal("a plan not applied yet reads as applied")
		}
	}
	if api.gets != 1 {
		t.Errorf("three reads of one version of the Secret made %d API reads, want 1", api.gets)
	}

	sec.Data[cluster.AppliedChecksumKey] = []byte(cluster.PlanChecksum(plan))
	if err := env.Client.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	p, err := r.Read(ctx, sec)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Applied || api.gets != 2 {
		t.Errorf("after the agent applied the plan: applied %v after %d API reads, want true after 2", p.Applied, api.gets)
	}
}

package sim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
)

// TestReplicasFollowTheirNode: a node that goes down makes its replicas ERR
// in their engines (the replicas' state unknown) and their volumes
// degraded; back Ready, they are rebuilt, WO for Timing.ReplicaRebuild,
// then RW, and the volumes are healthy again. The replicas elsewhere stay
// RW throughout.
func TestReplicasFollowTheirNode(t *testing.T) {
	const rebuild = 2 * time.Second
	s := start(t, Config{Nodes: 3, Timing: Timing{ReplicaRebuild: rebuild}})
	ctx := context.Background()
	const node = "node-2"
	var replicas longhornv1beta2.ReplicaList
	if err := env.Client.List(ctx, &replicas, client.MatchingLabels{labelLonghornNode: node}); err != nil || len(replicas.Items) == 0 {
		t.Fatalf("%d replicas on %s (%v)", len(replicas.Items), node, err)
	}
	mine := map[string]bool{}
	for _, r := range replicas.Items {
		mine[r.Name] = true
	}

	// Every mode each engine reported, per replica, in order.
	var mu sync.Mutex
	seen := map[string][]string{}
	inf, err := s.Informers().GetInformer(ctx, &longhornv1beta2.Engine{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.AddEventHandler(handlerFuncs(func(o any) {
		e, ok := o.(*longhornv1beta2.Engine)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for r, mode := range e.Status.ReplicaModeMap {
			if modes := seen[r]; len(modes) == 0 || modes[len(modes)-1] != mode {
				seen[r] = append(modes, mode)
			}
		}
	})); err != nil {
		t.Fatal(err)
	}
	engines := func() map[string]string {
		var el longhornv1beta2.EngineList
		if err := env.Client.List(ctx, &el); err != nil {
			t.Fatal(err)
		}
		modes := map[string]string{}
		for _, e := range el.Items {
			for r, m := range e.Status.ReplicaModeMap {
				modes[r] = m
			}
		}
		return modes
	}
	// The replicas on node, in the mode and state wanted; every volume
	// with one of them of the robustness wanted.
	replicasAre := func(mode, state, robustness string) func() (bool, string) {
		return func() (bool, string) {
			modes := engines()
			for r := range mine {
				got := &longhornv1beta2.Replica{}
				get(t, client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: r}, got)
				if modes[r] != mode || got.Status.CurrentState != state {
					return false, fmt.Sprintf("replica %s: mode %q, state %q", r, modes[r], got.Status.CurrentState)
				}
				v := &longhornv1beta2.Volume{}
				get(t, client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: got.Spec.VolumeName}, v)
				if v.Status.Robustness != robustness {
					return false, fmt.Sprintf("volume %s is %s", v.Name, v.Status.Robustness)
				}
			}
			return true, ""
		}
	}

	n := &corev1.Node{}
	get(t, client.ObjectKey{Name: node}, n)
	if err := s.powerOff(ctx, node); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the replicas on "+node+" to fail", replicasAre(replicaModeERR, instanceUnknown, robustnessDegraded))
	if err := s.powerOn(ctx, node, n.Status.NodeInfo.OSImage, n.Status.NodeInfo.KubeletVersion); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the replicas on "+node+" to be rebuilt", replicasAre(replicaModeWO, instanceRunning, robustnessDegraded))
	rebuilding := time.Now()
	eventually(t, 10*time.Second, "the replicas on "+node+" to be in sync", replicasAre(replicaModeRW, instanceRunning, robustnessHealthy))
	if took := time.Since(rebuilding); took < rebuild/4 {
		t.Errorf("the rebuild took %s, want about %s", took, rebuild)
	}

	mu.Lock()
	defer mu.Unlock()
	for r, modes := range seen {
		want := []string{replicaModeRW}
		if mine[r] {
			want = []string{replicaModeRW, replicaModeERR, replicaModeWO, replicaModeRW}
		}
		if !slices.Equal(modes, want) {
			t.Errorf("replica %s went %v, want %v", r, modes, want)
		}
	}
}

package upgradelog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, &env)) }

// keep writes a container's kept log of lines [0, n) as the capture saves
// it, complete or not, and returns the CapturedLog that names it.
func keep(t *testing.T, ctx context.Context, pod string, n int, complete bool) v1beta1.CapturedLog {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var l containerLog
	for i := range n {
		// Two lines a second: a resumed read starts within a second.
		l.feed(stamped(t0.Add(time.Duration(i)*500*time.Millisecond), fmt.Sprintf("line %d", i)), 1<<20)
	}
	l.complete = complete
	state, err := json.Marshal(map[string]containerState{"main": l.state()})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: ConfigMap("plan", pod)}}
	if _, err := controllerutil.CreateOrUpdate(ctx, env.Client, cm, func() error {
		cm.Annotations = map[string]string{v1beta1.AnnotationLogState: string(state)}
		cm.BinaryData = map[string][]byte{Key("main"): Gzip(l.text())}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v1beta1.CapturedLog{Namespace: cluster.HarvesterNamespace, Pod: pod, Container: "main", ConfigMap: cm.Name, Key: Key("main")}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// TestFollowOfAPodGone: `logs --follow` of a pod deleted between the print
// of its kept log and the follow prints the rest the capture kept, each
// line once; when the capture did not keep it to its end, it says so.
func TestFollowOfAPodGone(t *testing.T) {
	ctx := t.Context()
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, complete := range []bool{true, false} {
		pod := fmt.Sprintf("gone-%t", complete)
		l := keep(t, ctx, pod, 10, false)
		var out bytes.Buffer
		at, err := Print(ctx, env.Client, &out, []v1beta1.CapturedLog{l})
		if err != nil {
			t.Fatal(err)
		}
		if at[0].Complete {
			t.Fatalf("a log kept while its pod runs is complete")
		}
		// The pod ends and is deleted; the capture kept the rest.
		keep(t, ctx, pod, 40, complete)
		err = Follow(ctx, env.Client, kube, l, at[0], &out)
		if out.String() != lines(0, 40) {
			t.Errorf("complete %t: printed and followed %q, want lines 0 to 39 once each", complete, out.String())
		}
		switch {
		case complete && err != nil:
			t.Errorf("following a pod gone whose log is kept: %v", err)
		case !complete && (err == nil || !strings.Contains(err.Error(), "is gone")):
			t.Errorf("following a pod gone whose log was not kept to its end: error %v, want one that says the pod is gone", err)
		}
	}
}

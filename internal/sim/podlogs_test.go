package sim

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveLog serves the log of pod ns/p with the query q, "<none>" when there is
// none.
func serveLog(t *testing.T, l *podLogs, q string) string {
	t.Helper()
	v, _ := url.ParseQuery(q)
	opts, err := parseLogOptions(v)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if !l.serve(context.Background(), &b, func() {}, "ns", "p", opts) {
		return "<none>"
	}
	return b.String()
}

// TestPodLogsServeAsAKubelet: timestamps, sinceTime, tailLines, follow to
// the container's end, and no log once the pod is gone.
func TestPodLogsServeAsAKubelet(t *testing.T) {
	var l podLogs
	key := podLogKey("ns", "p")
	l.start("ns", "p")
	if got := serveLog(t, &l, ""); got != "" {
		t.Errorf("a started container that wrote nothing: %q, want an empty log", got)
	}
	l.write(key, "one")
	time.Sleep(1100 * time.Millisecond)
	since := time.Now().Truncate(time.Second) // as sinceTime travels: whole seconds
	l.write(key, "two")
	l.write(key, "three")

	if got := serveLog(t, &l, ""); got != "one\ntwo\nthree\n" {
		t.Errorf("whole log %q", got)
	}
	if got := serveLog(t, &l, "tailLines=1"); got != "three\n" {
		t.Errorf("tailLines=1: %q", got)
	}
	if got := serveLog(t, &l, "sinceTime="+since.UTC().Format(time.RFC3339)); got != "two\nthree\n" {
		t.Errorf("sinceTime: %q", got)
	}
	stamped := serveLog(t, &l, "timestamps=true&tailLines=1")
	ts, text, _ := strings.Cut(stamped, " ")
	if _, err := time.Parse(time.RFC3339Nano, ts); err != nil || text != "three\n" || len(ts) != len(kubeletTimestamp)-len("Z07:00")+1 {
		t.Errorf("timestamps: %q (%v)", stamped, err)
	}

	// follow: the lines written meanwhile, until the container ends.
	var wg sync.WaitGroup
	var followed string
	wg.Add(1)
	go func() {
		defer wg.Done()
		followed = serveLog(t, &l, "follow=true&tailLines=0")
	}()
	time.Sleep(50 * time.Millisecond)
	l.write(key, "four")
	l.end("ns", "p")
	wg.Wait()
	if followed != "four\n" {
		t.Errorf("follow: %q", followed)
	}
	l.remove("ns", "p")
	if got := serveLog(t, &l, ""); got != "<none>" {
		t.Errorf("the log of a pod that is gone: %q", got)
	}
}

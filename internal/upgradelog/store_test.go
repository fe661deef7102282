package upgradelog

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

func stamped(ts time.Time, text string) string { return ts.UTC().Format(TimestampFormat) + " " + text }

// TestFeedKeepsEverythingUnderTheLimit: every line, in order, no mark.
func TestFeedKeepsEverythingUnderTheLimit(t *testing.T) {
	var l containerLog
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var want strings.Builder
	for i := range 100 {
		line := fmt.Sprintf("line %d", i)
		if !l.feed(stamped(t0.Add(time.Duration(i)*time.Millisecond), line), 64<<10) {
			t.Fatalf("line %d not taken", i)
		}
		want.WriteString(line + "\n")
	}
	if got := string(l.text()); got != want.String() {
		t.Errorf("kept %q, want %q", got, want.String())
	}
	if l.lines() != 100 || l.size() != int64(want.Len()) || !l.first.Equal(t0) {
		t.Errorf("lines %d, bytes %d, first %s", l.lines(), l.size(), l.first)
	}
}

// TestTruncationKeepsHeadAndTailWithAMark: the log stays within the limit,
// keeps its first and last lines, and says how much it dropped.
func TestTruncationKeepsHeadAndTailWithAMark(t *testing.T) {
	const limit = 4096
	var l containerLog
	t0 := time.Now()
	total := 1000
	for i := range total {
		l.feed(stamped(t0.Add(time.Duration(i)*time.Microsecond), fmt.Sprintf("line %04d of the job's output", i)), limit)
	}
	text := string(l.text())
	if len(text) > limit || l.size() != int64(len(text)) {
		t.Errorf("kept %d bytes (size says %d), limit %d", len(text), l.size(), limit)
	}
	if !strings.HasPrefix(text, "line 0000 ") || !strings.HasSuffix(text, "line 0999 of the job's output\n") {
		t.Errorf("the first or the last line is missing:\n%s", text)
	}
	want := fmt.Sprintf("[upgrade-toolkit: log truncated: %d lines", l.droppedLines)
	if !strings.Contains(text, want) || l.droppedLines == 0 {
		t.Errorf("no mark %q:\n%s", want, text)
	}
	if kept := l.lines() - 1; kept+l.droppedLines != int64(total) {
		t.Errorf("%d kept + %d dropped != %d written", kept, l.droppedLines, total)
	}
	// One line longer than the limit is cut, not lost.
	var long containerLog
	long.feed(stamped(t0, strings.Repeat("x", 2*limit)), limit)
	if got := long.text(); len(got) > limit || !strings.Contains(string(got), cutMark) {
		t.Errorf("a long line kept as %d bytes without the cut mark", len(got))
	}
}

// TestResumeDropsTheLinesAlreadyKept: a read again from the last line's
// second (sinceTime has whole seconds) skips exactly the lines kept, even
// lines sharing one timestamp, and takes the new ones.
func TestResumeDropsTheLinesAlreadyKept(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	all := []string{
		stamped(t0.Add(100*time.Millisecond), "a"),
		stamped(t0.Add(200*time.Millisecond), "b"),
		stamped(t0.Add(200*time.Millisecond), "c"), // same timestamp as b
		stamped(t0.Add(300*time.Millisecond), "d"),
		stamped(t0.Add(300*time.Millisecond), "e"),
		stamped(t0.Add(1500*time.Millisecond), "f"),
	}
	for cut := range len(all) + 1 {
		var l containerLog
		for _, line := range all[:cut] {
			l.feed(line, 1<<20)
		}
		// Persisted and restored, as across a manager restart.
		r, err := restore(l.text(), l.state())
		if err != nil {
			t.Fatal(err)
		}
		r.resume()
		since := r.since()
		for _, line := range all {
			ts, _ := splitTimestamp(line)
			if since != nil && ts.Before(since.Truncate(time.Second)) {
				continue // the kubelet sends nothing older than sinceTime
			}
			r.feed(line, 1<<20)
		}
		if got := string(r.text()); got != "a\nb\nc\nd\ne\nf\n" {
			t.Errorf("read cut after %d lines, then resumed: kept %q", cut, got)
		}
	}
}

// TestRestoreKeepsTheTruncatedLayout: a truncated log restored from its
// text and state goes on exactly as the original.
func TestRestoreKeepsTheTruncatedLayout(t *testing.T) {
	const limit = 2048
	var l containerLog
	t0 := time.Now()
	for i := range 300 {
		l.feed(stamped(t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d", i)), limit)
	}
	r, err := restore(l.text(), l.state())
	if err != nil {
		t.Fatal(err)
	}
	for i := 300; i < 400; i++ {
		line := stamped(t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d", i))
		l.feed(line, limit)
		r.feed(line, limit)
	}
	if string(l.text()) != string(r.text()) || l.state() != r.state() {
		t.Errorf("restored log differs:\n%s\n---\n%s", r.text(), l.text())
	}
	if gz, err := Gunzip(Gzip(l.text())); err != nil || string(gz) != string(l.text()) {
		t.Errorf("gzip round trip: %v", err)
	}
}

// TestSelectByJobAndNode: --job takes a name or namespace/name, --node a
// node; both narrow the list.
func TestSelectByJobAndNode(t *testing.T) {
	logs := []v1beta1.CapturedLog{
		{Namespace: "harvester-system", Job: "p-node-upgrade-pre-drain-node-1", Node: "node-1", Pod: "a"},
		{Namespace: "harvester-system", Job: "p-node-upgrade-pre-drain-node-1", Node: "node-1", Pod: "b"}, // a retry
		{Namespace: "cattle-system", Job: "apply-p-image-preload-on-node-2", Node: "node-2", Pod: "c"},
	}
	pods := func(ls []v1beta1.CapturedLog) string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Pod)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ job, node, want string }{
		{"p-node-upgrade-pre-drain-node-1", "", "a,b"},
		{"harvester-system/p-node-upgrade-pre-drain-node-1", "", "a,b"},
		{"cattle-system/p-node-upgrade-pre-drain-node-1", "", ""},
		{"", "node-2", "c"},
		{"p-node-upgrade-pre-drain-node-1", "node-2", ""},
		{"", "", "a,b,c"},
	} {
		if got := pods(Select(logs, tc.job, tc.node)); got != tc.want {
			t.Errorf("job %q node %q: %q, want %q", tc.job, tc.node, got, tc.want)
		}
	}
}

// TestPlanLimit: a container's log stops growing once the plan's logs reach
// the plan's limit, keeps what it has, and says where it dropped lines.
func TestPlanLimit(t *testing.T) {
	lim := Limits{Container: 4096, Plan: 10000}
	for _, tc := range []struct {
		others, kept int64
		want         int
	}{
		{0, 0, 4096},       // room for a whole container
		{8000, 0, 2000},    // the plan's last 2000 bytes
		{10000, 0, 0},      // the plan is full
		{9000, 3000, 3000}, // over the plan's limit: keep what was kept, no more
		{20000, 5000, 4096},
	} {
		if got := lim.forContainer(tc.others, tc.kept); got != tc.want {
			t.Errorf("others %d, kept %d: limit %d, want %d", tc.others, tc.kept, got, tc.want)
		}
	}
	// A log limited by a full plan keeps its first lines and marks the rest.
	var l containerLog
	t0 := time.Now()
	for i := range 200 {
		l.feed(stamped(t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d", i)), lim.forContainer(9800, l.size()))
	}
	text := string(l.text())
	if l.size() > 200+int64(len(mark(1<<40, 1<<50))) || !strings.HasPrefix(text, "line 0\n") || !strings.Contains(text, "log truncated") {
		t.Errorf("with 200 bytes of the plan left, kept %d bytes:\n%s", l.size(), text)
	}
}

// TestKeptBytesTally: the plan's tally follows each ConfigMap's latest save.
func TestKeptBytesTally(t *testing.T) {
	k := &keptBytes{by: map[string]int64{}}
	k.set("a", 100)
	k.set("b", 50)
	k.set("a", 30) // a save that truncated or restarted the log
	if k.total != 80 || k.total-k.by["a"] != 50 || k.total-k.by["c"] != 80 {
		t.Errorf("total %d, by %v: want 80, with 50 beside a's and 80 beside a new one's", k.total, k.by)
	}
	st := map[string]containerState{"main": {Bytes: 7}, "init": {Bytes: 5}}
	if got := keptIn(st); got != 12 {
		t.Errorf("keptIn = %d, want 12", got)
	}
}

// TestGzipRoundTrips: a short log and a long one come back whole through
// Gunzip (the standard library's reader, as the CLI's); the long one at the
// best compression, smaller than without state.
func TestGzipRoundTrips(t *testing.T) {
	var long strings.Builder
	for i := 0; long.Len() < 4*statelessUpTo; i++ {
		fmt.Fprintf(&long, "2026-11-26T12:00:%02dZ pulling layer %d of image rancher/harvester:v1.%d\n", i%60, i%13, i%9)
	}
	for name, text := range map[string]string{"short": long.String()[:statelessUpTo/2], "long": long.String()} {
		gz := Gzip([]byte(text))
		back, err := Gunzip(gz)
		if err != nil || string(back) != text {
			t.Errorf("%s log: came back %d bytes of %d (%v)", name, len(back), len(text), err)
		}
		if name == "long" {
			var stateless bytes.Buffer
			w, _ := kgzip.NewWriterLevel(&stateless, kgzip.StatelessCompression)
			_, _ = w.Write([]byte(text))
			_ = w.Close()
			if len(gz) >= stateless.Len() {
				t.Errorf("the long log took %d bytes, not fewer than %d without state", len(gz), stateless.Len())
			}
		}
	}
}

// TestAfterResumesAtEveryLine: the kept text after any number of lines
// read is the rest of the log as kept, truncated or not, restored or not.
func TestAfterResumesAtEveryLine(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, limit := range []int{1 << 20, 2048} {
		var l containerLog
		var all []string
		for i := range 300 {
			all = append(all, fmt.Sprintf("line %d\n", i))
			l.feed(stamped(t0.Add(time.Duration(i)*time.Millisecond), fmt.Sprintf("line %d", i)), limit)
		}
		r, err := restore(l.text(), l.state())
		if err != nil {
			t.Fatal(err)
		}
		if r.readLines() != 300 {
			t.Fatalf("limit %d: %d lines read, want 300", limit, r.readLines())
		}
		head, dropped := int64(r.headLines), r.droppedLines
		if limit < 1<<20 && dropped == 0 {
			t.Fatalf("limit %d dropped nothing: the test does not truncate", limit)
		}
		for n := int64(0); n <= 300; n++ {
			var want strings.Builder
			if n < head {
				want.WriteString(strings.Join(all[n:head], ""))
			}
			if dropped > 0 && n < head+dropped {
				want.WriteString(mark(dropped, r.droppedBytes))
			}
			want.WriteString(strings.Join(all[max(n, head+dropped):], ""))
			if got := string(r.after(n)); got != want.String() {
				t.Fatalf("limit %d: after %d lines: got %q, want %q", limit, n, got, want.String())
			}
		}
	}
}

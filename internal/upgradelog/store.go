package upgradelog

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"
	"time"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Limits bound the kept text, uncompressed.
type Limits struct {
	// Container is the most kept of one container's log.
	Container int
	// Plan is the most kept of all the logs of one plan.
	Plan int64
}

// DefaultLimits: a node job writes a few KiB, cluster-upgrade a few tens;
// 256 KiB per container keeps a verbose run whole, and 32 MiB per plan
// (gzip makes it 2 to 4 MiB in etcd) covers a 100-node upgrade's five Jobs
// per node at 64 KiB each.
var DefaultLimits = Limits{Container: 256 << 10, Plan: 32 << 20}

// forContainer is how much a container's log may keep when the plan's
// other logs keep others bytes and this one kept already: the per-container
// limit, less what would take the plan past its limit; never less than what
// it kept (the plan's limit stops its growth, it does not cut what is kept).
func (lim Limits) forContainer(others, kept int64) int {
	perContainer := int64(lim.Container)
	return int(max(min(perContainer, lim.Plan-others), min(kept, perContainer), 0))
}

// headShare is the part of a container's limit kept from the beginning of
// its log; the rest is its end, which says how it ended.
const headShare = 4

// TimestampFormat is the kubelet's timestamp on each line when asked for
// timestamps (RFC 3339 with nanoseconds, fixed width).
const TimestampFormat = "2006-01-02T15:04:05.000000000Z07:00"

// containerLog is one container's kept log: its first lines (head) while
// they fit in a quarter of the limit, then its latest lines (tail); lines
// dropped between them are counted and replaced by one mark line.
type containerLog struct {
	head      []byte
	headLines int
	tail      []string // each ends in "\n"
	tailBytes int
	// dropped counts the lines (and bytes) left out between head and tail.
	droppedLines, droppedBytes int64
	// first and last are the kubelet's timestamps of the first and the
	// last line read; lastCount is how many lines were read with exactly
	// last, so that a read that starts again at last's second skips them.
	first, last time.Time
	lastCount   int
	// skip is how many lines stamped last the current read still skips.
	skip int
	// complete: the container ended and its log was read to the end.
	complete bool
	// incomplete says why the capture let the log go before its end.
	incomplete *v1beta1.IncompleteLog
}

// resume starts a new read of the log from the kubelet, from sinceTime
// (whole seconds, as the API passes it): the lines at the last timestamp
// already kept come again and are skipped.
func (l *containerLog) resume() { l.skip = l.lastCount }

// since is the sinceTime of the next read: nil for the whole log.
func (l *containerLog) since() *time.Time {
	if l.last.IsZero() {
		return nil
	}
	t := l.last
	return &t
}

// feed takes one line of the kubelet's log as read with timestamps ("<time>
// <text>"), drops it when already kept, and keeps it within limit
// otherwise. It reports whether the line was new.
func (l *containerLog) feed(stamped string, limit int) bool {
	ts, text := splitTimestamp(stamped)
	switch {
	case ts.IsZero():
		// No timestamp (never from a kubelet asked for them): keep it
		// where it comes.
	case ts.Before(l.last):
		return false
	case ts.Equal(l.last):
		if l.skip > 0 {
			l.skip--
			return false
		}
		l.lastCount++
	default:
		l.last, l.lastCount, l.skip = ts, 1, 0
		if l.first.IsZero() {
			l.first = ts
		}
	}
	l.add(text, limit)
	return true
}

// splitTimestamp splits "<RFC 3339 time> <text>" into its parts; a line
// without a timestamp is all text.
func splitTimestamp(line string) (time.Time, string) {
	line = strings.TrimSuffix(line, "\n")
	stamp, text, ok := strings.Cut(line, " ")
	if !ok {
		stamp, text = line, ""
	}
	ts, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return time.Time{}, line
	}
	return ts, text
}

// add keeps a line (without its newline) within limit bytes: in the head
// while nothing was dropped and it fits in the head's share, else at the
// end of the tail, dropping the tail's oldest lines to make room.
func (l *containerLog) add(text string, limit int) {
	line := text + "\n"
	if room := limit - limit/headShare; len(line) > room {
		// One line longer than the tail's room: keep its beginning.
		line = line[:max(room-len(cutMark)-1, 0)] + cutMark + "\n"
	}
	if l.droppedLines == 0 && len(l.tail) == 0 && len(l.head)+len(line) <= limit/headShare {
		l.head = append(l.head, line...)
		l.headLines++
		return
	}
	l.tail = append(l.tail, line)
	l.tailBytes += len(line)
	for len(l.tail) > 0 && len(l.head)+l.tailBytes+l.markLen() > limit {
		l.droppedLines++
		l.droppedBytes += int64(len(l.tail[0]))
		l.tailBytes -= len(l.tail[0])
		l.tail = l.tail[1:]
	}
}

// cutMark ends a line cut to fit the limit.
const cutMark = " [line cut: longer than the log limit]"

// markLen is the size of the truncation mark, 0 while nothing was dropped.
// The mark's length varies with the counts; room is kept for the longest.
func (l *containerLog) markLen() int {
	if l.droppedLines == 0 && len(l.tail) == 0 {
		return 0
	}
	return len(mark(1<<40, 1<<50))
}

// mark is the line that replaces the dropped lines.
func mark(lines, bytes int64) string {
	return fmt.Sprintf("[upgrade-toolkit: log truncated: %d lines (%d bytes) dropped here; the log is longer than the limit kept]\n", lines, bytes)
}

// text is the kept log: head, the mark where lines were dropped, tail.
func (l *containerLog) text() []byte {
	var b bytes.Buffer
	b.Write(l.head)
	if l.droppedLines > 0 {
		b.WriteString(mark(l.droppedLines, l.droppedBytes))
	}
	for _, t := range l.tail {
		b.WriteString(t)
	}
	return b.Bytes()
}

// lines counts the kept lines, the mark included.
func (l *containerLog) lines() int64 {
	n := int64(l.headLines + len(l.tail))
	if l.droppedLines > 0 {
		n++
	}
	return n
}

// readLines counts the lines read from the log's start: the kept ones
// and those dropped between head and tail.
func (l *containerLog) readLines() int64 {
	return int64(l.headLines+len(l.tail)) + l.droppedLines
}

// after is the kept text after the log's first n lines read: the mark
// stands for dropped lines among them.
func (l *containerLog) after(n int64) []byte {
	var b bytes.Buffer
	if n < int64(l.headLines) {
		b.Write(skipLines(l.head, int(n)))
	}
	tailFrom := n - int64(l.headLines) - l.droppedLines
	if l.droppedLines > 0 && tailFrom < 0 {
		b.WriteString(mark(l.droppedLines, l.droppedBytes))
	}
	for _, t := range l.tail[min(max(tailFrom, 0), int64(len(l.tail))):] {
		b.WriteString(t)
	}
	return b.Bytes()
}

// skipLines is text after its first n lines.
func skipLines(text []byte, n int) []byte {
	for ; n > 0; n-- {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			return nil
		}
		text = text[i+1:]
	}
	return text
}

// size is the kept text's size, the mark included.
func (l *containerLog) size() int64 {
	n := int64(len(l.head) + l.tailBytes)
	if l.droppedLines > 0 {
		n += int64(len(mark(l.droppedLines, l.droppedBytes)))
	}
	return n
}

// containerState is what a capture needs besides the text to resume a
// container's log (ConfigMap annotation AnnotationLogState).
type containerState struct {
	HeadBytes    int       `json:"headBytes"`
	HeadLines    int       `json:"headLines"`
	DroppedLines int64     `json:"droppedLines,omitempty"`
	DroppedBytes int64     `json:"droppedBytes,omitempty"`
	First        time.Time `json:"first,omitzero"`
	Last         time.Time `json:"last,omitzero"`
	LastCount    int       `json:"lastCount,omitempty"`
	Complete     bool      `json:"complete,omitempty"`
	Lines        int64     `json:"lines"`
	Bytes        int64     `json:"bytes"`
	// Incomplete is why the log was let go before its end.
	Incomplete *v1beta1.IncompleteLog `json:"incomplete,omitempty"`
}

func (l *containerLog) state() containerState {
	return containerState{
		HeadBytes: len(l.head), HeadLines: l.headLines, DroppedLines: l.droppedLines, DroppedBytes: l.droppedBytes,
		First: l.first, Last: l.last, LastCount: l.lastCount, Complete: l.complete, Lines: l.lines(), Bytes: l.size(),
		Incomplete: l.incomplete,
	}
}

// restore rebuilds a container's log from its kept text and state.
func restore(text []byte, s containerState) (*containerLog, error) {
	if s.HeadBytes > len(text) {
		return nil, fmt.Errorf("the kept log has %d bytes, its state says the head alone has %d", len(text), s.HeadBytes)
	}
	l := &containerLog{
		head: append([]byte(nil), text[:s.HeadBytes]...), headLines: s.HeadLines,
		droppedLines: s.DroppedLines, droppedBytes: s.DroppedBytes,
		first: s.First, last: s.Last, lastCount: s.LastCount, complete: s.Complete, incomplete: s.Incomplete,
	}
	rest := string(text[s.HeadBytes:])
	if s.DroppedLines > 0 {
		_, rest, _ = strings.Cut(rest, "\n") // the mark
	}
	for rest != "" {
		line, after, found := strings.Cut(rest, "\n")
		if found {
			line += "\n"
		}
		l.tail = append(l.tail, line)
		l.tailBytes += len(line)
		rest = after
	}
	return l, nil
}

// Gzip compresses a log for a ConfigMap's binaryData. A short log (most
// are: a node Job writes a few KiB) is compressed without keeping state, at
// a few percent more bytes than the best compression, which makes a writer
// of about 800 KiB for every save and would keep one in memory between
// them; a long one, rarely saved, gets that writer for its save.
func Gzip(text []byte) []byte {
	var b bytes.Buffer
	level := kgzip.BestCompression
	if len(text) <= statelessUpTo {
		level = kgzip.StatelessCompression
	}
	w, _ := kgzip.NewWriterLevel(&b, level)
	_, _ = w.Write(text)
	_ = w.Close()
	return b.Bytes()
}

// statelessUpTo is the longest log Gzip compresses without state: 8 KiB
// come out within 10% of the best compression, 200 KiB 40% larger.
const statelessUpTo = 16 << 10

// Gunzip reads a log from a ConfigMap's binaryData.
func Gunzip(data []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	return io.ReadAll(r)
}

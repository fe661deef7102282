package upgradelog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
)

// Get reads a plan's UpgradeLog, saying why there is none.
func Get(ctx context.Context, c client.Reader, plan string) (*v1beta1.UpgradeLog, error) {
	ul := &v1beta1.UpgradeLog{}
	err := c.Get(ctx, client.ObjectKey{Name: plan}, ul)
	if apierrors.IsNotFound(err) {
		p := &v1beta1.UpgradePlan{}
		switch perr := c.Get(ctx, client.ObjectKey{Name: plan}, p); {
		case apierrors.IsNotFound(perr):
			return nil, fmt.Errorf("there is no UpgradePlan %s (kubectl get upgradeplans lists them)", plan)
		case perr == nil && p.Spec.LogEnabled != nil && !*p.Spec.LogEnabled:
			return nil, fmt.Errorf("plan %s keeps no logs: it was created with spec.logEnabled: false", plan)
		}
		return nil, fmt.Errorf("plan %s has no UpgradeLog: no pod of it has run yet, or the manager runs with --upgrade-log=false (chart value upgradeLog.enabled)", plan)
	}
	return ul, err
}

// Text reads one captured log's text from its ConfigMap.
func Text(ctx context.Context, c client.Reader, l v1beta1.CapturedLog) ([]byte, error) {
	cl, err := kept(ctx, c, l)
	if err != nil {
		return nil, err
	}
	return cl.text(), nil
}

// Select returns the logs of a Job (by name, or namespace/name) and of a
// node; an empty job or node matches every one.
func Select(logs []v1beta1.CapturedLog, job, node string) []v1beta1.CapturedLog {
	var out []v1beta1.CapturedLog
	for _, l := range logs {
		if job != "" && l.Job != job && l.Namespace+"/"+l.Job != job {
			continue
		}
		if node != "" && l.Node != node {
			continue
		}
		out = append(out, l)
	}
	return out
}

// Header is the line that introduces a log when several are printed.
func Header(l v1beta1.CapturedLog) string {
	var state []string
	switch {
	case l.Incomplete != nil:
		state = append(state, fmt.Sprintf("incomplete: %s since %s: %s", l.Incomplete.Reason, l.Incomplete.Since.UTC().Format(time.RFC3339), firstLine(l.Incomplete.Message)))
	case !l.Complete:
		state = append(state, "running or not read to its end")
	}
	if l.Truncated {
		state = append(state, "truncated")
	}
	s := fmt.Sprintf("==> Job %s/%s, pod %s, container %s, node %s", l.Namespace, l.Job, l.Pod, l.Container, l.Node)
	if len(state) > 0 {
		s += " (" + strings.Join(state, ", ") + ")"
	}
	return s + " <=="
}

// Position is how far a reader printed a container's log: the lines read
// from its start (kept, or dropped by the limit) and the kubelet's
// timestamp of the last, with how many lines carried exactly that one. A
// follow resumes from it, so that no line is printed twice or missed
// between a print of the kept log and the follow of the live one.
type Position struct {
	lines     int64
	last      time.Time
	lastCount int
	// Complete: the log was kept to its end; nothing is left to follow.
	Complete bool
}

// kept reads one captured log from its ConfigMap, with what a reader needs
// to resume it.
func kept(ctx context.Context, c client.Reader, l v1beta1.CapturedLog) (*containerLog, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: l.ConfigMap}, cm); err != nil {
		return nil, fmt.Errorf("reading the log of %s/%s %s: %w", l.Namespace, l.Pod, l.Container, err)
	}
	text, err := Gunzip(cm.BinaryData[l.Key])
	if err != nil {
		return nil, fmt.Errorf("reading the log of %s/%s %s from ConfigMap %s key %s: %w", l.Namespace, l.Pod, l.Container, cm.Name, l.Key, err)
	}
	cl, err := restore(text, states(cm)[l.Container])
	if err != nil {
		return nil, fmt.Errorf("reading the log of %s/%s %s from ConfigMap %s: %w", l.Namespace, l.Pod, l.Container, cm.Name, err)
	}
	return cl, nil
}

// Follow prints what a container logs after from, reading the live pod's
// log from the API server until the container ends or ctx does. When the
// pod is gone (deleted before the stream opened, or while it ran), what
// the capture kept after from is printed instead: its lines are the rest.
func Follow(ctx context.Context, c client.Reader, kube kubernetes.Interface, l v1beta1.CapturedLog, from Position, w io.Writer) error {
	at := from
	streamErr := stream(ctx, kube, l, &at, w)
	if ctx.Err() != nil {
		return nil //nolint:nilerr // the caller stopped following: not a failure
	}
	// The stream ended with the container, broke, or found the pod gone:
	// whatever the capture kept beyond what was printed (nothing, when the
	// stream brought it all) comes from the kept log.
	cl, err := kept(ctx, c, l)
	if err != nil {
		return errors.Join(streamErr, err)
	}
	if _, err := w.Write(cl.after(at.lines)); err != nil {
		return err
	}
	switch {
	case apierrors.IsNotFound(streamErr) && !cl.complete && cl.incomplete == nil:
		return fmt.Errorf("pod %s/%s is gone (or its kubelet no longer serves its log) and the capture kept its log to line %d only, all printed above: "+
			"the rest went with the pod, whose end the capture did not see (was the manager down then?)", l.Namespace, l.Pod, cl.readLines())
	case apierrors.IsNotFound(streamErr):
		return nil
	case streamErr != nil:
		return fmt.Errorf("following the log of %s/%s %s after line %d: %w", l.Namespace, l.Pod, l.Container, max(at.lines, cl.readLines()), streamErr)
	}
	return nil
}

// stream prints the live log of l's container after at, moving at past
// each line it prints.
func stream(ctx context.Context, kube kubernetes.Interface, l v1beta1.CapturedLog, at *Position, w io.Writer) error {
	cl := &containerLog{last: at.last, lastCount: at.lastCount}
	opts := &corev1.PodLogOptions{Container: l.Container, Timestamps: true, Follow: true}
	if s := cl.since(); s != nil {
		opts.SinceTime = &metav1.Time{Time: *s}
	}
	rc, err := kube.CoreV1().Pods(l.Namespace).GetLogs(l.Pod, opts).Stream(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	cl.resume()
	r := bufio.NewReader(rc)
	for {
		line, err := r.ReadString('\n')
		// Each new line is printed and not kept: no limit applies.
		if line != "" && cl.feed(line, 1<<30) {
			if _, werr := w.Write(cl.text()); werr != nil {
				return werr
			}
			at.lines, at.last, at.lastCount = at.lines+1, cl.last, cl.lastCount
			cl.head, cl.headLines, cl.tail, cl.tailBytes = nil, 0, nil, 0
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// List prints what the UpgradeLog holds, one line per captured log.
func List(w io.Writer, ul *v1beta1.UpgradeLog) error {
	st := ul.Status
	var b strings.Builder
	fmt.Fprintf(&b, "UpgradeLog %s: %d log(s), %s kept\n", ul.Name, len(st.Logs), humanBytes(st.Bytes))
	if c := meta.FindStatusCondition(st.Conditions, v1beta1.ConditionTruncated); c != nil && c.Status == metav1.ConditionTrue {
		fmt.Fprintf(&b, "truncated: %s\n", c.Message)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1beta1.ConditionIncomplete); c != nil && c.Status == metav1.ConditionTrue {
		fmt.Fprintf(&b, "incomplete: %s\n", c.Message)
	}
	if len(st.Logs) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "JOB\tNODE\tCONTAINER\tLINES\tSIZE\tSTATE\tFIRST\tLAST")
		for _, l := range st.Logs {
			state := "complete"
			switch {
			case l.Incomplete != nil:
				state = "incomplete:" + l.Incomplete.Reason
			case !l.Complete:
				state = "running"
			}
			if l.Truncated {
				state += ",truncated"
			}
			_, _ = fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", l.Namespace, l.Job, orDash(l.Node), l.Container, l.Lines, humanBytes(l.Bytes), state, clock(l.FirstTimestamp), clock(l.LastTimestamp))
		}
		_ = tw.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Print writes the selected logs' text, each after its Header when there
// is more than one, and returns where each ends, for Follow.
func Print(ctx context.Context, c client.Reader, w io.Writer, logs []v1beta1.CapturedLog) ([]Position, error) {
	var at []Position
	for _, l := range logs {
		if len(logs) > 1 {
			if _, err := fmt.Fprintln(w, Header(l)); err != nil {
				return nil, err
			}
		}
		cl, err := kept(ctx, c, l)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(cl.text()); err != nil {
			return nil, err
		}
		at = append(at, Position{lines: cl.readLines(), last: cl.last, lastCount: cl.lastCount, Complete: cl.complete})
	}
	return at, nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func clock(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("15:04:05")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

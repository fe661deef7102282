package status

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
)

// Text renders the status for people, as the live view and `status` show it.
func Text(s *Status) string {
	var b strings.Builder
	from, to := or(s.From, "?"), or(s.To, "?")
	fmt.Fprintf(&b, "UpgradePlan %s: Harvester %s -> %s   elapsed %s\n", s.Plan, from, to, round(s.Elapsed.Duration))
	// What is wrong comes first: it is what the operator has to act on.
	if len(s.Insights) > 0 {
		b.WriteString("insights:\n")
		for _, in := range s.Insights {
			fmt.Fprintf(&b, "  %-7s %s since %s [%s]: %s (see %s)\n", in.Level, in.Type, in.Since.UTC().Format(time.TimeOnly), in.Impact, in.Message, in.Doc)
		}
	}
	if st := s.Stalled; st != nil && !slices.ContainsFunc(s.Insights, func(in v1beta1.Insight) bool { return in.Type == v1beta1.InsightStalled }) {
		fmt.Fprintf(&b, "STALLED   %s has taken %s, more than its estimate of %s\n", st.What, round(st.Spent.Duration), round(st.Estimate.Duration))
	}
	fmt.Fprintf(&b, "phase     %s", s.Phase)
	if s.Step != "" {
		fmt.Fprintf(&b, "  [%d/%d %s]", s.StepNumber, s.Steps, s.Step)
	}
	b.WriteString("\n")
	if w := s.Waiting; w != nil {
		fmt.Fprintf(&b, "waiting   %s (since %s)\n", w.For, w.Since.UTC().Format(time.TimeOnly))
	}
	if w := s.Windows; w != nil {
		fmt.Fprintf(&b, "windows   %s", w.Windows)
		if w.NextOpen != nil {
			fmt.Fprintf(&b, "; closed: nodes wait for the next, at %s", w.NextOpen.UTC().Format(time.RFC3339))
		}
		b.WriteString("\n")
	}
	if s.Error != "" {
		fmt.Fprintf(&b, "error     %s\n", s.Error)
	}
	if e := s.Estimate; e != nil {
		fmt.Fprintf(&b, "time left ~%s (%s)\n", round(e.Left.Duration), e.Method)
	}
	if len(s.Phases) > 0 {
		b.WriteString("phases:\n")
		for _, p := range s.Phases {
			fmt.Fprintf(&b, "  %-18s %s%s\n", p.Step, round(p.Duration.Duration), running(p.Running))
		}
	}
	if len(s.Nodes) > 0 {
		b.WriteString("nodes:\n")
		for _, n := range s.Nodes {
			took := ""
			if n.Upgrade != nil {
				took = "upgrade " + round(n.Upgrade.Duration).String() + running(n.Upgrading)
			}
			fmt.Fprintln(&b, strings.TrimRight(fmt.Sprintf("  %-12s %-24s %-26s %s", n.Name, n.State, took, n.Message), " "))
		}
	}
	renderVMs(&b, s)
	if len(s.Warnings) > 0 {
		b.WriteString("warnings:\n")
		for _, w := range s.Warnings {
			count := ""
			if w.Count > 1 {
				count = fmt.Sprintf(" (x%d)", w.Count)
			}
			fmt.Fprintf(&b, "  %s %s: %s%s\n", w.Time.UTC().Format(time.TimeOnly), w.Reason, w.Message, count)
		}
	}
	if l := s.Logs; l != nil {
		fmt.Fprintf(&b, "logs      %d incomplete: the kubelets of %s did not answer (upgrade-toolkit logs %s)\n", l.Incomplete, names.List(l.Nodes), s.Plan)
	}
	if s.Aborted != "" {
		fmt.Fprintf(&b, "aborted   %s\n", s.Aborted)
	}
	if f := s.Failure; f != nil {
		fmt.Fprintf(&b, "failed    %s\n", firstLine(f.Message))
		if f.Job != "" {
			fmt.Fprintf(&b, "  Job %s", f.Job)
			if f.Node != "" {
				fmt.Fprintf(&b, " on node %s", f.Node)
			}
			b.WriteString("\n")
		}
		if len(f.LogLines) > 0 {
			b.WriteString("  last log lines:\n")
			for _, l := range f.LogLines {
				fmt.Fprintf(&b, "    | %s\n", l)
			}
		}
		if f.Job != "" {
			// The whole log outlives the Job (internal/upgradelog).
			fmt.Fprintf(&b, "  whole log: upgrade-toolkit logs %s --job %s\n", s.Plan, f.Job)
		}
		if f.Retry != "" {
			fmt.Fprintf(&b, "retry     fix the cause, then: %s\n", f.Retry)
			fmt.Fprintf(&b, "          until %s; then, or when the plan is deleted, everything it changed is cleaned up\n",
				f.RetryDeadline.UTC().Format(time.RFC3339))
		}
	}
	if len(s.Failures) > 1 || (len(s.Failures) == 1 && s.Failure == nil) {
		b.WriteString("failures:\n")
		for _, f := range s.Failures {
			retried := "not retried"
			if f.RetriedAt != nil {
				retried = "retried at " + f.RetriedAt.UTC().Format(time.TimeOnly)
			}
			fmt.Fprintf(&b, "  %s %-22s %s: %s\n", f.FailedAt.UTC().Format(time.TimeOnly), f.Phase, retried, firstLine(f.Message))
		}
	}
	if len(s.Checks) > 0 {
		b.WriteString("checks:\n")
		for _, c := range s.Checks {
			fmt.Fprintln(&b, strings.TrimRight(fmt.Sprintf("  %-8s %-34s %s", c.Result, c.Name, c.Message), " "))
		}
	}
	return strings.TrimRight(b.String(), " \n") + "\n"
}

// renderVMs writes the VM ledger: each node's counts, with the Longhorn
// replicas being rebuilt there, then each VM something happened to.
func renderVMs(b *strings.Builder, s *Status) {
	var counts []string
	for _, n := range s.Nodes {
		var parts []string
		if c := n.VMs; c != nil {
			parts = append(parts, fmt.Sprintf("moved %d of %d, pending %d, failing %d, shut down %d", c.Moved, c.ToMove, c.Pending, c.Failed, c.Stopped))
		}
		if n.ReplicasRebuilding > 0 {
			parts = append(parts, fmt.Sprintf("Longhorn replicas rebuilding %d", n.ReplicasRebuilding))
		}
		if len(parts) > 0 {
			counts = append(counts, fmt.Sprintf("  %-12s %s\n", n.Name, strings.Join(parts, ", ")))
		}
	}
	v := s.VMs
	switch {
	case v != nil:
		fmt.Fprintf(b, "vms:      %d recorded at the start (ledger %s; the whole record: upgrade-toolkit logs %s --archive, vm-ledger.txt)\n", v.Recorded, v.Ledger, s.Plan)
	case len(counts) > 0:
		b.WriteString("replicas:\n")
	}
	for _, c := range counts {
		b.WriteString(c)
	}
	if v == nil {
		return
	}
	for _, vm := range v.Changed {
		fmt.Fprintf(b, "  %s (on %s at the start): %s\n", vm.Name, or(vm.Node, "no node"), vm.Summary)
	}
	if v.More > 0 {
		fmt.Fprintf(b, "  and %d more VMs\n", v.More)
	}
}

func running(r bool) string {
	if r {
		return " (running)"
	}
	return ""
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Write prints the status as json or yaml.
func Write(w io.Writer, s *Status, format string) error {
	var out []byte
	var err error
	switch format {
	case "json":
		out, err = json.MarshalIndent(s, "", "  ")
		out = append(out, '\n')
	case "yaml":
		out, err = yaml.Marshal(s)
	default:
		return fmt.Errorf("output format %q: use json or yaml", format)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// IsTerminal reports whether w is a terminal, where a View redraws in place.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// View shows successive statuses on a terminal (redrawn in place) or, when
// the output is not a terminal, as plain lines: only the lines that changed
// since the last one shown, ignoring changes of the running clocks alone.
type View struct {
	Out      io.Writer
	Terminal bool
	shown    map[string]bool
}

// Show draws one status.
func (v *View) Show(s *Status) error {
	text := Text(s)
	if v.Terminal {
		_, err := io.WriteString(v.Out, "\x1b[H\x1b[2J"+text)
		return err
	}
	var b strings.Builder
	shown := map[string]bool{}
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		k := clockless(l)
		shown[k] = true
		if !v.shown[k] {
			b.WriteString(l + "\n")
		}
	}
	v.shown = shown
	if b.Len() == 0 {
		return nil
	}
	_, err := io.WriteString(v.Out, b.String())
	return err
}

// clocks are the durations and times in a rendered line.
var clocks = regexp.MustCompile(`~?\b\d+(\.\d+)?(h|ms|µs|m|s)(\d+(\.\d+)?(ms|m|s))*\b|\b\d\d:\d\d:\d\d\b`)

var spaces = regexp.MustCompile(`\s+`)

// clockless is a line without its clocks (nor the padding that follows
// them), to compare lines by what they say.
func clockless(l string) string { return spaces.ReplaceAllString(clocks.ReplaceAllString(l, "#"), " ") }

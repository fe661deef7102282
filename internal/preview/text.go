package preview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints the report for a human: the checks, the nodes in upgrade
// order with their VMs, the volumes at risk and the estimate.
func WriteText(w io.Writer, r Report) error {
	var b strings.Builder
	verdict := "WOULD RUN"
	if !r.WouldRun {
		verdict = "WOULD NOT RUN: a check failed"
	}
	running := r.RunningVersion
	if running == "" {
		running = "unknown"
	}
	fmt.Fprintf(&b, "Upgrade preview: %s -> %s: %s\n\nCHECKS\n", running, r.Target, verdict)
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "  %-4s  %-11s  %s\n", strings.ToUpper(verdictWord[c.Result]), c.Reason, c.Message)
		if c.Fix != "" {
			fmt.Fprintf(&b, "        %-11s  fix: %s\n", "", c.Fix)
		}
	}
	b.WriteString("\nRISKS (docs/risks.md; accept one by name with spec.acceptRisks)\n")
	if len(r.Risks) == 0 {
		b.WriteString("  none\n")
	}
	for _, k := range r.Risks {
		level := k.Level
		if k.Accepted {
			level += ", accepted"
		}
		fmt.Fprintf(&b, "  %s (%s): %s\n", k.Name, level, k.Message)
	}
	b.WriteString("\nNODES (in upgrade order)\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "  #\tNODE\tROLE\tREADY\tPAUSED\tMIGRATE\tSHUT DOWN\tVOLUMES AT RISK")
	for i, n := range r.Nodes {
		_, _ = fmt.Fprintf(tw, "  %d\t%s\t%s\t%v\t%v\t%d\t%d\t%s\n", i+1, n.Name, n.Role, n.Ready, n.Paused,
			len(n.Migrate), len(n.ShutDown), dash(strings.Join(n.VolumesAtRisk, ",")))
	}
	_ = tw.Flush()
	for _, n := range r.Nodes {
		for _, m := range n.Migrate {
			fmt.Fprintf(&b, "  %s: live-migrate %s to one of: %s\n", n.Name, m.Name, dash(strings.Join(m.Targets, ", ")))
		}
		for _, s := range n.ShutDown {
			after := "stays off (spec.restoreVM is false)"
			if s.Restarted {
				after = "restarted after the node's upgrade (restoreVM)"
			}
			fmt.Fprintf(&b, "  %s: shut down %s, %s: %s\n", n.Name, s.Name, after, s.Reason)
		}
		for _, l := range n.LeftRunning {
			fmt.Fprintf(&b, "  %s: left running %s\n", n.Name, l)
		}
	}
	b.WriteString("\nVOLUMES AT RISK\n")
	if len(r.VolumesAtRisk) == 0 {
		b.WriteString("  none\n")
	}
	for _, v := range r.VolumesAtRisk {
		fmt.Fprintf(&b, "  %s (pvc %s, %d replica(s), %s, node %s): %s\n", v.Name, dash(v.PVC), v.Replicas,
			dash(v.State), dash(v.Node), strings.Join(v.Risks, "; "))
	}
	fmt.Fprintf(&b, "\nESTIMATED DURATION: about %d minutes\n  %s\n\nNOT CHECKED BY THE PREVIEW (the upgrade checks them)\n",
		r.Estimate.Minutes, r.Estimate.Model)
	for _, n := range r.NotChecked {
		fmt.Fprintf(&b, "  - %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

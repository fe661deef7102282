package preview

import (
	"encoding/json"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
)

// verdictWord is how the preview's outputs spell a verdict's result.
var verdictWord = map[v1beta1.CheckResult]string{
	v1beta1.CheckPassed: "pass", v1beta1.CheckWarning: "warn", v1beta1.CheckFailed: "fail", v1beta1.CheckPending: "pending",
}

// checkJSON is a verdict in the report's JSON (`preflight -o json`).
type checkJSON struct {
	Name    string `json:"name"`
	Verdict string `json:"verdict"`
	Message string `json:"message"`
	// Fix says how to make the check pass, when the message does not.
	Fix string `json:"fix,omitempty"`
}

// reportJSON is the report as `preflight -o json` prints it.
type reportJSON struct {
	Target         string      `json:"target"`
	RunningVersion string      `json:"runningVersion,omitempty"`
	WouldRun       bool        `json:"wouldRun"`
	Checks         []checkJSON `json:"checks"`
	Risks          []Risk      `json:"risks"`
	NotChecked     []string    `json:"notChecked"`
	Nodes          []Node      `json:"nodes"`
	VolumesAtRisk  []Volume    `json:"volumesAtRisk"`
	Estimate       Estimate    `json:"estimate"`
}

// MarshalJSON writes the report with each verdict as a checkJSON.
func (r Report) MarshalJSON() ([]byte, error) {
	out := reportJSON{Target: r.Target, RunningVersion: r.RunningVersion, WouldRun: r.WouldRun,
		NotChecked: r.NotChecked, Nodes: r.Nodes, VolumesAtRisk: r.VolumesAtRisk, Estimate: r.Estimate, Risks: r.Risks}
	if out.Risks == nil {
		out.Risks = []Risk{} // "none found", not "not looked at"
	}
	for _, c := range r.Checks {
		out.Checks = append(out.Checks, checkJSON{Name: string(c.Reason), Verdict: verdictWord[c.Result], Message: c.Message, Fix: c.Fix})
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *Report) UnmarshalJSON(b []byte) error {
	var in reportJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*r = Report{Target: in.Target, RunningVersion: in.RunningVersion, WouldRun: in.WouldRun,
		NotChecked: in.NotChecked, Nodes: in.Nodes, VolumesAtRisk: in.VolumesAtRisk, Estimate: in.Estimate, Risks: in.Risks}
	for _, c := range in.Checks {
		v := preflight.Verdict{Reason: preflight.Reason(c.Name), Message: c.Message, Fix: c.Fix}
		for result, word := range verdictWord {
			if word == c.Verdict {
				v.Result = result
			}
		}
		r.Checks = append(r.Checks, v)
	}
	return nil
}

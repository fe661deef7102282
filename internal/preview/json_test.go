package preview

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/harvester/upgrade-toolkit/internal/preflight"
)

// TestReportJSON pins what `preflight -o json` prints of the verdicts and
// the risks, and
// that it reads back.
func TestReportJSON(t *testing.T) {
	fix := preflight.Failed(ReasonEligibility, "unknown")
	fix.Fix = "check Harvester"
	r := Report{Target: "Version harvester-system/v1.8.0", Checks: []preflight.Verdict{
		preflight.Passed(ReasonAdmission, "ready"), preflight.Warning(ReasonAdmission, "careful"), fix,
	}, Risks: []Risk{{Name: "NodeCordoned", Level: "Error", Accepted: true, Objects: []string{"node/n3"}, Message: "node \"n3\" is cordoned"}},
		NotChecked: []string{}, Nodes: []Node{}, VolumesAtRisk: []Volume{}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"target":"Version harvester-system/v1.8.0","wouldRun":false,"checks":[` +
		`{"name":"admission","verdict":"pass","message":"ready"},{"name":"admission","verdict":"warn","message":"careful"},` +
		`{"name":"eligibility","verdict":"fail","message":"unknown","fix":"check Harvester"}],` +
		`"risks":[{"name":"NodeCordoned","level":"Error","accepted":true,"objects":["node/n3"],"message":"node \"n3\" is cordoned"}],` +
		`"notChecked":[],"nodes":[],"volumesAtRisk":[],"estimate":{"minutes":0,"model":""}}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("read back %+v, want %+v", back, r)
	}
}

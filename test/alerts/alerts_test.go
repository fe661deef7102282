// Package alerts_test checks the chart's alert rules with Prometheus's own
// code: the rule file, rendered with the chart's default values, parses and
// validates (rulefmt), and each alert's expression, evaluated by the PromQL
// engine on series shaped as the manager exports them (two replicas
// scraped), fires when it should and not before. That the rules query only
// series the manager exports is test/packaging's TestChartMonitoring.
package alerts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"go.yaml.in/yaml/v3"
)

const chart = "../../charts/upgrade-toolkit"

// rules renders the chart's rule file as Helm's tpl does, with the default
// values.
func rules(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.ParseFiles(filepath.Join(chart, "monitoring/rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, map[string]any{"Values": values}); err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(out.Bytes(), false, model.UTF8Validation, parser.NewParser(parser.Options{}), nil)
	for _, err := range errs {
		t.Errorf("the rule file is invalid: %v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	exprs := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	return exprs
}

// The series, one sample a minute, as two replicas of the manager export
// them (instance a and b): plan p1 stalls in NodeUpgrade, node-2 past its
// estimate from the start, node-3's drain blocked by a budget from minute
// 30 (an Error from minute 40); plan p0 failed; plan p2 runs and moves.
const series = `
load 1m
  upgrade_toolkit_plan_phase{instance="a",plan="p0",phase="Failed"} 1x90
  upgrade_toolkit_plan_phase{instance="b",plan="p0",phase="Failed"} 1x90
  upgrade_toolkit_plan_phase{instance="a",plan="p1",phase="NodeUpgrading"} 1x90
  upgrade_toolkit_plan_seconds_since_progress{instance="a",plan="p1"} 0+60x90
  upgrade_toolkit_plan_seconds_since_progress{instance="b",plan="p1"} 0+60x90
  upgrade_toolkit_plan_seconds_since_progress{instance="a",plan="p2"} 0 60 0 60 0 60 0 60 0 60
  upgrade_toolkit_node_state_seconds{instance="a",plan="p1",node="node-1",state="PostDrained"} 600+60x90
  upgrade_toolkit_node_state_seconds{instance="a",plan="p1",node="node-2",state="WaitingReboot"} 0+60x90
  upgrade_toolkit_node_state_seconds{instance="b",plan="p1",node="node-2",state="WaitingReboot"} 0+60x90
  upgrade_toolkit_node_state_seconds{instance="a",plan="p1",node="node-3",state="ImagePreloaded"} 0+60x90
  upgrade_toolkit_insight_seconds{instance="a",plan="p1",type="Stalled",object="Node/node-2"} 0+60x90
  upgrade_toolkit_insight_seconds{instance="b",plan="p1",type="Stalled",object="Node/node-2"} 0+60x90
  upgrade_toolkit_insight_seconds{instance="a",plan="p1",type="DrainBlockedByPDB",object="Node/node-3"} _x30 0+60x60
  upgrade_toolkit_insight{instance="a",plan="p1",type="DrainBlockedByPDB",level="Warning",impact="UpgradeStalled",object="Node/node-3"} _x30 1x10
  upgrade_toolkit_insight{instance="a",plan="p1",type="DrainBlockedByPDB",level="Error",impact="UpgradeStalled",object="Node/node-3"} _x40 1x50
  upgrade_toolkit_insight{instance="a",plan="p2",type="Stalled",level="Info",impact="UpgradeStalled",object="Node/node-1"} 1x90
`

func TestAlertsFireOnRecordedSeries(t *testing.T) {
	exprs := rules(t)
	tests := []struct {
		alert string
		// evals are promqltest evals of the alert's expression, $EXPR.
		evals string
	}{
		{"HarvesterUpgradeFailed", `
eval instant at 10m $EXPR
  {plan="p0"} 1
`},
		// The default stalledAfterSeconds is 600: p1 has said Stalled for
		// node-2 long enough from its 11th minute; p2 never did.
		{"HarvesterUpgradeStalled", `
eval instant at 9m $EXPR

eval instant at 11m $EXPR
  {plan="p1",object="Node/node-2"} 660
`},
		// node-3's drain is blocked from minute 30; nodeStuckAfterSeconds
		// (300) later it pages.
		{"HarvesterUpgradeNodeStuck", `
eval instant at 34m $EXPR

eval instant at 36m $EXPR
  {plan="p1",type="DrainBlockedByPDB",object="Node/node-3"} 360
`},
		// Only an insight at level Error is critical; p2's Info is not.
		{"HarvesterUpgradeInsightError", `
eval instant at 39m $EXPR

eval instant at 41m $EXPR
  {plan="p1",type="DrainBlockedByPDB",impact="UpgradeStalled",object="Node/node-3"} 1
`},
	}
	for _, tt := range tests {
		t.Run(tt.alert, func(t *testing.T) {
			expr, ok := exprs[tt.alert]
			if !ok {
				t.Fatalf("no alert %s in the rules (%v)", tt.alert, exprs)
			}
			promqltest.RunTest(t, series+strings.ReplaceAll(tt.evals, "$EXPR", expr), promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery))
		})
	}
}

// The dashboard's series beside the alerts': plan p1's node counts by
// state, two finished phases, node upgrade durations and a failure.
const dashboardSeries = `
load 1m
  upgrade_toolkit_plan_nodes{instance="a",plan="p1",state="PostDrained"} 1x90
  upgrade_toolkit_plan_nodes{instance="a",plan="p1",state="ImagePreloaded"} 2x90
  upgrade_toolkit_phase_duration_seconds_sum{instance="a",plan="p1",phase="ImagePreload"} 40x90
  upgrade_toolkit_phase_duration_seconds_count{instance="a",plan="p1",phase="ImagePreload"} 1x90
  upgrade_toolkit_phase_duration_seconds_sum{instance="a",plan="p1",phase="ClusterUpgrade"} 600x90
  upgrade_toolkit_phase_duration_seconds_count{instance="a",plan="p1",phase="ClusterUpgrade"} 1x90
  upgrade_toolkit_node_upgrade_duration_seconds_bucket{instance="a",plan="p1",le="300"} 0x90
  upgrade_toolkit_node_upgrade_duration_seconds_bucket{instance="a",plan="p1",le="900"} 1x90
  upgrade_toolkit_node_upgrade_duration_seconds_bucket{instance="a",plan="p1",le="+Inf"} 1x90
  upgrade_toolkit_failures_total{instance="a",plan="p1",phase="NodeUpgrading",job_type="post-drain"} 0x10 1x80
`

// TestDashboardQueriesOnRecordedSeries: every panel's query of the chart's
// Grafana dashboard parses and, with the plan variable set to one plan,
// returns series from what the manager exports.
func TestDashboardQueriesOnRecordedSeries(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chart, "monitoring/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is no JSON: %v", err)
	}
	storage := promqltest.LoadedStorage(t, series+dashboardSeries)
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	at := time.Unix(0, 0).Add(45 * time.Minute)
	queries := 0
	for _, p := range dash.Panels {
		for _, target := range p.Targets {
			queries++
			// Grafana's multi-value variable becomes a regex of the plans.
			expr := strings.ReplaceAll(target.Expr, "$plan", "p1")
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(expr); err != nil {
				t.Errorf("panel %q: %s does not parse: %v", p.Title, expr, err)
				continue
			}
			q, err := engine.NewInstantQuery(context.Background(), storage, nil, expr, at)
			if err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
				continue
			}
			res := q.Exec(context.Background())
			if res.Err != nil {
				t.Errorf("panel %q: %s: %v", p.Title, expr, res.Err)
			} else if v, ok := res.Value.(promql.Vector); !ok || len(v) == 0 {
				t.Errorf("panel %q: %s returns nothing on the recorded series (%v)", p.Title, expr, res.Value)
			}
			q.Close()
		}
	}
	if queries < 5 {
		t.Errorf("the dashboard has %d queries; want its panels' queries", queries)
	}
}

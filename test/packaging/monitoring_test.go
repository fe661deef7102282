package packaging_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/metrics"
	"github.com/harvester/upgrade-toolkit/internal/pipeline"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// monitoringGroup is Prometheus Operator's API group: its CRDs come from
// its module, as the other upstream CRDs (hack/crdgen).
const monitoringGroup = "monitoring.coreos.com"

// isMonitoring tells an object of Prometheus Operator's kinds.
func isMonitoring(u *unstructured.Unstructured) bool {
	return strings.HasPrefix(u.GetAPIVersion(), monitoringGroup+"/")
}

// ruleFile is a Prometheus rule file, as a PrometheusRule's spec holds it.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// seriesName matches the toolkit's series in a query.
var seriesName = regexp.MustCompile(`\bupgrade_toolkit_[a-z_]+\b`)

// TestChartMonitoring: the ServiceMonitor, the alerts and the dashboard are
// off by default; on, the ServiceMonitor selects the metrics Service by a
// port it has, and the alerts and dashboard query only series the manager
// exports, with label values that exist.
func TestChartMonitoring(t *testing.T) {
	out, err := helmTemplate(t, cluster.HarvesterNamespace, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range decode(t, out) {
		if isMonitoring(u) || u.GetName() == "upgrade-toolkit-dashboard" {
			t.Errorf("the default values install %s", key(u))
		}
	}

	out, err = helmTemplate(t, cluster.HarvesterNamespace, filepath.Join(testenv.RepoRoot(), "test/packaging/testdata/values-monitoring.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, out)
	ns := cluster.HarvesterNamespace
	svc, sm := find(objs, "Service", ns, "upgrade-toolkit-metrics"), find(objs, "ServiceMonitor", ns, "upgrade-toolkit")
	rule, dash := find(objs, "PrometheusRule", ns, "upgrade-toolkit"), find(objs, "ConfigMap", ns, "upgrade-toolkit-dashboard")
	if svc == nil || sm == nil || rule == nil || dash == nil {
		t.Fatalf("want the metrics Service, a ServiceMonitor, a PrometheusRule and the dashboard ConfigMap: %v %v %v %v", svc != nil, sm != nil, rule != nil, dash != nil)
	}

	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if svc.GetLabels()[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service has not (%v)", k, v, svc.GetLabels())
		}
	}
	if other := find(objs, "Service", ns, "upgrade-toolkit-webhook-service"); other != nil && matches(selector, other.GetLabels()) {
		t.Error("the ServiceMonitor also selects the webhook's Service")
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(endpoints) != 1 || !slices.ContainsFunc(ports, func(p any) bool {
		return p.(map[string]any)["name"] == endpoints[0].(map[string]any)["port"]
	}) {
		t.Fatalf("the ServiceMonitor's endpoints %v name no port of the Service %v", endpoints, ports)
	}
	// The deprecated bearerTokenFile is gone: the token of the chart's
	// scraper account, from its Secret, which the account may read with.
	ep := endpoints[0].(map[string]any)
	secret, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
	if _, old := ep["bearerTokenFile"]; old || find(objs, "Secret", ns, secret) == nil {
		t.Errorf("the ServiceMonitor's endpoint authenticates with %v, want authorization from a Secret of the chart", ep)
	}
	if binding := find(objs, "ClusterRoleBinding", "", "upgrade-toolkit-metrics-scraper"); binding == nil {
		t.Error("no ClusterRoleBinding upgrade-toolkit-metrics-scraper: the scraper account cannot read /metrics")
	} else if role, _, _ := unstructured.NestedString(binding.Object, "roleRef", "name"); role != "upgrade-toolkit-metrics-reader" {
		t.Errorf("the scraper account is bound to %q, want upgrade-toolkit-metrics-reader", role)
	}
	// Against Prometheus Operator's own CRDs, on a real API server.
	apply(t, objs)

	exported := metrics.Names()
	checkQuery := func(where, q string) {
		names := seriesName.FindAllString(q, -1)
		if len(names) == 0 {
			t.Errorf("%s queries none of the toolkit's series: %s", where, q)
		}
		for _, n := range names {
			if !slices.Contains(exported, n) {
				t.Errorf("%s queries %s, which the manager does not export (it exports %v)", where, n, exported)
			}
		}
	}
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	raw, _ := json.Marshal(spec)
	var rf ruleFile
	if err := yaml.UnmarshalStrict(raw, &rf); err != nil {
		t.Fatalf("the PrometheusRule's spec is no rule file: %v", err)
	}
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Alert == "" || r.Expr == "" || r.For == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("rule %+v lacks a name, an expression, a for:, a severity, a summary or a description", r)
			}
			checkRunbook(t, r.Alert, r.Annotations["runbook_url"])
			checkQuery("alert "+r.Alert, r.Expr)
			checkLabelValues(t, r.Alert, r.Expr)
		}
	}
	for _, want := range []string{"HarvesterUpgradeFailed", "HarvesterUpgradeStalled", "HarvesterUpgradeNodeStuck", "HarvesterUpgradeInsightError"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
	if s := fmt.Sprint(rf); !strings.Contains(s, "> 1800") {
		t.Errorf("the stalled alert does not take metrics.prometheusRule.stalledAfterSeconds (1800): %s", s)
	}

	if dash.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap is not labelled for Grafana's sidecar: %v", dash.GetLabels())
	}
	data, _, _ := unstructured.NestedStringMap(dash.Object, "data")
	var board struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(data["upgrade-toolkit.json"]), &board); err != nil || len(board.Panels) == 0 {
		t.Fatalf("the dashboard is no Grafana dashboard: %v", err)
	}
	for _, p := range board.Panels {
		for _, tg := range p.Targets {
			checkQuery("panel "+p.Title, tg.Expr)
		}
	}
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// phaseOrState matches the phase and state values an expression selects.
var phaseOrState = regexp.MustCompile(`\b(phase|state)=~?"([^"]+)"`)

// checkLabelValues: the phases and node states an alert selects exist.
func checkLabelValues(t *testing.T, alert, expr string) {
	t.Helper()
	for _, m := range phaseOrState.FindAllStringSubmatch(expr, -1) {
		for _, v := range strings.Split(m[2], "|") {
			ok := false
			if m[1] == "phase" {
				_, inPipeline := pipeline.Locate(v1beta1.UpgradePlanPhase(v))
				ok = inPipeline || v1beta1.UpgradePlanPhase(v).IsTerminal()
			} else {
				ok = slices.Contains(v1beta1.AllNodeStates(), v1beta1.NodeUpgradeState(v))
			}
			if !ok {
				t.Errorf("alert %s selects %s %q, which does not exist", alert, m[1], v)
			}
		}
	}
}

// runbookBase is where the alerts' runbook links point: the docs of this
// repository.
const runbookBase = "https://github.com/harvester/upgrade-toolkit/blob/main/"

// checkRunbook: the alert's runbook_url names a file of the repository and
// a heading of it, as GitHub anchors headings.
func checkRunbook(t *testing.T, alert, url string) {
	t.Helper()
	file, anchor, ok := strings.Cut(strings.TrimPrefix(url, runbookBase), "#")
	if !strings.HasPrefix(url, runbookBase) || !ok {
		t.Errorf("alert %s: runbook_url %q is no link %s<file>#<heading>", alert, url, runbookBase)
		return
	}
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), file))
	if err != nil {
		t.Errorf("alert %s: runbook %s: %v", alert, file, err)
		return
	}
	for line := range strings.SplitSeq(string(doc), "\n") {
		if title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") && headingAnchor(title) == anchor {
			return
		}
	}
	t.Errorf("alert %s: %s has no heading #%s", alert, file, anchor)
}

// headingAnchor is GitHub's anchor of a heading: lower case, spaces to
// dashes, punctuation dropped.
func headingAnchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(title)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/preview"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// TestPreflightCommand runs the preflight command against an API server that
// holds no Harvester cluster: every check that finds nothing fails, so the
// command reports and exits 7, having made only read requests.
func TestPreflightCommand(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kc := kubeconfig(t, env)
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"missing Version", []string{"--version", "v1.8.0"}, 7, "WOULD NOT RUN"},
		{"json", []string{"--version", "v1.8.0", "-o", "json"}, 7, `"wouldRun": false`},
		// No provisioning Cluster here: the risk ClusterNotReady, by name.
		{"a risk by name", []string{"--version", "v1.8.0", "-o", `jsonpath={.risks[?(@.name=="ClusterNotReady")].level}`}, 7, "Error"},
		{"a risk accepted", []string{"--version", "v1.8.0", "--accept-risks", "ClusterNotReady,NodeCordoned",
			"-o", `jsonpath={.risks[?(@.name=="ClusterNotReady")].accepted}`}, 7, "true"},
		{"risks in text", []string{"--version", "v1.8.0"}, 7, "RISKS (docs/risks.md; accept one by name with spec.acceptRisks)\n  ClusterNotReady (Error): provisioning cluster fleet-local/local not found"},
		{"no target", nil, 2, "give exactly one of --version and --image"},
		{"both targets", []string{"--version", "v1.8.0", "--image", "iso"}, 2, "give exactly one of --version and --image"},
		{"bad output", []string{"--version", "v1.8.0", "-o", "table"}, 2, `-o "table": use one of text, json, yaml, go-template`},
		{"bad flag", []string{"--target", "v1.8.0"}, 2, "unknown flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRootCommand()
			var buf bytes.Buffer
			root.SetOut(&buf)
			root.SetErr(&buf)
			root.SetArgs(append([]string{"preflight", "--kubeconfig", kc}, tc.args...))
			err := root.ExecuteContext(t.Context())
			code := 0
			var ee *exitError
			switch {
			case errors.As(err, &ee):
				code = ee.code
			case err != nil:
				code = 1
			}
			out := buf.String()
			if err != nil {
				out += err.Error()
			}
			if code != tc.code || !strings.Contains(out, tc.out) {
				t.Errorf("exit code %d, output %q; want %d and %q", code, out, tc.code, tc.out)
			}
		})
	}

	// Only reads: the request counter sees gets and lists, nothing else.
	counter := apicount.New()
	plan := &v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), RestoreVM: ptr.To(true)}}
	var out bytes.Buffer
	err = runPreflight(t.Context(), counter.Wrap(env.Config), plan, nil, &printers.JSONPrinter{}, &out)
	if ee := (*exitError)(nil); !errors.As(err, &ee) || ee.code != exitCheckFailed {
		t.Errorf("runPreflight: %v, want exit code %d", err, exitCheckFailed)
	}
	var rep preview.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.WouldRun || len(rep.Checks) == 0 {
		t.Errorf("report %s (%v)", out.String(), err)
	}
	seen := counter.Snapshot()
	if len(seen) == 0 {
		t.Fatal("no request counted: the check below proves nothing")
	}
	for k := range seen {
		if !slices.Contains([]string{"get", "list"}, k.Verb) {
			t.Errorf("the preview made a %s request on %s", k.Verb, k.Resource)
		}
	}
}

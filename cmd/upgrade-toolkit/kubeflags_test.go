package main

import (
	"bytes"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// twoContexts writes a kubeconfig of two contexts: "harvester", the test
// API server (its namespace harvester-system), and "elsewhere", the current
// one, an API server that does not answer. A command that honours
// --context reaches the plan; one that ignores it cannot.
func twoContexts(t *testing.T, env *testenv.Env) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "https://" + l.Addr().String()
	_ = l.Close()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["harvester"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.Clusters["elsewhere"] = &clientcmdapi.Cluster{Server: down, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData}
	cfg.Contexts["harvester"] = &clientcmdapi.Context{Cluster: "harvester", AuthInfo: "admin", Namespace: cluster.HarvesterNamespace}
	cfg.Contexts["elsewhere"] = &clientcmdapi.Context{Cluster: "elsewhere", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "elsewhere"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// runCLI runs the binary's command line and returns its exit code and what
// it printed, the error included.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	root := newRootCommand()
	var buf bytes.Buffer
	root.SetOut(&buf)
	root.SetErr(&buf)
	root.SetArgs(args)
	err := root.ExecuteContext(t.Context())
	if err == nil {
		return 0, buf.String()
	}
	return exitCodeOf(err), buf.String() + "error: " + err.Error()
}

// TestCommandsTakeKubectlFlags runs every command that reads a cluster with
// kubectl's flags against a kubeconfig of two contexts: the current one
// does not answer (exit 9), --context reaches the test API server, -n
// takes only harvester-system, --as is the user the server authorizes, and
// -o prints what kubectl's printers print.
func TestCommandsTakeKubectlFlags(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kc := twoContexts(t, env)
	plan := jobtest.Plan(t, env.Client, nil).Name
	ul := &v1beta1.UpgradeLog{ObjectMeta: metav1.ObjectMeta{Name: plan}, Spec: v1beta1.UpgradeLogSpec{UpgradePlan: plan}}
	if err := env.Client.Create(t.Context(), ul); err != nil {
		t.Fatal(err)
	}

	commands := []struct {
		name string
		args []string
		code int    // on the context "harvester"
		out  string // what it prints there
	}{
		{"status", []string{"status", plan}, 0, "hvst-upgrade"},
		{"preflight", []string{"preflight", "--version", "v1.8.0"}, exitCheckFailed, "WOULD NOT RUN"},
		{"logs", []string{"logs", plan}, 0, "UpgradeLog " + plan + ": 0 log(s)"},
		{"images", []string{"images", "--version", "v1.8.0"}, exitFailure, "reading Version harvester-system/v1.8.0"},
	}
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			for _, tc := range []struct {
				name  string
				flags []string
				code  int
				out   string
			}{
				{"current context", nil, exitUnreachable, "connect: connection refused"},
				{"--context", []string{"--context", "harvester"}, c.code, c.out},
				{"-n harvester-system", []string{"--context", "harvester", "-n", cluster.HarvesterNamespace}, c.code, c.out},
				{"--namespace harvester-system on the other context", []string{"--context", "elsewhere", "--namespace", cluster.HarvesterNamespace}, exitUnreachable, "connection refused"},
				{"-n default", []string{"--context", "harvester", "-n", "default"}, usageExitCode, `-n "default": UpgradePlans and UpgradeLogs are cluster-scoped`},
				{"--as a user with no rights", []string{"--context", "harvester", "--as", "nobody"}, exitUnreachable, `User "nobody" cannot`},
				{"--request-timeout", []string{"--context", "harvester", "--request-timeout", "1x"}, usageExitCode, `--request-timeout "1x": give a duration`},
				{"an unknown context", []string{"--context", "prod"}, exitUnreachable, `context "prod" does not exist`},
			} {
				code, out := runCLI(t, append(append(c.args, "--kubeconfig", kc), tc.flags...)...)
				if code != tc.code || !strings.Contains(out, tc.out) {
					t.Errorf("%s: exit code %d, output:\n%s\nwant exit code %d and %q", tc.name, code, out, tc.code, tc.out)
				}
			}
		})
	}

	// -o, as kubectl prints: each command's data by jsonpath, template and
	// columns; name where the command shows one object.
	on := []string{"--kubeconfig", kc, "--context", "harvester"}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", plan, "-o", "name"}, 0, "upgradeplan.management.harvesterhci.io/" + plan + "\n"},
		{[]string{"status", plan, "-o", "jsonpath={.plan} {.from}->{.to}"}, 0, plan + " v1.7.1->v1.8.0"},
		{[]string{"status", plan, "-o", "go-template={{.plan}}"}, 0, plan},
		{[]string{"status", plan, "-o", "custom-columns=PLAN:.plan,FROM:.from,LEFT:.estimate.left"}, 0,
			"PLAN" + strings.Repeat(" ", len(plan)-1) + "FROM     LEFT\n" + plan + "   v1.7.1   <none>\n"},
		{[]string{"status", plan, "-o", "yaml"}, 0, "plan: " + plan + "\n"},
		{[]string{"status", plan, "-o", "json"}, 0, `"plan": "` + plan + `"`},
		{[]string{"status", plan, "-o", "custom-columns=PLAN"}, usageExitCode, `"PLAN" is not HEADER:.path`},
		{[]string{"status", plan, "-o", "wide"}, usageExitCode, `-o "wide": use one of json, yaml, name, go-template`},
		{[]string{"status", plan, "-o", "json", "--watch"}, usageExitCode, "--watch shows the text view"},
		{[]string{"preflight", "--version", "v1.8.0", "-o", "jsonpath={.wouldRun}"}, exitCheckFailed, "false"},
		{[]string{"preflight", "--version", "v1.8.0", "-o", "yaml"}, exitCheckFailed, "wouldRun: false"},
		{[]string{"preflight", "--version", "v1.8.0", "-o", "name"}, usageExitCode, `-o "name": use one of text, json, yaml, go-template`},
		{[]string{"logs", plan, "-o", "name"}, 0, "upgradelog.management.harvesterhci.io/" + plan + "\n"},
		{[]string{"logs", plan, "-o", "jsonpath={.kind} {.spec.upgradePlan}"}, 0, "UpgradeLog " + plan},
		{[]string{"logs", plan, "-o", "custom-columns=PLAN:.spec.upgradePlan"}, 0, "PLAN\n" + plan + "\n"},
		{[]string{"logs", plan, "-o", "json", "--node", "node-1"}, usageExitCode, "-o prints the list of logs"},
	} {
		code, out := runCLI(t, append(tc.args, on...)...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit code %d, output:\n%s\nwant exit code %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
	// -o name names the object only.
	if _, out := runCLI(t, append([]string{"status", plan, "-o", "name"}, on...)...); strings.Count(out, "\n") != 1 {
		t.Errorf("-o name printed more than the name:\n%s", out)
	}
}

// TestRequestTimeout: --request-timeout bounds each request, and a request
// that runs out is a cluster that did not answer (exit 9).
func TestRequestTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() { // accepts and never answers
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			defer func() { _ = conn.Close() }()
		}
	}()
	start := time.Now()
	code, out := runCLI(t, "status", "--server", "https://"+l.Addr().String(), "--insecure-skip-tls-verify", "--request-timeout", "1s")
	if code != exitUnreachable || time.Since(start) > 20*time.Second {
		t.Errorf("exit code %d after %s, output:\n%s\nwant exit code %d within the timeout", code, time.Since(start), out, exitUnreachable)
	}
}

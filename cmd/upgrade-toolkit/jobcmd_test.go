package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/jobspec"
	"github.com/harvester/upgrade-toolkit/internal/jobtest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// kubeconfig writes a kubeconfig for a test API server.
func kubeconfig(t *testing.T, env *testenv.Env) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	cfg.CurrentContext = "test"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// run runs the binary's command line and returns its exit code, output and
// termination message.
func run(t *testing.T, env map[string]string, args ...string) (code int, out, termination string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(termLog, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	root := newRootCommand()
	var buf bytes.Buffer
	root.SetOut(&buf)
	root.SetErr(&buf)
	root.SetArgs(append(args, "--termination-log", termLog))
	err := root.ExecuteContext(t.Context())
	msg, _ := os.ReadFile(termLog)
	var ee *exitError
	switch {
	case err == nil:
		return 0, buf.String(), string(msg)
	case errors.As(err, &ee):
		return ee.code, buf.String() + err.Error(), string(msg)
	}
	return 1, buf.String() + err.Error(), string(msg)
}

// TestJobCommands runs the job commands as their containers do, against a
// real API server, and checks exit codes and termination messages.
func TestJobCommands(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kc := kubeconfig(t, env)
	eligible := jobtest.Plan(t, env.Client, nil)
	downgrade := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) { p.Status.PreviousVersion = ptr.To("v1.9.0") })
	forced := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) {
		p.Status.PreviousVersion = ptr.To("v1.9.0")
		p.Spec.Force = ptr.To(true)
	})
	unknown := jobtest.Plan(t, env.Client, func(p *v1beta1.UpgradePlan) { p.Status.ReleaseMetadata = nil })

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		out  string
	}{
		{"eligible", nil, []string{"version-guard", eligible.Name}, 0, "may upgrade the cluster from v1.7.1 to v1.8.0"},
		{"downgrade", nil, []string{"version-guard", downgrade.Name}, 10, "downgrade"},
		{"forced", nil, []string{"version-guard", forced.Name}, 0, "spec.force is set"},
		{"not populated yet", nil, []string{"version-guard", unknown.Name}, 3, "cannot be checked"},
		{"no such plan", nil, []string{"version-guard", "nope"}, 1, "UpgradePlan nope not found"},
		{"no plan named", nil, []string{"version-guard"}, 2, "accepts 1 arg"},
		{"shutdown without a plan", nil, []string{"vm-live-migrate-detector", "n1", "--shutdown"}, 2, "--shutdown needs --upgrade"},
		{"restore without a node", nil, []string{"restore-vm", "--upgrade", "p"}, 2, "--node and --upgrade are required"},
		{"node job without its plan", map[string]string{"HARVESTER_UPGRADEPLAN_NAME": "", "HARVESTER_UPGRADE_NODE_NAME": "n1"},
			[]string{"node", "prepare"}, 2, "HARVESTER_UPGRADEPLAN_NAME is not set"},
		{"prepare of an ineligible plan", map[string]string{"HARVESTER_UPGRADEPLAN_NAME": downgrade.Name, "HARVESTER_UPGRADE_NODE_NAME": "n1"},
			[]string{"node", "prepare"}, 10, `step "check the upgrade eligibility"`},
		{"cluster-upgrade without its plan", map[string]string{"HARVESTER_UPGRADEPLAN_NAME": ""}, []string{"cluster-upgrade"}, 2, "HARVESTER_UPGRADEPLAN_NAME is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, msg := run(t, tc.env, append(tc.args, "--kubeconfig", kc)...)
			if code != tc.code || !strings.Contains(out, tc.out) {
				t.Errorf("exit code %d, output %q; want %d and %q", code, out, tc.code, tc.out)
			}
			if code > 2 && !strings.Contains(msg, tc.out) {
				t.Errorf("termination message %q lacks %q", msg, tc.out)
			}
		})
	}
}

// TestJobCommandHelp: every job command documents itself and its exit codes.
func TestJobCommandHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"version-guard"}, []string{"spec.force", "10  not eligible: the target release is older", "3   the plan does not record"}},
		{[]string{"vm-live-migrate-detector"}, []string{"<PLAN>-restore-vm", "restore-run-strategy", "5   some VMs could not be stopped"}},
		{[]string{"restore-vm"}, []string{"--kubevirt-timeout", "4   a wait gave up", "6   some VMs could not be started"}},
		{[]string{"node", "pre-drain"}, []string{"HARVESTER_UPGRADE_NODE_NAME", "SYSTEM_UPGRADE_NODE_NAME", "kubevirt.io/drain=draining:NoSchedule", "5   some VMs"}},
		{[]string{"node", "prepare"}, []string{"spec.force", "11  not eligible"}},
		{[]string{"node", "post-drain"}, []string{"HARVESTER_UPGRADE_POD_NAME", "elemental"}},
		{[]string{"node", "single-node-upgrade"}, []string{"kubernetesVersion"}},
		{[]string{"node", "image-cleanup"}, []string{"SYSTEM_UPGRADE_NODE_NAME"}},
		{[]string{"cluster-upgrade"}, []string{"<plan>-cluster-upgrade", "resume-charts", "HARVESTER_UPGRADEPLAN_NAME"}},
	} {
		root := newRootCommand()
		var buf bytes.Buffer
		root.SetOut(&buf)
		root.SetArgs(append(tc.args, "--help"))
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("%v --help lacks %q", tc.args, w)
			}
		}
	}
}

// TestTheJobsCommandLinesAreCommands: every command line the manager gives
// a Job (jobspec) names a command of this binary, with flags it takes.
func TestTheJobsCommandLinesAreCommands(t *testing.T) {
	lines := [][]string{jobspec.ClusterUpgradeCommand(), jobspec.RestoreVMCommand("node-1", "plan")}
	for _, jt := range jobspec.NodeTypes {
		lines = append(lines, jobspec.NodeCommand(jt))
	}
	for _, line := range lines {
		if line[0] != jobspec.Program {
			t.Errorf("%v does not run %s", line, jobspec.Program)
			continue
		}
		cmd, rest, err := newRootCommand().Find(line[1:])
		if err != nil {
			t.Errorf("%v: %v", line, err)
			continue
		}
		if cmd.RunE == nil {
			t.Errorf("%v finds %q, which runs nothing", line, cmd.CommandPath())
			continue
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%v: %s does not take its flags: %v", line, cmd.CommandPath(), err)
		}
		if args := cmd.Flags().Args(); len(args) > 0 {
			t.Errorf("%v: %s is left with arguments %v", line, cmd.CommandPath(), args)
		}
	}
}

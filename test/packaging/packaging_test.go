// Package packaging_test checks what operators install: the Helm chart
// (charts/upgrade-toolkit) and the installer manifests (config/default, as
// `make build-installer` writes dist/install.yaml). Every rendered object is
// applied to a real API server, the CRDs for real and everything else with a
// server-side dry run, so that the API server validates each one; the
// manager's pod must pass the "restricted" Pod Security Standard; the chart
// must carry the generated CRD, roles and webhook configuration unchanged and
// install the same objects as the installer; both must bind every role and
// render the same output twice.
//
// helm and kustomize come from $HELM and $KUSTOMIZE (`make test` builds them
// into bin/ and sets both).
package packaging_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
	"github.com/harvester/upgrade-toolkit/internal/webhook"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, &env)) }

const (
	chartDir  = "charts/upgrade-toolkit"
	release   = "upgrade-toolkit"
	image     = "registry.example.com/harvester-upgrade-toolkit"
	imageTag  = "v1.8.0-test"
	managerSA = "upgrade-toolkit"
)

// tool returns the path of helm or kustomize from its environment variable.
func tool(t *testing.T, variable string) string {
	t.Helper()
	path := os.Getenv(variable)
	if path == "" {
		t.Fatalf("$%s is not set: run the tests with `make test`, which builds helm and kustomize into bin/ and sets $HELM and $KUSTOMIZE", variable)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("$%s: %v; `make helm kustomize` builds them into bin/", variable, err)
	}
	return path
}

// run runs a command in the repository's root and returns its stdout.
func run(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = testenv.RepoRoot()
	// helm keeps its configuration and cache out of $HOME.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// helmTemplate renders the chart with a values file ("" for the defaults)
// in a namespace, as `helm install` would.
func helmTemplate(t *testing.T, namespace, values string) ([]byte, error) {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", namespace, "--include-crds",
		"--kube-version", testenv.K8sVersion, "--set", "image.repository=" + image, "--set", "image.tag=" + imageTag}
	if values != "" {
		args = append(args, "--values", values)
	}
	return run(t, tool(t, "HELM"), args...)
}

// installer renders config/default as `make build-installer` does.
func installer(t *testing.T) []byte {
	t.Helper()
	out, err := run(t, "hack/kustomize-build.sh", tool(t, "KUSTOMIZE"), image+":"+imageTag)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// valuesFiles are the non-default values the chart is tested with.
func valuesFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "test/packaging/testdata/values-*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values files in test/packaging/testdata: %v", err)
	}
	return slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "values-invalid.yaml") })
}

func TestChartLints(t *testing.T) {
	for _, values := range append([]string{""}, valuesFiles(t)...) {
		args := []string{"lint", chartDir, "--strict", "--namespace", cluster.HarvesterNamespace, "--kube-version", testenv.K8sVersion}
		if values != "" {
			args = append(args, "--values", values)
		}
		if out, err := run(t, tool(t, "HELM"), args...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// TestChartInstalls applies the chart, with its default and with other
// values, to the API server.
func TestChartInstalls(t *testing.T) {
	for _, values := range append([]string{""}, valuesFiles(t)...) {
		name := "default values"
		if values != "" {
			name = filepath.Base(values)
		}
		t.Run(name, func(t *testing.T) {
			out, err := helmTemplate(t, cluster.HarvesterNamespace, values)
			if err != nil {
				t.Fatal(err)
			}
			again, err := helmTemplate(t, cluster.HarvesterNamespace, values)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, again) {
				t.Error("helm template renders differently the second time")
			}
			objs := decode(t, out)
			apply(t, objs)
			checkBindings(t, objs)
			checkManagerPod(t, objs)
		})
	}
}

func TestInstallerInstalls(t *testing.T) {
	out := installer(t)
	if again := installer(t); !bytes.Equal(out, again) {
		t.Error("the installer renders differently the second time")
	}
	objs := decode(t, out)
	apply(t, objs)
	checkBindings(t, objs)
	checkManagerPod(t, objs)
	for _, want := range []struct{ kind, namespace, name string }{
		{"ValidatingWebhookConfiguration", "", webhook.DefaultConfigurationName},
		{"Service", cluster.HarvesterNamespace, webhook.DefaultServiceName},
		{"Secret", cluster.HarvesterNamespace, webhook.CertSecretName},
		{"ServiceAccount", cluster.HarvesterNamespace, managerSA},
	} {
		if find(objs, want.kind, want.namespace, want.name) == nil {
			t.Errorf("the installer has no %s %s/%s, which the manager's flags name by default", want.kind, want.namespace, want.name)
		}
	}
	vwc := find(objs, "ValidatingWebhookConfiguration", "", webhook.DefaultConfigurationName)
	if vwc != nil && strings.Contains(fmt.Sprint(vwc.Object), "caBundle") {
		t.Error("the webhook configuration has a caBundle: the manager writes its own")
	}
}

// TestChartInstallsWhatTheInstallerInstalls: with its default values the
// chart makes the same objects as the installer, but for their labels and
// annotations.
func TestChartInstallsWhatTheInstallerInstalls(t *testing.T) {
	out, err := helmTemplate(t, cluster.HarvesterNamespace, "")
	if err != nil {
		t.Fatal(err)
	}
	chart, inst := index(decode(t, out)), index(decode(t, installer(t)))
	for k, c := range chart {
		i, ok := inst[k]
		if !ok {
			t.Errorf("the chart has %s, the installer has not", k)
			continue
		}
		if !apiequality.Semantic.DeepEqual(c, i) {
			t.Errorf("%s differs between the chart and the installer:\nchart:     %v\ninstaller: %v", k, c, i)
		}
	}
	for k := range inst {
		if _, ok := chart[k]; !ok {
			t.Errorf("the installer has %s, the chart has not", k)
		}
	}
}

// TestChartCarriesTheGeneratedFiles: the chart's CRD, roles and webhook
// configuration are those `make manifests` generated under config/.
func TestChartCarriesTheGeneratedFiles(t *testing.T) {
	root := testenv.RepoRoot()
	crds := crdFiles(t, root)
	pairs := map[string]string{
		"config/webhook/manifests.yaml":        chartDir + "/files/webhook/manifests.yaml",
		"config/rbac/manager_role.yaml":        chartDir + "/files/rbac/manager_role.yaml",
		"config/rbac/webhook_role.yaml":        chartDir + "/files/rbac/webhook_role.yaml",
		"config/rbac/metrics_auth_role.yaml":   chartDir + "/files/rbac/metrics_auth_role.yaml",
		"config/rbac/metrics_reader_role.yaml": chartDir + "/files/rbac/metrics_reader_role.yaml",
		"config/rbac/job_role.yaml":            chartDir + "/files/rbac/job_role.yaml",
		"config/rbac/upgrade_log_role.yaml":    chartDir + "/files/rbac/upgrade_log_role.yaml",
	}
	for _, crd := range crds {
		pairs["config/crd/bases/"+crd] = chartDir + "/crds/" + crd
	}
	for generated, copied := range pairs {
		want, err := os.ReadFile(filepath.Join(root, generated))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, copied))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not a copy of %s (%v): run `make manifests`", copied, generated, err)
		}
	}
	inChart, err := filepath.Glob(filepath.Join(root, chartDir, "crds", "*.yaml"))
	if err != nil || len(inChart) != len(crds) {
		t.Errorf("the chart's crds/ holds %d files, want the %d generated CRDs (%v)", len(inChart), len(crds), err)
	}
}

// crdFiles are the generated CRDs: UpgradePlan and UpgradeLog.
func crdFiles(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "config/crd/bases/*.yaml"))
	if err != nil || len(files) != 2 {
		t.Fatalf("config/crd/bases holds %d CRDs, want 2 (UpgradePlan, UpgradeLog): %v", len(files), err)
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	return files
}

func TestChartRefusesAnotherNamespace(t *testing.T) {
	_, err := helmTemplate(t, "upgrades", "")
	if err == nil || !strings.Contains(err.Error(), "use --namespace harvester-system") {
		t.Errorf("installing into another namespace: %v, want a refusal that names harvester-system", err)
	}
}

func TestChartRefusesInvalidValues(t *testing.T) {
	_, err := helmTemplate(t, cluster.HarvesterNamespace, filepath.Join(testenv.RepoRoot(), "test/packaging/testdata/values-invalid.yaml"))
	if err == nil || !strings.Contains(err.Error(), "replicas") || !strings.Contains(err.Error(), "webhok") || !strings.Contains(err.Error(), "retryWindow") {
		t.Errorf("invalid values: %v, want the schema to refuse replicas, webhok and retryWindow", err)
	}
}

// decode reads a multi-document YAML stream.
func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding the manifests: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	if len(objs) == 0 {
		t.Fatal("no object rendered")
	}
	return objs
}

func key(u *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
}

func find(objs []*unstructured.Unstructured, kind, namespace, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetNamespace() == namespace && u.GetName() == name {
			return u
		}
	}
	return nil
}

// index maps the objects by kind, namespace and name, without their labels
// and annotations.
func index(objs []*unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, u := range objs {
		c := u.DeepCopy()
		c.SetLabels(nil)
		c.SetAnnotations(nil)
		out[key(c)] = c.Object
	}
	return out
}

// apply applies the CRDs for real and everything else with a server-side
// dry run, so that the API server validates each object.
func apply(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crdsFirst := slices.Clone(objs)
	slices.SortStableFunc(crdsFirst, func(a, b *unstructured.Unstructured) int {
		return boolRank(b.GetKind() == "CustomResourceDefinition") - boolRank(a.GetKind() == "CustomResourceDefinition")
	})
	for _, u := range crdsFirst {
		opts := []client.PatchOption{client.FieldOwner("packaging-test"), client.ForceOwnership}
		if u.GetKind() != "CustomResourceDefinition" {
			opts = append(opts, client.DryRunAll)
		}
		if err := env.Client.Patch(ctx, u.DeepCopy(), client.Apply, opts...); err != nil {
			t.Errorf("the API server refuses %s: %v", key(u), err)
		}
	}
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkBindings checks that every role is bound to a service account the
// manifests create (or, for the metrics reader, to the scrapers), and that
// every binding's role is there.
func checkBindings(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	bound := map[string]bool{}
	for _, b := range objs {
		if b.GetKind() != "RoleBinding" && b.GetKind() != "ClusterRoleBinding" {
			continue
		}
		refKind, _, _ := unstructured.NestedString(b.Object, "roleRef", "kind")
		refName, _, _ := unstructured.NestedString(b.Object, "roleRef", "name")
		ns := ""
		if refKind == "Role" {
			ns = b.GetNamespace()
		}
		if find(objs, refKind, ns, refName) == nil && refName != "cluster-admin" {
			t.Errorf("%s binds %s %s, which the manifests do not create", key(b), refKind, refName)
		}
		bound[refKind+" "+ns+"/"+refName] = true
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		for _, s := range subjects {
			sub, _ := s.(map[string]any)
			name, _ := sub["name"].(string)
			namespace, _ := sub["namespace"].(string)
			if refName != "upgrade-toolkit-metrics-reader" && find(objs, "ServiceAccount", namespace, name) == nil {
				t.Errorf("%s binds ServiceAccount %s/%s, which the manifests do not create", key(b), namespace, name)
			}
		}
	}
	for _, r := range objs {
		if (r.GetKind() == "Role" || r.GetKind() == "ClusterRole") && r.GetName() != "upgrade-toolkit-metrics-reader" &&
			!bound[r.GetKind()+" "+r.GetNamespace()+"/"+r.GetName()] {
			t.Errorf("%s is bound to no one: add its binding", key(r))
		}
	}
}

// checkManagerPod checks the manager's pod: it must be admitted in a
// namespace that enforces the "restricted" Pod Security Standard, while the
// same pod without its security settings is refused there; and it must learn
// its namespace from the downward API.
func checkManagerPod(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dep := find(objs, "Deployment", cluster.HarvesterNamespace, "upgrade-toolkit-manager")
	if dep == nil {
		t.Fatal("no Deployment upgrade-toolkit-manager in harvester-system")
	}
	tmpl, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec")
	spec := corev1.PodSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &spec); err != nil {
		t.Fatal(err)
	}
	const restricted = "restricted-pods"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restricted, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
	if err := env.Client.Create(ctx, ns); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: restricted, Name: "manager"}, Spec: spec}
	pod.Spec.ServiceAccountName = "" // the dry run needs no account
	if err := env.Client.Create(ctx, pod.DeepCopy(), client.DryRunAll); err != nil {
		t.Errorf("the manager's pod breaks the restricted Pod Security Standard: %v", err)
	}
	loose := pod.DeepCopy()
	loose.Spec.SecurityContext = nil
	for i := range loose.Spec.Containers {
		loose.Spec.Containers[i].SecurityContext = nil
	}
	if err := env.Client.Create(ctx, loose, client.DryRunAll); err == nil {
		t.Error("a pod without security settings is admitted: the namespace does not enforce the restricted standard, so the check above proves nothing")
	}
	var downward bool
	for _, e := range spec.Containers[0].Env {
		if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			downward = true
		}
	}
	if !downward {
		t.Error("the manager does not get POD_NAMESPACE from the downward API")
	}
}

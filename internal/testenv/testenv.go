// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with the UpgradePlan CRD and the foreign-kind CRD fixtures
// installed: the control plane of the integration and end-to-end tests, the
// benchmarks and the demo.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/config/crd"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/test/crds"
)

// K8sVersion is the Kubernetes version of the envtest binaries; the
// Makefile's ENVTEST_K8S_VERSION must match.
const K8sVersion = "1.34.4"

// Env is a running API server.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a direct (uncached) client with the toolkit's scheme.
	Client client.Client
	// Scheme registers the built-in, UpgradePlan and foreign kinds.
	Scheme *k8sruntime.Scheme

	env *envtest.Environment
}

// RepoRoot returns the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// AssetsDir returns where the etcd and kube-apiserver binaries are:
// $KUBEBUILDER_ASSETS, else the directory `make envtest` fills, found from
// the source tree (tests) or the working directory (the demo binary).
func AssetsDir() (string, error) {
	candidates := []string{os.Getenv("KUBEBUILDER_ASSETS")}
	if candidates[0] == "" {
		rel := filepath.Join("bin", "envtest", "k8s", fmt.Sprintf("%s-%s-%s", K8sVersion, runtime.GOOS, runtime.GOARCH))
		candidates = []string{filepath.Join(RepoRoot(), rel), rel}
	}
	for _, dir := range candidates {
		if hasBinaries(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("etcd and kube-apiserver not found in %s: run `make envtest` (or set KUBEBUILDER_ASSETS)", strings.Join(candidates, " or "))
}

func hasBinaries(dir string) bool {
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return false
		}
	}
	return true
}

// CRDs returns the CRDs installed into every API server: the toolkit's own
// and the foreign-kind fixtures, as `make manifests` generated them.
func CRDs() ([]*apiextv1.CustomResourceDefinition, error) {
	var out []*apiextv1.CustomResourceDefinition
	for _, fsys := range []fs.FS{crd.Bases, crds.Files} {
		err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
				return err
			}
			data, err := fs.ReadFile(fsys, path)
			if err != nil {
				return err
			}
			c := &apiextv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(data, c); err != nil {
				return fmt.Errorf("reading CRD %s: %w", path, err)
			}
			out = append(out, c)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Namespaces the toolkit works in; created in every test API server.
var Namespaces = []string{
	cluster.HarvesterNamespace, cluster.CattleNamespace, cluster.FleetLocalNamespace,
	cluster.LonghornNamespace, cluster.KubeSystemNamespace,
	cluster.FleetSystemNamespace, cluster.FleetLocalSystemNamespace, cluster.MonitoringNamespace, cluster.LoggingNamespace,
}

// Start starts an API server, installs the CRDs and creates the namespaces.
func Start() (*Env, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	scheme := cluster.NewScheme()
	// Tests inspect the installed CRDs too.
	if err := apiextv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	defs, err := CRDs()
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDs:                  defs,
		Scheme:                scheme,
	}
	// The API server publishes the host's address in the default/kubernetes
	// EndpointSlice (never a loopback one); listen there too, so that what
	// reads the slice, like the certificate check, can reach it.
	te.ControlPlane.GetAPIServer().Configure().Set("bind-address", "0.0.0.0").
		// As strict clusters do: an owner reference that blocks the owner's
		// deletion takes update on the owner's finalizers (see
		// internal/rbactest).
		Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e := &Env{Config: cfg, Scheme: scheme, env: te}
	// Client-side throttling only slows tests down; the server is ours.
	cfg.QPS, cfg.Burst = 1000, 2000
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, errors.Join(err, te.Stop())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ns := range Namespaces {
		err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, errors.Join(fmt.Errorf("creating namespace %s: %w", ns, err), te.Stop())
		}
	}
	return e, nil
}

// Stop stops the API server.
func (e *Env) Stop() error {
	return e.env.Stop()
}

// RunMain starts an API server for a package's tests, runs them and stops
// it. Use it from TestMain: os.Exit(testenv.RunMain(m, &env)).
func RunMain(m interface{ Run() int }, env **Env) int {
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: stopping:", err)
	}
	return code
}

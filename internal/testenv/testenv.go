// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with the UpgradePlan CRD and the foreign-kind CRD fixtures
// installed, for integration and end-to-end tests.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
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
// $KUBEBUILDER_ASSETS, else the directory `make envtest` fills.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin", "envtest", "k8s", fmt.Sprintf("%s-%s-%s", K8sVersion, runtime.GOOS, runtime.GOARCH))
	}
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("envtest binary %s not found in %s: run `make envtest` (or set KUBEBUILDER_ASSETS)", bin, dir)
		}
	}
	return dir, nil
}

// CRDDirs are the directories of CRDs installed into every test API server.
func CRDDirs() []string {
	root := RepoRoot()
	return []string{filepath.Join(root, "config", "crd", "bases"), filepath.Join(root, "test", "crds")}
}

// Namespaces the toolkit works in; created in every test API server.
var Namespaces = []string{
	cluster.HarvesterNamespace, cluster.CattleNamespace, cluster.FleetLocalNamespace,
	cluster.LonghornNamespace, cluster.KubeSystemNamespace,
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
	te := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     CRDDirs(),
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	// The API server publishes the host's address in the default/kubernetes
	// EndpointSlice (never a loopback one); listen there too, so that what
	// reads the slice, like the certificate check, can reach it.
	te.ControlPlane.GetAPIServer().Configure().Set("bind-address", "0.0.0.0")
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

// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with the UpgradePlan CRD and the real upstream CRDs of the foreign
// kinds installed (`make upstream-crds`, hack/crdgen): the control plane of
// the integration and end-to-end tests, the benchmarks and the demo. With
// Options it also runs the real kube-controller-manager and kube-scheduler,
// and kwok for the nodes (world.go), all in a network namespace of the
// world's own (netns.go).
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
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
	// UnknownFields are the fields clients of Config wrote that the
	// schemas do not have.
	UnknownFields *FieldWarnings

	env   *envtest.Environment
	world *world
}

// RepoRoot returns the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// platformDir is the directory name of the K8sVersion binaries of this
// platform, in the layout of hack/build-envtest-bins.sh.
func platformDir() string {
	return fmt.Sprintf("%s-%s-%s", K8sVersion, runtime.GOOS, runtime.GOARCH)
}

// findDir returns the first of $envVar and the directory rel under bin/,
// found from the source tree (tests) or the working directory (the demo
// binary), that has every one of files; or an error that says which make
// target provides them.
func findDir(envVar, rel, target string, files ...string) (string, error) {
	candidates := []string{os.Getenv(envVar)}
	if candidates[0] == "" {
		rel = filepath.Join("bin", rel)
		candidates = []string{filepath.Join(RepoRoot(), rel), rel}
	}
	for _, dir := range candidates {
		if hasFiles(dir, files) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s: run `make %s` (or set %s)", strings.Join(files, " and "), strings.Join(candidates, " or "), target, envVar)
}

func hasFiles(dir string, files []string) bool {
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// AssetsDir returns where the etcd and kube-apiserver binaries are:
// $KUBEBUILDER_ASSETS, else the directory `make envtest` fills.
func AssetsDir() (string, error) {
	return findDir("KUBEBUILDER_ASSETS", filepath.Join("envtest", "k8s", platformDir()), "envtest", "etcd", "kube-apiserver")
}

// UpstreamCRDsDir returns where the real upstream CRDs of the foreign kinds
// are: $UPSTREAM_CRDS, else the directory `make upstream-crds` fills.
func UpstreamCRDsDir() (string, error) {
	return findDir("UPSTREAM_CRDS", "upstream-crds", "upstream-crds", ".stamp")
}

// CRDs returns the CRDs installed into every API server: the toolkit's own,
// as `make manifests` generated them, and the real upstream CRDs of the
// foreign kinds.
func CRDs() ([]*apiextv1.CustomResourceDefinition, error) {
	upstream, err := UpstreamCRDsDir()
	if err != nil {
		return nil, err
	}
	var out []*apiextv1.CustomResourceDefinition
	for _, fsys := range []fs.FS{crd.Bases, os.DirFS(upstream)} {
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

// Options choose what runs beside the API server.
type Options struct {
	// Controllers runs the real kube-controller-manager and kube-scheduler
	// (world.go). The API server then admits pods only for service
	// accounts that exist, as a real one does.
	Controllers bool
	// Kwok runs kwok for the nodes it selects (world.go).
	Kwok *KwokOptions
}

// Start starts an API server, installs the CRDs and creates the namespaces.
func Start() (*Env, error) { return StartWith(Options{}) }

// StartWith starts an API server with what opts asks for beside it.
func StartWith(opts Options) (e *Env, err error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	// Shared by every test of the process, and read while they run: never
	// registered into here (it holds the CRDs' kind, which tests inspect).
	scheme := cluster.Scheme()
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
	args := te.ControlPlane.GetAPIServer().Configure().Set("bind-address", "0.0.0.0").
		// As strict clusters do: an owner reference that blocks the owner's
		// deletion takes update on the owner's finalizers (see
		// internal/rbactest).
		Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	if opts.Controllers {
		// envtest turns the ServiceAccount admission off because nothing
		// creates the namespaces' default service accounts; the real
		// controller manager does.
		args.Disable("disable-admission-plugins")
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e = &Env{Config: cfg, Scheme: scheme, env: te, UnknownFields: &FieldWarnings{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Stop())
		}
	}()
	// Client-side throttling only slows tests down; the server is ours.
	cfg.QPS, cfg.Burst = 1000, 2000
	// Every client made from this config reports the fields the API server
	// dropped because the real schema does not have them.
	cfg.WarningHandler = e.UnknownFields
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return e, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, ns := range Namespaces {
		err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return e, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	if opts.Controllers || opts.Kwok != nil {
		if e.world, err = startWorld(ctx, te, opts); err != nil {
			return e, err
		}
	}
	return e, nil
}

// Stop stops what runs beside the API server, then the API server.
func (e *Env) Stop() error {
	var errs []error
	if e.world != nil {
		errs = append(errs, e.world.stop())
	}
	return errors.Join(append(errs, e.env.Stop())...)
}

// FieldWarnings records the API server's warnings about fields a request
// sent that the object's schema does not have: the API server drops such a
// field and only warns, so a write the real component would never see
// passes silently unless someone listens.
type FieldWarnings struct {
	mu   sync.Mutex
	seen []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (f *FieldWarnings) HandleWarningHeader(_ int, _ string, text string) {
	if !strings.HasPrefix(text, "unknown field") {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.seen, text) {
		f.seen = append(f.seen, text)
	}
}

// Seen returns the warnings so far, each once.
func (f *FieldWarnings) Seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.seen)
}

// RunMain starts an API server for a package's tests, runs them and stops
// it, all in the world's network namespace. Use it from TestMain:
// os.Exit(testenv.RunMain(m, &env)).
func RunMain(m interface{ Run() int }, env **Env) int { return RunMainWith(m, env, Options{}) }

// RunMainWith is RunMain with opts for what runs beside the API server.
func RunMainWith(m interface{ Run() int }, env **Env, opts Options) int {
	return Isolated(func() int {
		e, err := StartWith(opts)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testenv:", err)
			return 1
		}
		*env = e
		code := m.Run()
		if err := e.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: stopping:", err)
		}
		if seen := e.UnknownFields.Seen(); len(seen) > 0 && code == 0 {
			fmt.Fprintf(os.Stderr, "testenv: the API server dropped fields its schemas do not have: %s\n", strings.Join(seen, "; "))
			return 1
		}
		return code
	})
}

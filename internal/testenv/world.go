package testenv

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KwokVersion is the kwok the world runs; the Makefile's KWOK_VERSION must
// match.
const KwokVersion = "v0.8.0"

// What the world tells kwok's pod stages (kwok/pods.yaml): a running pod
// whose main process ended gets AnnotationExitCode (and, for a failure,
// AnnotationTerminationMessage, what the process wrote to
// /dev/termination-log), and kwok, as its kubelet, reports it terminated.
const (
	AnnotationExitCode           = "world.upgrade-toolkit.harvesterhci.io/exit-code"
	AnnotationTerminationMessage = "world.upgrade-toolkit.harvesterhci.io/termination-message"
	// AnnotationImagesPulled: the world's kubelet has every image of the
	// pod on its node; with KwokOptions.PullImages, kwok starts a pod only
	// then.
	AnnotationImagesPulled = "world.upgrade-toolkit.harvesterhci.io/images-pulled"
)

// The node lifecycle's timing in the world, a real cluster's: nodes renew
// their Lease every quarter of NodeLeaseDuration, and the node-lifecycle
// controller marks a node whose Lease is older than NodeMonitorGracePeriod
// Unknown and taints it unreachable. (A node that shuts down reports
// NotReady itself, and is tainted at once.)
const (
	NodeLeaseDuration      = 40 * time.Second
	NodeMonitorGracePeriod = 50 * time.Second
)

// KwokOptions say which nodes kwok runs.
type KwokOptions struct {
	// ManageNodes is the label selector of the nodes kwok runs: it keeps
	// their Leases, reports their status and runs their pods. A node that
	// stops matching is left alone, as a powered-off machine is.
	ManageNodes string
	// PullImages: kwok starts a bound pod only once the world has marked it
	// AnnotationImagesPulled, as a kubelet starts containers only once it
	// has their images; the world reports a pod whose image it cannot get
	// (internal/sim).
	PullImages bool
}

//go:embed kwok/*.yaml
var kwokStages embed.FS

// pullGate marks, in kwok/pods.yaml, where the pod-start stage waits for
// the world's AnnotationImagesPulled when KwokOptions.PullImages is set.
const (
	pullGate   = "    # images-pulled gate (KwokOptions.PullImages)\n"
	pullGateOn = "    - key: '.metadata.annotations[\"" + AnnotationImagesPulled + "\"]'\n      operator: Exists\n"
)

// world is what runs beside the API server: kube-controller-manager,
// kube-scheduler and kwok, each a process of its own logging into dir.
type world struct {
	dir   string
	procs []*process
}

type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// ControllersDir returns where kube-controller-manager and kube-scheduler
// are: $KUBE_CONTROLLERS_ASSETS, else the directory `make k8s-components`
// fills.
func ControllersDir() (string, error) {
	return findDir("KUBE_CONTROLLERS_ASSETS", filepath.Join("k8s", "k8s", platformDir()), "k8s-components",
		"kube-controller-manager", "kube-scheduler")
}

// KwokBinary returns the kwok binary: $KWOK, else the one `make kwok`
// builds.
func KwokBinary() (string, error) {
	if p := os.Getenv("KWOK"); p != "" {
		return p, nil
	}
	dir, err := findDir("KWOK_DIR", "", "kwok", "kwok-"+KwokVersion)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "kwok-"+KwokVersion), nil
}

func startWorld(ctx context.Context, te *envtest.Environment, opts Options) (w *world, err error) {
	dir, err := os.MkdirTemp("", "upgrade-toolkit-world-")
	if err != nil {
		return nil, err
	}
	w = &world{dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.stop())
		}
	}()
	// The components act as administrators, as they do with the
	// credentials RKE2 gives them.
	user, err := te.ControlPlane.AddUser(envtest.User{Name: "world-components", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return w, fmt.Errorf("creating the components' credentials: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return w, err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		return w, err
	}
	api := te.ControlPlane.GetAPIServer()
	if opts.Controllers {
		bins, err := ControllersDir()
		if err != nil {
			return w, err
		}
		ca := filepath.Join(dir, "ca.crt")
		if err := os.WriteFile(ca, api.CA, 0o600); err != nil {
			return w, err
		}
		if err := w.start("kube-controller-manager", filepath.Join(bins, "kube-controller-manager"),
			"--kubeconfig="+kc,
			"--leader-elect=false",
			"--secure-port=0",
			"--controllers=*",
			"--service-account-private-key-file="+filepath.Join(api.CertDir, "sa-signer.key"),
			"--root-ca-file="+ca,
			// The persistent-volume controller binds a claim to the volume
			// a provisioner made on its next pass; 2 s instead of 15 s.
			"--pvclaimbinder-sync-period=2s",
			"--node-monitor-period=1s",
			"--node-monitor-grace-period="+NodeMonitorGracePeriod.String(),
			// A busy cluster of 200 nodes must not wait on the
			// controllers' own client-side throttling.
			"--kube-api-qps=200", "--kube-api-burst=400",
		); err != nil {
			return w, err
		}
		if err := w.start("kube-scheduler", filepath.Join(bins, "kube-scheduler"),
			"--kubeconfig="+kc,
			"--leader-elect=false",
			"--secure-port=0",
			"--kube-api-qps=200", "--kube-api-burst=400",
		); err != nil {
			return w, err
		}
	}
	if opts.Kwok != nil {
		if err := w.startKwok(kc, *opts.Kwok); err != nil {
			return w, err
		}
	}
	if opts.Controllers {
		if err := w.waitControllers(ctx, te); err != nil {
			return w, err
		}
	}
	return w, nil
}

func (w *world) startKwok(kubeconfig string, opts KwokOptions) error {
	bin, err := KwokBinary()
	if err != nil {
		return err
	}
	var stages bytes.Buffer
	for _, f := range []string{"kwok/nodes.yaml", "kwok/pods.yaml"} {
		b, err := kwokStages.ReadFile(f)
		if err != nil {
			return err
		}
		if opts.PullImages {
			b = bytes.Replace(b, []byte(pullGate), []byte(pullGateOn), 1)
		}
		stages.Write(b)
		stages.WriteString("\n---\n")
	}
	config := filepath.Join(w.dir, "kwok.yaml")
	if err := os.WriteFile(config, stages.Bytes(), 0o600); err != nil {
		return err
	}
	return w.start("kwok", bin,
		"--kubeconfig="+kubeconfig,
		"--config="+config,
		"--manage-nodes-with-label-selector="+opts.ManageNodes,
		"--node-lease-duration-seconds="+strconv.Itoa(int(NodeLeaseDuration.Seconds())),
		// Pod IPs from the benchmarking range (RFC 2544): written into
		// pods and EndpointSlices, never dialled.
		"--cidr=198.18.0.0/16",
	)
}

// waitControllers waits until the controller manager works: it has created
// the default service account of every namespace, without which the API
// server admits no pod.
func (w *world) waitControllers(ctx context.Context, te *envtest.Environment) error {
	c, err := client.New(te.Config, client.Options{})
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := w.exited(); err != nil {
			return false, err
		}
		for _, ns := range Namespaces {
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{}); err != nil {
				return false, nil //nolint:nilerr // not created yet
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-controller-manager to create the namespaces' default service accounts: %w (its log: %s)", err, w.logPath("kube-controller-manager"))
	}
	return nil
}

func (w *world) logPath(name string) string { return filepath.Join(w.dir, name+".log") }

func (w *world) start(name, bin string, args ...string) error {
	logFile, err := os.Create(w.logPath(name))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	exited, err := StartTied(cmd)
	if err != nil {
		_ = logFile.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = <-exited
		_ = logFile.Close()
		close(p.done)
	}()
	w.procs = append(w.procs, p)
	return nil
}

// exited returns an error naming a process that ended, with the end of its
// log.
func (w *world) exited() error {
	for _, p := range w.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); the end of its log:\n%s", p.name, p.err, tail(w.logPath(p.name), 20))
		default:
		}
	}
	return nil
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(all[max(len(all)-lines, 0):], "\n")
}

// stop ends the processes (SIGTERM, then SIGKILL after 10 seconds) and
// removes their directory unless WORLD_KEEP_LOGS is set.
func (w *world) stop() error {
	var errs []error
	for _, p := range w.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range w.procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			errs = append(errs, fmt.Errorf("%s did not stop within 10s of SIGTERM", p.name))
		}
	}
	if os.Getenv("WORLD_KEEP_LOGS") != "" {
		fmt.Fprintf(os.Stderr, "testenv: the world's logs are in %s\n", w.dir)
	} else {
		errs = append(errs, os.RemoveAll(w.dir))
	}
	return errors.Join(errs...)
}

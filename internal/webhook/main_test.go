package webhook_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/manager"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
	"github.com/harvester/upgrade-toolkit/internal/rbactest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
	"github.com/harvester/upgrade-toolkit/internal/webhook"
)

var (
	env *testenv.Env
	// webhookSA is the manager's ServiceAccount with the role generated
	// from this package's markers only: the tests fail if the webhook is
	// refused anything or granted what it never uses.
	webhookSA *rbactest.Identity
	opts      manager.Options
	// seededCA is the near-expiry CA put into the certificate Secret before
	// the manager started; the manager must have replaced it.
	seededCA []byte
	// alertmanager answers the webhook's questions about firing alerts.
	alertmanager = &fakeAlertmanager{}
)

// withManager starts the manager, with the webhook registered on the real
// API server, around the package's tests.
type withManager struct{ m *testing.M }

func (w withManager) Run() int {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}
	if err := startManager(ctx, done); err != nil {
		fmt.Fprintln(os.Stderr, "starting the manager with the webhook:", err)
		cancel()
		return 1
	}
	defer stop()
	if err := createHealthyCluster(); err != nil {
		fmt.Fprintln(os.Stderr, "creating the cluster's objects:", err)
		return 1
	}
	return webhookSA.Verdict(w.m.Run())
}

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(withManager{m}, &env)) }

func startManager(ctx context.Context, done chan<- error) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	certDir, err := os.MkdirTemp("", "webhook-certs-")
	if err != nil {
		return err
	}
	alertmanager.start()
	opts = manager.Options{
		Alerts: preflight.Alertmanager{URL: alertmanager.url},
		// The tests put plans in made-up phases; nothing must drive them.
		WithoutReconcilers: true,
		MetricsAddr:        "0", ProbeAddr: "0", Namespace: cluster.HarvesterNamespace,
		Webhook: webhook.Options{
			Enabled: true, Host: "localhost", Port: port, CertDir: certDir,
			ServiceName: webhook.DefaultServiceName, ConfigurationName: webhook.DefaultConfigurationName,
		},
	}
	// A certificate Secret left by an earlier manager, about to expire.
	data, err := issue(20 * 24 * time.Hour)
	if err != nil {
		return err
	}
	seededCA = data["ca.crt"]
	if err := env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: webhook.CertSecretName}, Data: data,
	}); err != nil {
		return err
	}
	if err := createWebhookConfiguration(ctx, port); err != nil {
		return err
	}
	webhookSA, err = rbactest.Bind(ctx, env, types.NamespacedName{Namespace: opts.Namespace, Name: "upgrade-toolkit"}, rbactest.WebhookRole)
	if err != nil {
		return err
	}
	mgr, err := manager.New(webhookSA.Config(), opts)
	if err != nil {
		return err
	}
	go func() { done <- mgr.Start(ctx) }()
	return waitForWebhook(ctx)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// createWebhookConfiguration installs the generated configuration, pointed
// at the local server and without a caBundle: the manager must patch it in.
func createWebhookConfiguration(ctx context.Context, port int) error {
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	vwc := &admissionv1.ValidatingWebhookConfiguration{}
	if err := yaml.Unmarshal(raw, vwc); err != nil {
		return err
	}
	vwc.Name = opts.Webhook.ConfigurationName
	for i := range vwc.Webhooks {
		cc := &vwc.Webhooks[i].ClientConfig
		cc.URL = ptr.To(fmt.Sprintf("https://localhost:%d%s", port, *cc.Service.Path))
		cc.Service = nil
	}
	return env.Client.Create(ctx, vwc)
}

// waitForWebhook waits until the API server gets answers from the webhook,
// which needs the certificates issued and the caBundle patched.
func waitForWebhook(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		p := plan("probe")
		p.Annotations = map[string]string{v1beta1.AnnotationSkipWebhook: "maybe"}
		last = env.Client.Create(ctx, p)
		if last == nil {
			return errors.New("the probe plan was admitted; the webhook does not run")
		}
		if strings.Contains(last.Error(), `must be "true" or "false"`) {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("the webhook did not answer in time: %w", last)
}

// issue makes a certificate Secret's data whose CA and serving certificate
// expire after the given time.
func issue(validity time.Duration) (map[string][]byte, error) {
	r := &rotator.CertRotator{
		CAName: "test-ca", CAOrganization: "test",
		DNSName:      webhook.DefaultServiceName + "." + cluster.HarvesterNamespace + ".svc",
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	begin := time.Now().Add(-time.Hour)
	ca, err := r.CreateCACert(begin, begin.Add(validity))
	if err != nil {
		return nil, err
	}
	cert, key, err := r.CreateCertPEM(ca, begin, begin.Add(validity))
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM, "tls.crt": cert, "tls.key": key}, nil
}

func plan(name string) *v1beta1.UpgradePlan {
	return &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
	}
}

func ctxFor(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// The healthy three-node cluster every test starts from.
var nodeNames = []string{"n1", "n2", "n3"}

func createHealthyCluster() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objs := []client.Object{
		&harvesterv1beta1.Version{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "v1.8.0"},
			Spec:       harvesterv1beta1.VersionSpec{ISOURL: "https://releases.example.com/v1.8.0/harvester.iso"},
		},
		&harvesterv1beta1.VirtualMachineImage{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "uploaded-iso"},
			Spec:       harvesterv1beta1.VirtualMachineImageSpec{DisplayName: "harvester-v1.8.0.iso", SourceType: "upload"},
		},
		&provisioningv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
			Status:     provisioningv1.ClusterStatus{Ready: true},
		},
		&managementv3.ManagedChart{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "harvester"},
			Status:     managementv3.ManagedChartStatus{Conditions: []common.Condition{{Type: "Ready", Status: "True"}}},
		},
		&harvesterv1beta1.Addon{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.KubeSystemNamespace, Name: cluster.DeschedulerAddon},
			Spec:       testAddonSpec(),
			Status:     harvesterv1beta1.AddonStatus{Status: cluster.AddonStateDeployed},
		},
		volume("vol-healthy", 3, cluster.LonghornVolumeAttached, "healthy"),
		vmi("vm-plain", "n1"),
	}
	for _, n := range nodeNames {
		objs = append(objs,
			&corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: n,
					Labels:      map[string]string{cluster.LabelManagedNode: "true"},
					Annotations: map[string]string{cluster.AnnotationCAPIMachine: "m-" + n}},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}},
			},
			&capiv1beta1.Machine{
				ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "m-" + n},
				Spec: capiv1beta1.MachineSpec{ClusterName: cluster.LocalClusterName, Bootstrap: capiv1beta1.Bootstrap{DataSecretName: ptr.To("m-" + n)},
					InfrastructureRef: corev1.ObjectReference{APIVersion: "rke.cattle.io/v1", Kind: "CustomMachine", Name: "m-" + n}},
				Status: capiv1beta1.MachineStatus{Phase: cluster.MachinePhaseRunning, NodeRef: &corev1.ObjectReference{Kind: "Node", Name: n}},
			})
	}
	for _, o := range objs {
		if err := createWithStatus(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

func volume(name string, replicas int, state, robustness string) *longhornv1beta2.Volume {
	return &longhornv1beta2.Volume{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: name},
		Spec:       longhornv1beta2.VolumeSpec{NumberOfReplicas: replicas},
		Status: longhornv1beta2.VolumeStatus{State: state, Robustness: robustness,
			KubernetesStatus: longhornv1beta2.KubernetesStatus{Namespace: "default", PVCName: name}},
	}
}

func vmi(name, node string) *kubevirtv1.VirtualMachineInstance {
	return &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Status:     kubevirtv1.VirtualMachineInstanceStatus{NodeName: node, Phase: "Running"},
	}
}

// createWithStatus creates the object and then writes its status, which the
// create ignores.
func createWithStatus(ctx context.Context, o client.Object) error {
	want := o.DeepCopyObject().(client.Object)
	if err := env.Client.Create(ctx, o); err != nil {
		return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
	}
	want.SetResourceVersion(o.GetResourceVersion())
	if err := cluster.UpdateStatus(ctx, env.Client, want); err != nil {
		return fmt.Errorf("writing the status of %T %s: %w", o, o.GetName(), err)
	}
	return nil
}

// createTemp creates an object for one test and deletes it afterwards.
func createTemp(t *testing.T, o client.Object) {
	t.Helper()
	if err := createWithStatus(ctxFor(t), o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", o.GetName(), err)
		}
	})
}

// modify changes an existing object (spec and status) for one test and
// restores it afterwards.
func modify[T client.Object](t *testing.T, o T, change func(T)) {
	t.Helper()
	ctx := ctxFor(t)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
		t.Fatal(err)
	}
	orig := o.DeepCopyObject().(T)
	change(o)
	if err := write(ctx, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cur := orig.DeepCopyObject().(T)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
			t.Errorf("restoring %s: %v", orig.GetName(), err)
			return
		}
		orig.SetResourceVersion(cur.GetResourceVersion())
		if err := write(ctx, orig); err != nil {
			t.Errorf("restoring %s: %v", orig.GetName(), err)
		}
	})
}

// write updates an object's spec and metadata, then its status.
func write(ctx context.Context, o client.Object) error {
	want := o.DeepCopyObject().(client.Object)
	if err := env.Client.Update(ctx, o); err != nil {
		return err
	}
	if !cluster.HasStatusSubresource(o) {
		return nil
	}
	want.SetResourceVersion(o.GetResourceVersion())
	return env.Client.Status().Update(ctx, want)
}

// warnings records the warnings the API server sends.
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.text...)
}

// clientWithWarnings is a client whose warnings the test can read.
func clientWithWarnings(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// removePlansAfter deletes every plan when the test ends, finishing running
// ones first so that the webhook lets them go.
func removePlansAfter(t *testing.T) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		plans := &v1beta1.UpgradePlanList{}
		if err := env.Client.List(ctx, plans); err != nil {
			t.Errorf("listing plans: %v", err)
			return
		}
		for i := range plans.Items {
			p := &plans.Items[i]
			if p.IsStarted() && !p.IsFinished() {
				p.Status.CurrentPhase = v1beta1.PhaseFailed
				if err := env.Client.Status().Update(ctx, p); err != nil {
					t.Errorf("finishing %s: %v", p.Name, err)
				}
			}
			if err := env.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s: %v", p.Name, err)
			}
		}
	})
}

// storedPlans counts the plans the API server holds.
func storedPlans(t *testing.T) int {
	t.Helper()
	plans := &v1beta1.UpgradePlanList{}
	if err := env.Client.List(ctxFor(t), plans); err != nil {
		t.Fatal(err)
	}
	return len(plans.Items)
}

// setPhase writes the plan's status.currentPhase, as the controller would.
func setPhase(t *testing.T, p *v1beta1.UpgradePlan, phase v1beta1.UpgradePlanPhase) {
	t.Helper()
	p.Status.CurrentPhase = phase
	if err := env.Client.Status().Update(ctxFor(t), p); err != nil {
		t.Fatalf("setting phase %s: %v", phase, err)
	}
}

// eventually retries check until it passes or the timeout runs out.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testAddonSpec is a valid Addon spec (the real schema requires repo, chart
// version and values).
func testAddonSpec() harvesterv1beta1.AddonSpec {
	return harvesterv1beta1.AddonSpec{Enabled: true, Repo: "http://harvester-cluster-repo.cattle-system.svc/charts", Chart: "descheduler", Version: "0.33.0", ValuesContent: "{}"}
}

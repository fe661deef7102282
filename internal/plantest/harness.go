// Package plantest is the world of one plan for the tests of the plan
// reconciler and of the phases: the toolkit's manager runs, as the role its
// markers generate, against a real API server and etcd with the foreign
// CRDs, while the tests play the foreign components (CDI, the repo's
// Deployment, system-upgrade-controller, Rancher, Fleet, the Job
// controller) by hand with the drivers of Harness.
package plantest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/controller"
	"github.com/harvester/upgrade-toolkit/internal/manager"
	"github.com/harvester/upgrade-toolkit/internal/phase"
	"github.com/harvester/upgrade-toolkit/internal/rbactest"
	"github.com/harvester/upgrade-toolkit/internal/release"
	"github.com/harvester/upgrade-toolkit/internal/release/releasetest"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var (
	env *testenv.Env
	// manager is the manager's ServiceAccount, bound to the role generated
	// from the markers of the manager's packages: the tests run the manager
	// as it, and fail if it is refused anything or granted what it never
	// uses.
	managerSA *rbactest.Identity
)

// The suites of the plan's world, by the packages whose markers make up the
// manager's role: each checks that the permissions its packages grant are
// used (rbactest's Covering). Together they are the Makefile's MANAGER_PKGS.
var (
	// ReconcilerSuite: the reconcilers and the manager (its cache, leader
	// election and events).
	ReconcilerSuite = []string{"internal/controller", "internal/manager"}
	// PhaseSuite: the phases and the pre-flight checks they run.
	PhaseSuite = []string{"internal/phase", "internal/preflight"}
)

// Main runs a test package's tests in the world, as the manager's role:
// call it from the package's TestMain with the suite the package is.
func Main(m *testing.M, suite []string) {
	if os.Getenv("TEST_LOG") != "" {
		log.SetLogger(zap.New(zap.UseDevMode(true)))
	} else {
		log.SetLogger(logr.Discard())
		klog.SetLogger(logr.Discard()) // leader election logs through klog
	}
	os.Exit(testenv.RunMain(asManager{m, suite}, &env))
}

// asManager runs the tests with the manager's ServiceAccount in place.
type asManager struct {
	m     *testing.M
	suite []string
}

func (a asManager) Run() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	managerSA, err = rbactest.Bind(ctx, env, types.NamespacedName{Namespace: cluster.HarvesterNamespace, Name: "upgrade-toolkit"}, rbactest.ManagerRole)
	if err == nil {
		err = managerSA.Covering(a.suite...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return managerSA.Verdict(a.m.Run())
}

// FakeKubelet answers the disk-space check per node; a missing node is
// unreachable.
type FakeKubelet struct {
	mu    sync.Mutex
	nodes map[string][2]uint64 // capacity, used
	reads int
}

// Get answers a kubelet endpoint of a node.
func (k *FakeKubelet) Get(_ context.Context, node, path string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reads++
	d, ok := k.nodes[node]
	if !ok {
		return nil, errors.New("dial tcp: connection refused")
	}
	if path == "configz" {
		return []byte(`{"kubeletconfig":{"imageGCHighThresholdPercent":85}}`), nil
	}
	return []byte(fmt.Sprintf(`{"node":{"fs":{"capacityBytes":%d,"usedBytes":%d}}}`, d[0], d[1])), nil
}

// Set reports a node's image file system: its capacity and what is used.
func (k *FakeKubelet) Set(node string, capacity, used uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nodes[node] = [2]uint64{capacity, used}
}

// Reads counts the requests to the kubelets, answered or not.
func (k *FakeKubelet) Reads() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reads
}

// Drop makes a node's kubelet unreachable.
func (k *FakeKubelet) Drop(node string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.nodes, node)
}

// Harness runs the toolkit's manager against the test API server and plays
// the foreign components by hand.
type Harness struct {
	T *testing.T
	// C reads and writes the API server as the tests' administrator.
	C client.Client
	// Clock is the manager's clock.
	Clock *clocktesting.FakeClock
	// Cfg is the manager's configuration of the phases.
	Cfg     *phase.Config
	Kubelet *FakeKubelet
	counter *apicount.Counter
	// conflicts is the number of the manager's next requests of a verb and
	// resource that are answered 409 Conflict (ConflictNext).
	conflicts sync.Map
	stop      context.CancelFunc
	done      chan struct{}
	// Repo is the release the fake upgrade repo serves; Files is what it
	// serves now (tests may break it).
	Repo  *releasetest.Repo
	Files atomic.Pointer[fstest.MapFS]
	// refusedBefore counts the requests RBAC refused the manager before
	// this test; while cleaningUp, eventually reports new ones without
	// ending the test, so that the cleanup finishes.
	refusedBefore int
	cleaningUp    bool
}

// New starts the manager for a test; the test's cleanup deletes every plan
// (the manager cleans up after each), stops it and deletes what the test
// created.
func New(t *testing.T) *Harness {
	t.Helper()
	cfg := phase.DefaultConfig()
	cfg.Version = "v0.0.0-test"
	h := &Harness{
		T: t, C: env.Client, Cfg: &cfg,
		Clock:   clocktesting.NewFakeClock(time.Now()),
		Kubelet: &FakeKubelet{nodes: map[string][2]uint64{}},
		counter: apicount.New(),

		refusedBefore: len(managerSA.Refused()),
	}
	cfg.Kubelet = h.Kubelet
	// envtest's API server certificate is valid for 7 days only.
	cfg.MinCertValidity = 24 * time.Hour
	// A failed plan is cleaned up at once, unless a test of retries opens
	// the window.
	cfg.RetryWindow = 0
	h.Repo = releasetest.New()
	files := h.Repo.Files()
	h.Files.Store(&files)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		releasetest.Handler(*h.Files.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg.RepoURL = func(string, string) string { return srv.URL + release.RepoRoot }
	h.Start()
	t.Cleanup(h.Cleanup)
	return h
}

// Start starts a manager.
func (h *Harness) Start() {
	cfg := h.counter.Wrap(managerSA.Config())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return conflicting{rt, h} })
	mgr, err := manager.New(cfg, manager.Options{
		MetricsAddr: "0", ProbeAddr: "0", Phase: h.Cfg, Clock: h.Clock,
		LeaderElect: true, Namespace: cluster.HarvesterNamespace,
	})
	if err != nil {
		h.T.Fatalf("building the manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.stop, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		if err := mgr.Start(ctx); err != nil {
			h.T.Errorf("manager: %v", err)
		}
	}()
}

// ConflictNext answers the manager's next n requests of that verb (as
// apicount names them: create, patch, update...) and resource with 409
// Conflict, as the API server does to a write that lost a race (an update
// of an object changed since it was read; a create whose ResourceQuota's
// admission lost one).
func (h *Harness) ConflictNext(verb, resource string, n int) {
	left := &atomic.Int64{}
	left.Store(int64(n))
	h.conflicts.Store(apicount.Key{Verb: verb, Resource: resource}, left)
}

// conflicting answers the requests ConflictNext names with a conflict.
type conflicting struct {
	next http.RoundTripper
	h    *Harness
}

func (c conflicting) RoundTrip(req *http.Request) (*http.Response, error) {
	k := apicount.Classify(req)
	if v, ok := c.h.conflicts.Load(k); ok && v.(*atomic.Int64).Add(-1) >= 0 {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,`+
			`"message":"Operation cannot be fulfilled on %s: the object has been modified; please apply your changes to the latest version and try again"}`, k.Resource)
		return &http.Response{StatusCode: http.StatusConflict, Status: "409 Conflict", Proto: req.Proto, ProtoMajor: req.ProtoMajor, ProtoMinor: req.ProtoMinor,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}, nil
	}
	return c.next.RoundTrip(req)
}

// Restart stops the manager and starts a new one, as a crash would.
func (h *Harness) Restart() {
	h.stop()
	<-h.done
	h.Start()
}

// Cleanup deletes every plan (the manager cleans up after each), then the
// objects the tests created, so that the next test starts from scratch.
func (h *Harness) Cleanup() {
	h.cleaningUp = true
	ctx := context.Background()
	var plans v1beta1.UpgradePlanList
	_ = h.C.List(ctx, &plans)
	for i := range plans.Items {
		_ = h.C.Delete(ctx, &plans.Items[i])
	}
	h.Eventually("every plan is gone", func() (bool, string) {
		_ = h.C.List(ctx, &plans)
		if len(plans.Items) > 0 {
			return false, fmt.Sprintf("%d plans left, the first %s", len(plans.Items), Describe(&plans.Items[0]))
		}
		return true, ""
	})
	h.stop()
	<-h.done
	h.DeleteHarvester()
	for _, del := range []struct {
		obj  client.Object
		opts []client.DeleteAllOfOption
	}{
		{&corev1.Node{}, nil},
		{&harvesterv1beta1.Setting{}, nil},
		{&harvesterv1beta1.Version{}, []client.DeleteAllOfOption{client.InNamespace(cluster.HarvesterNamespace)}},
		{&harvesterv1beta1.VirtualMachineImage{}, []client.DeleteAllOfOption{client.InNamespace(cluster.HarvesterNamespace)}},
		{&batchv1.Job{}, []client.DeleteAllOfOption{client.InNamespace(cluster.HarvesterNamespace)}},
		{&batchv1.Job{}, []client.DeleteAllOfOption{client.InNamespace(cluster.CattleNamespace)}},
		{&corev1.Secret{}, []client.DeleteAllOfOption{client.InNamespace(cluster.FleetLocalNamespace)}},
		{&kubevirtv1.VirtualMachine{}, []client.DeleteAllOfOption{client.InNamespace(VMNamespace)}},
		{&kubevirtv1.VirtualMachineInstance{}, []client.DeleteAllOfOption{client.InNamespace(VMNamespace)}},
		{&kubevirtv1.VirtualMachineInstanceMigration{}, []client.DeleteAllOfOption{client.InNamespace(VMNamespace)}},
	} {
		if err := h.C.DeleteAllOf(ctx, del.obj, del.opts...); err != nil {
			h.T.Errorf("deleting %T: %v", del.obj, err)
		}
	}
	h.RemoveFinalizers()
}

// RemoveFinalizers releases objects a failed test may leave behind.
func (h *Harness) RemoveFinalizers() {
	var plans v1beta1.UpgradePlanList
	_ = h.C.List(context.Background(), &plans)
	for i := range plans.Items {
		p := &plans.Items[i]
		if controllerutil.RemoveFinalizer(p, v1beta1.FinalizerCleanup) {
			_ = h.C.Update(context.Background(), p)
		}
	}
}

// Ctx is a context that ends with the test, or after 30 seconds.
func (h *Harness) Ctx() context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.T.Cleanup(cancel)
	return c
}

// Eventually polls until cond holds, failing the test with cond's last
// description after 30 seconds.
func (h *Harness) Eventually(what string, cond func() (bool, string)) {
	h.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		if refused := managerSA.Refused()[h.refusedBefore:]; len(refused) > 0 {
			msg := fmt.Sprintf("waiting for %s: RBAC refused the manager (add a +kubebuilder:rbac marker next to the code and run `make manifests`):\n%s",
				what, strings.Join(refused, "\n"))
			if h.cleaningUp {
				h.T.Error(msg) // and let the cleanup go on
				return
			}
			h.T.Fatal(msg)
		}
		ok, desc := cond()
		if ok {
			return
		}
		last = desc
		time.Sleep(50 * time.Millisecond)
	}
	h.T.Fatalf("timed out waiting for %s: %s", what, last)
}

// Must fails the test on an error.
func (h *Harness) Must(err error) {
	h.T.Helper()
	if err != nil {
		h.T.Fatal(err)
	}
}

// Node creates a managed, Ready node running the given OS.
func (h *Harness) Node(name, osImage string, labels ...string) *corev1.Node {
	h.T.Helper()
	l := map[string]string{cluster.LabelManagedNode: "true", corev1.LabelHostname: name}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	h.Must(h.C.Create(h.Ctx(), n))
	n.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
		NodeInfo:   corev1.NodeSystemInfo{OSImage: osImage, KubeletVersion: "v1.34.4+rke2r1", BootID: string(uuid.NewUUID())},
	}
	h.Must(h.C.Status().Update(h.Ctx(), n))
	h.Kubelet.Set(name, 200<<30, 40<<30)
	return n
}

// Cluster creates n managed nodes, the server-version setting and a Version.
func (h *Harness) Cluster(n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("node-%d", i+1))
		h.Node(names[i], "Harvester v1.7.1")
	}
	h.Must(h.C.Create(h.Ctx(), &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ServerVersionSetting}, Value: "v1.7.1"}))
	h.Must(h.C.Create(h.Ctx(), &harvesterv1beta1.Version{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "v1.8.0"},
		Spec:       harvesterv1beta1.VersionSpec{ISOURL: "https://releases.example.com/harvester-v1.8.0-amd64.iso", ISOChecksum: "abc123"},
	}))
	return names
}

// Plan creates a plan.
func (h *Harness) Plan(spec v1beta1.UpgradePlanSpec, annotations ...string) *v1beta1.UpgradePlan {
	h.T.Helper()
	p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{GenerateName: "hvst-upgrade-"}, Spec: spec}
	// The harness's cluster is partial (no provisioning Cluster, no
	// Machines) and no webhook admits its plans: by default they skip the
	// checks of the cluster's state as skip-webhook does, and Initialize's
	// second look with them. TestRisksAtInitialize and internal/webhook
	// judge the risks; a test that wants them passes skip-webhook "false".
	// A dry run reports them, as it would for any user.
	p.Annotations = map[string]string{}
	if !p.IsDryRun() {
		p.Annotations[v1beta1.AnnotationSkipWebhook] = "true"
	}
	for i := 0; i+1 < len(annotations); i += 2 {
		p.Annotations[annotations[i]] = annotations[i+1]
	}
	h.Must(h.C.Create(h.Ctx(), p))
	return p
}

// Get reads a plan.
func (h *Harness) Get(name string) *v1beta1.UpgradePlan {
	h.T.Helper()
	p := &v1beta1.UpgradePlan{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: name}, p))
	return p
}

// WaitPhase waits for the plan to reach a phase and returns it.
func (h *Harness) WaitPhase(name string, phase v1beta1.UpgradePlanPhase) *v1beta1.UpgradePlan {
	h.T.Helper()
	var p *v1beta1.UpgradePlan
	h.Eventually(fmt.Sprintf("plan %s in phase %s", name, phase), func() (bool, string) {
		p = h.Get(name)
		return p.Status.CurrentPhase == phase, Describe(p)
	})
	return p
}

// WaitProgressing waits until the Progressing message contains want.
func (h *Harness) WaitProgressing(name, want string) *v1beta1.UpgradePlan {
	h.T.Helper()
	var p *v1beta1.UpgradePlan
	h.Eventually(fmt.Sprintf("plan %s progressing with %q", name, want), func() (bool, string) {
		p = h.Get(name)
		c := p.Condition(v1beta1.ConditionProgressing)
		return c != nil && strings.Contains(c.Message, want), Describe(p)
	})
	return p
}

// Describe says where a plan stands, for a test's failure.
func Describe(p *v1beta1.UpgradePlan) string {
	var conds []string
	for _, c := range p.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("phase %q, conditions %s, nodes %v", p.Status.CurrentPhase, strings.Join(conds, "; "), p.Status.NodeUpgradeStatuses)
}

// Events returns "Reason: message" of the plan's events.
func (h *Harness) Events(plan string) []string {
	var list corev1.EventList
	h.Must(h.C.List(h.Ctx(), &list))
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "UpgradePlan" && e.InvolvedObject.Name == plan {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	slices.Sort(out)
	return out
}

// WaitEvent waits for an event of the plan containing want.
func (h *Harness) WaitEvent(plan, want string) {
	h.T.Helper()
	h.Eventually("event "+want, func() (bool, string) {
		ev := h.Events(plan)
		return slices.ContainsFunc(ev, func(e string) bool { return strings.Contains(e, want) }), strings.Join(ev, "\n")
	})
}

// WaitObject waits until an object exists and returns it.
func (h *Harness) WaitObject(key client.ObjectKey, obj client.Object) {
	h.T.Helper()
	h.Eventually(fmt.Sprintf("%T %s", obj, key), func() (bool, string) {
		err := h.C.Get(h.Ctx(), key, obj)
		return err == nil, fmt.Sprint(err)
	})
}

// SetImported reports a VirtualMachineImage as imported, as CDI would.
func (h *Harness) SetImported(name string, status, retryLimit, msg string) {
	h.T.Helper()
	img := &harvesterv1beta1.VirtualMachineImage{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: name}, img)
	img.Status.Progress = 100
	img.Status.Conditions = []common.Condition{{Type: "Imported", Status: status, Message: msg}}
	if retryLimit != "" {
		img.Status.Conditions = append(img.Status.Conditions, common.Condition{Type: "RetryLimitExceeded", Status: retryLimit, Message: msg})
	}
	h.Must(cluster.UpdateStatus(h.Ctx(), h.C, img))
}

// FinishJob completes or fails a Job, as the Job controller would.
func (h *Harness) FinishJob(namespace, name string, succeed bool) *batchv1.Job {
	h.T.Helper()
	j := &batchv1.Job{}
	h.WaitObject(client.ObjectKey{Namespace: namespace, Name: name}, j)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	if succeed {
		cluster.MarkJobSucceeded(j, now)
	} else {
		cluster.MarkJobFailed(j, "BackoffLimitExceeded", "Job has reached the specified backoff limit", now)
	}
	h.Must(h.C.Status().Update(h.Ctx(), j))
	return j
}

// WritesDuring counts the manager's writes while f runs, but for the
// leader's renewals of its Lease, which go on whatever happens.
func (h *Harness) WritesDuring(f func()) map[apicount.Key]int {
	h.counter.Reset()
	f()
	writes := h.counter.Writes()
	delete(writes, apicount.Key{Verb: "update", Resource: "leases"})
	return writes
}

// RequestsDuring counts the manager's requests while f runs.
func (h *Harness) RequestsDuring(f func()) map[apicount.Key]int {
	h.counter.Reset()
	f()
	return h.counter.Snapshot()
}

// Absent reports whether an object does not exist.
func (h *Harness) Absent(key client.ObjectKey, obj client.Object) bool {
	return apierrors.IsNotFound(h.C.Get(h.Ctx(), key, obj))
}

// Touch changes an annotation of the plan so that the manager reconciles it
// now (after a fake clock step, a deadline's real-time requeue is too late).
func (h *Harness) Touch(name string) {
	h.T.Helper()
	p := h.Get(name)
	before := p.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations["test/touched"] = time.Now().String()
	h.Must(h.C.Patch(h.Ctx(), p, client.MergeFrom(before)))
}

// WholePass waits until the plan controller has run a whole pass that
// began after this call (testenv.WholePass), touching the plan so that
// passes come, and returns how many passes ended meanwhile: whatever the
// manager was shown before the call, it has acted on. One manager runs at a
// time.
func (h *Harness) WholePass(plan string) int {
	h.T.Helper()
	n, err := testenv.WholePass(h.Ctx(), controller.ControllerName, func() error { h.Touch(plan); return nil })
	h.Must(err)
	return n
}

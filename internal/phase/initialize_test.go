package phase_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
)

func TestInitializeThenDownloadTheISO(t *testing.T) {
	h := plantest.New(t)
	h.Cluster(3)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})

	p = h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	if !slices.Contains(p.Finalizers, v1beta1.FinalizerCleanup) {
		t.Errorf("no finalizer: %v", p.Finalizers)
	}
	st := p.Status
	if st.Version == nil || st.Version.ISOURL != "https://releases.example.com/harvester-v1.8.0-amd64.iso" || st.Version.ISOChecksum != "abc123" {
		t.Errorf("version snapshot %+v", st.Version)
	}
	if ptr.Deref(st.PreviousVersion, "") != "v1.7.1" || st.SingleNode != nil {
		t.Errorf("previous version %v, single node %v", st.PreviousVersion, st.SingleNode)
	}
	var phases []v1beta1.UpgradePlanPhase
	for _, e := range st.PhaseTransitionTimestamps {
		phases = append(phases, e.Phase)
	}
	if want := []v1beta1.UpgradePlanPhase{v1beta1.PhaseInitializing, v1beta1.PhaseInitialized, v1beta1.PhaseISODownloading}; !slices.Equal(phases, want) {
		t.Errorf("history %v, want %v", phases, want)
	}
	if c := p.Condition(v1beta1.ConditionAvailable); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1beta1.ReasonExecutable {
		t.Errorf("Available %+v", c)
	}
	if c := p.Condition(v1beta1.ConditionProgressing); c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(v1beta1.PhaseISODownloading) {
		t.Errorf("Progressing %+v", c)
	}

	img := &harvesterv1beta1.VirtualMachineImage{}
	h.WaitObject(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ISOImage(p.Name)}, img)
	if img.Spec.URL != st.Version.ISOURL || img.Spec.Checksum != "abc123" || img.Spec.Backend != "cdi" ||
		img.Spec.TargetStorageClassName != "longhorn-static" || img.Spec.SourceType != "download" || img.Spec.Retry != 3 {
		t.Errorf("image spec %+v", img.Spec)
	}
	if img.Annotations[cluster.AnnotationOSUpgradeImage] != "True" || img.Labels[v1beta1.LabelUpgradePlan] != p.Name ||
		img.Labels[v1beta1.LabelUpgradeComponent] != v1beta1.ComponentISO || len(img.OwnerReferences) != 1 {
		t.Errorf("image metadata %+v", img.ObjectMeta)
	}
	p = h.WaitProgressing(p.Name, "importing the release ISO")
	if ptr.Deref(p.Status.ISOImageID, "") != img.Name {
		t.Errorf("isoImageID %v", p.Status.ISOImageID)
	}

	h.SetImported(img.Name, "True", "", "")
	h.WaitPhase(p.Name, v1beta1.PhaseRepoCreating)
	h.WaitEvent(p.Name, "PhaseCompleted: Completed phase ISODownload")
	h.WaitEvent(p.Name, "PhaseTransition: Entering phase RepoCreate")
	h.WaitEvent(p.Name, "PhaseTransition: Entering phase ISODownload")
}

func TestInitializeSingleNode(t *testing.T) {
	h := plantest.New(t)
	h.Cluster(1)
	h.Node("not-managed", "Harvester v1.7.1", cluster.LabelManagedNode, "false")
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	if ptr.Deref(p.Status.SingleNode, "") != "node-1" {
		t.Errorf("single node %v", p.Status.SingleNode)
	}
}

func TestInitializeFailures(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(h *plantest.Harness)
		spec        v1beta1.UpgradePlanSpec
		annotations []string
		// advance moves the clock past the phase's deadline.
		advance time.Duration
		want    string
	}{
		{name: "missing Version", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v9.9.9")}, advance: 6 * time.Minute,
			want: "Version harvester-system/v9.9.9 does not exist"},
		{name: "disk too full", setup: func(h *plantest.Harness) { h.Kubelet.Set("node-2", 100<<30, 80<<30) },
			want: `node "node-2" will reach 93.00% of its nodefs`},
		{name: "kubelet unreachable", setup: func(h *plantest.Harness) { h.Kubelet.Drop("node-3") }, advance: 4 * time.Minute,
			want: `could not read every kubelet: reading the kubelet's /stats/summary of node "node-3"`},
		{name: "bad skip annotation", annotations: []string{v1beta1.AnnotationSkipGCThresholdCheck, "yes please"},
			want: `has the value "yes please": must be "true" or "false"`},
		{name: "certificates expire too soon", annotations: []string{v1beta1.AnnotationMinCertsExpirationInDay, "30"},
			want: "less than the required 30 days: rotate the RKE2 certificates"},
		{name: "bad certificate annotation", annotations: []string{v1beta1.AnnotationMinCertsExpirationInDay, "-3"},
			want: "must be a whole number of days greater than 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := plantest.New(t)
			h.Cluster(3)
			if tt.setup != nil {
				tt.setup(h)
			}
			if tt.spec.Version == nil {
				tt.spec.Version = ptr.To("v1.8.0")
			}
			p := h.Plan(tt.spec, tt.annotations...)
			if tt.advance > 0 {
				h.WaitProgressing(p.Name, "giving up at")
				h.Clock.Step(tt.advance)
				// Nudge the plan: the deadline's requeue uses real time.
				h.Touch(p.Name)
			}
			p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
			c := p.Condition(v1beta1.ConditionProgressing)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1beta1.ReasonFailed || !strings.Contains(c.Message, tt.want) {
				t.Errorf("Progressing %+v, want a failure with %q", c, tt.want)
			}
			if c := p.Condition(v1beta1.ConditionAvailable); c == nil || c.Reason != v1beta1.ReasonExecuted {
				t.Errorf("Available %+v", c)
			}
			h.WaitEvent(p.Name, "UpgradeFailed: Upgrade failed: ")
		})
	}
}

func TestSkipDiskCheck(t *testing.T) {
	h := plantest.New(t)
	h.Cluster(2)
	h.Kubelet.Set("node-2", 100<<30, 99<<30)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")}, v1beta1.AnnotationSkipGCThresholdCheck, "true")
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
}

func TestUserImage(t *testing.T) {
	h := plantest.New(t)
	h.Cluster(2)
	// The user's image, which the plan does not own.
	user := cluster.NewISOImage(cluster.HarvesterNamespace, "harvester-master-amd64", "harvester-master-amd64.iso", "https://x/h.iso", "")
	h.Must(h.C.Create(h.Ctx(), user))
	// Judged for its risks too, which read the image (the harness's partial
	// cluster's own risks accepted).
	p := h.Plan(v1beta1.UpgradePlanSpec{Image: ptr.To(user.Name), AcceptRisks: harnessRisks}, v1beta1.AnnotationSkipWebhook, "false")
	p = h.WaitProgressing(p.Name, "importing the release ISO into VirtualMachineImage harvester-system/harvester-master-amd64")
	if p.Status.Version != nil || ptr.Deref(p.Status.ISOImageID, "") != user.Name {
		t.Errorf("version %v, isoImageID %v", p.Status.Version, p.Status.ISOImageID)
	}
	if !h.Absent(client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: names.ISOImage(p.Name)}, &harvesterv1beta1.VirtualMachineImage{}) {
		t.Error("a plan with spec.image downloaded the ISO anyway")
	}
	// Progress on an image the plan does not own still wakes it up.
	h.SetImported(user.Name, "True", "", "")
	h.WaitPhase(p.Name, v1beta1.PhaseRepoCreating)
}

func TestISOImportFailure(t *testing.T) {
	h := plantest.New(t)
	h.Cluster(2)
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)
	// A failed attempt that Harvester retries is not fatal.
	h.SetImported(names.ISOImage(p.Name), "False", "False", "connection reset by peer")
	h.WaitProgressing(p.Name, "retrying after a failed attempt: connection reset by peer")
	h.SetImported(names.ISOImage(p.Name), "False", "True", "checksum mismatch after 3 retries")
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	if c := p.Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, "could not be imported") || !strings.Contains(c.Message, "checksum mismatch after 3 retries") {
		t.Errorf("failure message %q", c.Message)
	}
}

// harnessRisks are the risks of the harness's cluster, which has no
// provisioning Cluster and no Machines.
var harnessRisks = []string{string(preflight.RiskClusterNotReady), string(preflight.RiskMachineNodeMismatch)}

// TestRisksAtInitialize: a risk that appeared after admission fails the plan
// at Initialize, naming the risk and how to accept it; accepted by name and
// retried, the plan goes on, and status.acceptedRisks records what it went on
// with. The disk-space risk, judged only here and first, is accepted the
// same way.
func TestRisksAtInitialize(t *testing.T) {
	h := plantest.New(t)
	h.Cluster(3)
	h.Cfg.RetryWindow = time.Hour
	accepted := slices.Clone(harnessRisks)
	node := &corev1.Node{}
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: "node-3"}, node))
	node.Spec.Unschedulable = true
	h.Must(h.C.Update(h.Ctx(), node))
	h.Kubelet.Set("node-2", 100<<30, 80<<30)

	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), AcceptRisks: accepted}, v1beta1.AnnotationSkipWebhook, "false")
	p = h.WaitPhase(p.Name, v1beta1.PhaseFailed)
	c := p.Condition(v1beta1.ConditionProgressing)
	for _, want := range []string{`risk InsufficientDiskSpace: node "node-2" will reach 93.00% of its nodefs`, "spec.acceptRisks: [InsufficientDiskSpace]", "retry"} {
		if c == nil || !strings.Contains(c.Message, want) {
			t.Errorf("Progressing %+v lacks %q", c, want)
		}
	}
	if f := p.LastFailure(); f == nil || f.RetryDeadline == nil {
		t.Fatalf("failure %+v: a risk accepted later is cured by a retry", f)
	}

	// Accepted, the full disk lets the plan on to the cluster's risks: the
	// cordoned node, accepted in turn.
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: p.Name}, p))
	p.Spec.AcceptRisks = append(p.Spec.AcceptRisks, string(preflight.RiskInsufficientDiskSpace))
	h.Must(h.C.Update(h.Ctx(), p))
	h.Retry(p.Name, "disk")
	h.WaitProgressing(p.Name, `risk NodeCordoned: node "node-3" is cordoned`)
	h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Name: p.Name}, p))
	p.Spec.AcceptRisks = append(p.Spec.AcceptRisks, string(preflight.RiskNodeCordoned))
	h.Must(h.C.Update(h.Ctx(), p))
	h.Retry(p.Name, "cordoned")
	p = h.WaitPhase(p.Name, v1beta1.PhaseISODownloading)

	var got []string
	for _, a := range p.Status.AcceptedRisks {
		got = append(got, a.Name)
		if a.Level != preflight.LevelError || a.Message == "" || a.AcceptedAt.IsZero() {
			t.Errorf("accepted risk %+v: want its level, what was found and when", a)
		}
	}
	slices.Sort(got)
	if want := []string{"ClusterNotReady", "InsufficientDiskSpace", "MachineNodeMismatch", "NodeCordoned"}; !slices.Equal(got, want) {
		t.Errorf("status.acceptedRisks %v, want %v", got, want)
	}
	h.WaitEvent(p.Name, `RiskAccepted: risk NodeCordoned accepted (spec.acceptRisks): node "node-3" is cordoned`)
}

// TestRisksAreNotGatheredWhileAKubeletIsAwaited: the cluster's risks are
// judged from a score of lists across the cluster; a pass that waits for a
// kubelet does not make them (on a large cluster, every few seconds for
// minutes), and once the kubelet answers the risks are judged.
func TestRisksAreNotGatheredWhileAKubeletIsAwaited(t *testing.T) {
	h := plantest.New(t)
	h.Cluster(3)
	h.Kubelet.Drop("node-3")
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), AcceptRisks: harnessRisks}, v1beta1.AnnotationSkipWebhook, "false")
	h.WaitProgressing(p.Name, "retrying the disk-space check")
	pdbs := apicount.Key{Verb: "list", Resource: "poddisruptionbudgets"}
	requests := h.RequestsDuring(func() {
		for range 2 {
			before := h.Kubelet.Reads()
			h.Touch(p.Name)
			h.Eventually("a pass of the disk-space check", func() (bool, string) {
				return h.Kubelet.Reads() > before, "no pass read the kubelets yet"
			})
		}
	})
	if n := requests[pdbs]; n > 0 {
		t.Errorf("%d lists of PodDisruptionBudgets while the disk-space check waited: the risks were gathered on its passes (%s)", n, apicount.Format(requests))
	}
	h.Kubelet.Set("node-3", 100<<30, 10<<30)
	requests = h.RequestsDuring(func() { h.WaitPhase(p.Name, v1beta1.PhaseISODownloading) })
	if requests[pdbs] == 0 {
		t.Errorf("the plan left Initialize without judging the cluster's risks (%s)", apicount.Format(requests))
	}
}

package phase_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/names"
	"github.com/harvester/upgrade-toolkit/internal/plantest"
)

// TestBadInputStraightToTheAPI: plans written with the webhook off (or
// before it is installed). What the CRD's schema refuses never reaches the
// manager; what it admits fails the plan with a message that names the
// field and says what to do, and nothing is left behind.
func TestBadInputStraightToTheAPI(t *testing.T) {
	refused := []struct {
		name string
		plan *v1beta1.UpgradePlan
		want string
	}{
		{"neither version nor image", &v1beta1.UpgradePlan{}, "at least one of spec.version or spec.image must be set"},
		{"a version that is not an object name", &v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0 ")}}, "spec.version must be the name of a Version object"},
		{"an upgrade tag with a slash", &v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Upgrade: ptr.To("a/b")}}, "spec.upgrade must be a container image tag"},
		{"an unknown health gate", &v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"),
			NodeUpgradeOption: &v1beta1.NodeUpgradeOption{HealthGate: ptr.To[v1beta1.HealthGateMode]("Off")}}}, "spec.nodeUpgradeOption.healthGate: Unsupported value: \"Off\""},
	}
	h := plantest.New(t)
	h.Harvester(1)
	for _, tt := range refused {
		tt.plan.GenerateName = "bad-"
		err := h.C.Create(h.Ctx(), tt.plan)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want a refusal saying %q", tt.name, err, tt.want)
		}
	}

	failed := []struct {
		name        string
		planName    string
		spec        v1beta1.UpgradePlanSpec
		annotations []string
		prepare     func()
		want        string
	}{
		{name: "a name with a dot", planName: "hvst.upgrade", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
			want: `metadata.name "hvst.upgrade" must start with a lowercase letter and contain only lowercase letters, digits and '-' (no '.')`},
		{name: "a bad annotation value", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
			annotations: []string{v1beta1.AnnotationMinCertsExpirationInDay, "soon"},
			want:        `annotation management.harvesterhci.io/min-certs-expiration-in-day has the value "soon": must be a whole number of days greater than 0, e.g. "7" (the default)`},
		{name: "a Version without an ISO URL", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.9.0")},
			prepare: func() {
				h.Must(h.C.Create(h.Ctx(), &harvesterv1beta1.Version{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "v1.9.0"}}))
			},
			want: "Version harvester-system/v1.9.0 has no spec.isoURL: set the URL of the release ISO and create a new plan"},
		{name: "a Version that does not exist", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v2.0.0")},
			want: "Version harvester-system/v2.0.0 does not exist: create it and retry the plan, or create a new plan that names an existing Version or image"},
	}
	for _, tt := range failed {
		if tt.prepare != nil {
			tt.prepare()
		}
		var p *v1beta1.UpgradePlan
		if tt.planName != "" {
			p = &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: tt.planName}, Spec: tt.spec}
			h.Must(h.C.Create(h.Ctx(), p))
		} else {
			p = h.Plan(tt.spec, tt.annotations...)
		}
		h.Eventually(tt.name, func() (bool, string) {
			if c := h.Get(p.Name).Condition(v1beta1.ConditionProgressing); c != nil && strings.Contains(c.Message, "waiting for Version") {
				// The missing Version is waited for: move past its deadline.
				h.Clock.Step(h.Cfg.Deadlines.MissingObject)
				h.Touch(p.Name)
			}
			got := h.Get(p.Name)
			return got.Status.CurrentPhase == v1beta1.PhaseFailed && len(got.Finalizers) == 0, plantest.Describe(got)
		})
		if c := h.Get(p.Name).Condition(v1beta1.ConditionProgressing); !strings.Contains(c.Message, tt.want) {
			t.Errorf("%s: failure %q, want %q", tt.name, c.Message, tt.want)
		}
		h.Must(h.C.Delete(h.Ctx(), p))
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForeignObjectsInOddStates: objects of other components the toolkit
// reads, in states they should not be in (a Machine without a node
// reference, a machine-plan Secret without its machine or with a plan that
// is not JSON, asking for a drain; the harness's managed Nodes have no
// addresses at all), are left alone, and the upgrade of the real nodes goes
// on to Succeeded.
func TestForeignObjectsInOddStates(t *testing.T) {
	h := plantest.New(t)
	nodes := h.Harvester(2)
	odd := &capiv1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "custom-orphan"},
		Spec: capiv1beta1.MachineSpec{ClusterName: cluster.LocalClusterName}}
	h.Must(h.C.Create(h.Ctx(), odd))
	drain, _ := json.Marshal(map[string]any{"enabled": true, "node": "ghost"})
	for name, labels := range map[string]map[string]string{
		"custom-orphan-machine-plan": {cluster.LabelMachineName: odd.Name}, // a Machine without a node
		"no-machine-machine-plan":    nil,                                  // no machine at all
		"gone-machine-plan":          {cluster.LabelMachineName: "custom-gone"},
	} {
		h.Must(h.C.Create(h.Ctx(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: name, Labels: labels,
				Annotations: map[string]string{cluster.AnnotationRancherPreDrain: string(drain)}},
			Type: cluster.MachinePlanSecretType,
			Data: map[string][]byte{"plan": []byte("{not json")},
		}))
	}
	p := h.Plan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	p = h.DriveToNodeUpgrading(p.Name, nodes)
	for _, n := range nodes {
		h.UpgradeNode(p.Name, n)
	}
	p = h.WaitPhase(p.Name, v1beta1.PhaseCleaningUp)
	for _, n := range nodes {
		h.FinishJob(cluster.CattleNamespace, h.SucJob(names.ImageCleanupPlan(p.Name), n), true)
	}
	p = h.WaitPhase(p.Name, v1beta1.PhaseSucceeded)
	if _, ok := p.Status.NodeUpgradeStatuses["ghost"]; ok || len(p.Status.NodeUpgradeStatuses) != len(nodes) {
		t.Errorf("node statuses %v", p.Status.NodeUpgradeStatuses)
	}
	for _, name := range []string{"custom-orphan-machine-plan", "no-machine-machine-plan", "gone-machine-plan"} {
		s := &corev1.Secret{}
		h.Must(h.C.Get(h.Ctx(), client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: name}, s))
		if s.Annotations[v1beta1.AnnotationPreHook] != "" {
			t.Errorf("the toolkit acknowledged a drain of %s, which belongs to no managed node", name)
		}
	}
}

package v1beta1_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1 "github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, &env)) }

func newPlan(spec v1beta1.UpgradePlanSpec) *v1beta1.UpgradePlan {
	return &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{GenerateName: "hvst-upgrade-"}, Spec: spec}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// wantInvalid asserts that err is a 422 Invalid whose message contains msg.
func wantInvalid(t *testing.T, err error, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want rejection with %q", msg)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v; want an Invalid error with %q", err, msg)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Fatalf("rejection %q does not say %q", err.Error(), msg)
	}
}

func TestValidPlansAreAccepted(t *testing.T) {
	for name, spec := range map[string]v1beta1.UpgradePlanSpec{
		"version only": {Version: ptr.To("v1.8.0")},
		"image only":   {Image: ptr.To("harvester-master-amd64")},
		"both":         {Version: ptr.To("master-head"), Image: ptr.To("harvester-master-amd64")},
		"every option": {
			Version:            ptr.To("master-head"),
			Upgrade:            ptr.To("main-head"),
			Force:              ptr.To(true),
			ImagePreloadOption: &v1beta1.ImagePreloadOption{Concurrency: ptr.To(-1)},
			NodeUpgradeOption:  &v1beta1.NodeUpgradeOption{PauseNodes: []string{"charlie-1-tink-system", "charlie-3-tink-system"}},
			RestoreVM:          ptr.To(true),
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := newPlan(spec)
			if err := env.Client.Create(ctx(t), p); err != nil {
				t.Fatalf("create: %v", err)
			}
			if !strings.HasPrefix(p.Name, "hvst-upgrade-") {
				t.Errorf("generated name %q", p.Name)
			}
			if p.Spec.Force == nil || p.Spec.RestoreVM == nil {
				t.Errorf("defaults not applied: force=%v restoreVM=%v", p.Spec.Force, p.Spec.RestoreVM)
			}
		})
	}
}

func TestCreateValidation(t *testing.T) {
	long := strings.Repeat("a", 254)
	tests := map[string]struct {
		spec v1beta1.UpgradePlanSpec
		msg  string
	}{
		"neither version nor image": {v1beta1.UpgradePlanSpec{Upgrade: ptr.To("dev")}, "at least one of spec.version or spec.image must be set"},
		"empty version":             {v1beta1.UpgradePlanSpec{Version: ptr.To("")}, "spec.version"},
		"version with a slash":      {v1beta1.UpgradePlanSpec{Version: ptr.To("harvester-system/v1.8.0")}, "spec.version must be the name of a Version object"},
		"version upper case":        {v1beta1.UpgradePlanSpec{Version: ptr.To("V1.8.0")}, "spec.version must be the name of a Version object"},
		"version too long":          {v1beta1.UpgradePlanSpec{Version: ptr.To(long)}, "spec.version"},
		"image with a namespace":    {v1beta1.UpgradePlanSpec{Image: ptr.To("default/iso")}, "without a namespace"},
		"bad upgrade tag":           {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Upgrade: ptr.To("-dev")}, "spec.upgrade must be a container image tag"},
		"tag with a colon":          {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Upgrade: ptr.To("repo:tag")}, "spec.upgrade must be a container image tag"},
		"empty pause node": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"),
			NodeUpgradeOption: &v1beta1.NodeUpgradeOption{PauseNodes: []string{""}}}, "spec.nodeUpgradeOption.pauseNodes[0]"},
		"duplicate pause node": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"),
			NodeUpgradeOption: &v1beta1.NodeUpgradeOption{PauseNodes: []string{"n1", "n1"}}}, "Duplicate value"},
		"window start past midnight": {windowSpec(v1beta1.MaintenanceWindow{Start: "24:00", End: "04:00"}),
			"start must be a time of day as HH:MM on the 24-hour clock, e.g. 22:00"},
		"window without an end": {windowSpec(v1beta1.MaintenanceWindow{Start: "22:00"}),
			"end must be a time of day as HH:MM on the 24-hour clock, e.g. 04:00"},
		"window day in full": {windowSpec(v1beta1.MaintenanceWindow{Days: []string{"Monday"}, Start: "22:00", End: "04:00"}),
			`spec.nodeUpgradeOption.maintenanceWindows[0].days[0]: Unsupported value: "Monday"`},
		"window time zone not a name": {windowSpec(v1beta1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Europe Berlin"}),
			"timeZone must be an IANA time zone name, e.g. Europe/Berlin or UTC"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			wantInvalid(t, env.Client.Create(ctx(t), newPlan(tt.spec)), tt.msg)
		})
	}
}

func windowSpec(ws ...v1beta1.MaintenanceWindow) v1beta1.UpgradePlanSpec {
	return v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), NodeUpgradeOption: &v1beta1.NodeUpgradeOption{MaintenanceWindows: ws}}
}

// TestMaintenanceWindowDefaults: a window without a time zone is in UTC;
// the windows may be changed after creation.
func TestMaintenanceWindowDefaults(t *testing.T) {
	p := newPlan(windowSpec(v1beta1.MaintenanceWindow{Days: []string{"Sat", "Sun"}, Start: "22:00", End: "04:00"}))
	if err := env.Client.Create(ctx(t), p); err != nil {
		t.Fatalf("create: %v", err)
	}
	if tz := p.Spec.NodeUpgradeOption.MaintenanceWindows[0].TimeZone; tz != "UTC" {
		t.Errorf("time zone %q, want the default UTC", tz)
	}
	p.Spec.NodeUpgradeOption.MaintenanceWindows = append(p.Spec.NodeUpgradeOption.MaintenanceWindows,
		v1beta1.MaintenanceWindow{Start: "00:00", End: "00:00", TimeZone: "America/New_York"})
	if err := env.Client.Update(ctx(t), p); err != nil {
		t.Errorf("changing the windows: %v", err)
	}
}

func TestImmutableFields(t *testing.T) {
	tests := map[string]struct {
		initial v1beta1.UpgradePlanSpec
		change  func(*v1beta1.UpgradePlanSpec)
		msg     string
	}{
		"change version": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
			func(s *v1beta1.UpgradePlanSpec) { s.Version = ptr.To("v1.8.1") }, "spec.version is immutable after creation"},
		"remove version": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Image: ptr.To("iso")},
			func(s *v1beta1.UpgradePlanSpec) { s.Version = nil }, "spec.version is immutable after creation"},
		"add version": {v1beta1.UpgradePlanSpec{Image: ptr.To("iso")},
			func(s *v1beta1.UpgradePlanSpec) { s.Version = ptr.To("v1.8.0") }, "spec.version is immutable after creation"},
		"change image": {v1beta1.UpgradePlanSpec{Image: ptr.To("iso")},
			func(s *v1beta1.UpgradePlanSpec) { s.Image = ptr.To("other-iso") }, "spec.image is immutable after creation"},
		"add image": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
			func(s *v1beta1.UpgradePlanSpec) { s.Image = ptr.To("iso") }, "spec.image is immutable after creation"},
		"change upgrade": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Upgrade: ptr.To("dev")},
			func(s *v1beta1.UpgradePlanSpec) { s.Upgrade = ptr.To("main-head") }, "spec.upgrade is immutable after creation"},
		"add upgrade": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
			func(s *v1beta1.UpgradePlanSpec) { s.Upgrade = ptr.To("dev") }, "spec.upgrade is immutable after creation"},
		"remove upgrade": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Upgrade: ptr.To("dev")},
			func(s *v1beta1.UpgradePlanSpec) { s.Upgrade = nil }, "spec.upgrade is immutable after creation"},
		"turn dryRun on": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
			func(s *v1beta1.UpgradePlanSpec) { s.DryRun = ptr.To(true) }, "spec.dryRun is immutable after creation"},
		"turn dryRun off": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), DryRun: ptr.To(true)},
			func(s *v1beta1.UpgradePlanSpec) { s.DryRun = ptr.To(false) }, "spec.dryRun is immutable after creation"},
		"turn logEnabled off": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")},
			func(s *v1beta1.UpgradePlanSpec) { s.LogEnabled = ptr.To(false) }, "spec.logEnabled is immutable after creation"},
		"turn logEnabled on": {v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), LogEnabled: ptr.To(false)},
			func(s *v1beta1.UpgradePlanSpec) { s.LogEnabled = ptr.To(true) }, "spec.logEnabled is immutable after creation"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p := newPlan(tt.initial)
			if err := env.Client.Create(ctx(t), p); err != nil {
				t.Fatalf("create: %v", err)
			}
			tt.change(&p.Spec)
			wantInvalid(t, env.Client.Update(ctx(t), p), tt.msg)
		})
	}
}

func TestMutableFields(t *testing.T) {
	p := newPlan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Upgrade: ptr.To("dev")})
	if err := env.Client.Create(ctx(t), p); err != nil {
		t.Fatalf("create: %v", err)
	}
	p.Spec.Force = ptr.To(true)
	p.Spec.RestoreVM = ptr.To(true)
	p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"n1", "n2"}}
	p.Spec.ImagePreloadOption = &v1beta1.ImagePreloadOption{Concurrency: ptr.To(2)}
	if err := env.Client.Update(ctx(t), p); err != nil {
		t.Fatalf("update of mutable fields rejected: %v", err)
	}
	p.Spec.NodeUpgradeOption.PauseNodes = []string{"n2"}
	if err := env.Client.Update(ctx(t), p); err != nil {
		t.Fatalf("removing a paused node rejected: %v", err)
	}
}

func TestStatusRoundTrip(t *testing.T) {
	p := newPlan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	if err := env.Client.Create(ctx(t), p); err != nil {
		t.Fatalf("create: %v", err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	p.Status = v1beta1.UpgradePlanStatus{
		CurrentPhase: v1beta1.PhaseNodeUpgrading,
		PhaseTransitionTimestamps: []v1beta1.PhaseTransitionTimestamp{
			{Phase: v1beta1.PhaseInitializing, PhaseTransitionTimestamp: now},
			{Phase: v1beta1.PhaseNodeUpgrading, PhaseTransitionTimestamp: now},
		},
		NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
			"n1": {State: v1beta1.NodeStatePostDrained, LastTransitionTime: &now},
			"n2": {State: v1beta1.NodeStatePreDrainFailed, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
		},
		PreviousVersion: ptr.To("v1.7.1"),
		ReleaseMetadata: &v1beta1.ReleaseMetadata{
			Harvester: "v1.8.0", HarvesterChart: "1.8.0", OS: "Harvester v1.8.0", Kubernetes: "v1.35.2+rke2r1",
			Rancher: "v2.14.0", MonitoringChart: "108.0.2+up77.9.1-rancher.11", MinUpgradableVersion: "v1.7.0",
		},
		ISOImageID:          ptr.To(p.Name + "-iso"),
		Version:             &v1beta1.VersionSnapshot{ISOURL: "https://example.com/h.iso", ISOChecksum: "abc"},
		SingleNode:          ptr.To("n1"),
		ProvisionGeneration: ptr.To[int64](3),
		SavedSettings: &v1beta1.SavedSettings{
			LonghornReplicaReplenishmentWaitInterval: ptr.To("600"),
			DeschedulerEnabled:                       ptr.To(true),
			KubeVirt:                                 &v1beta1.SavedKubeVirt{WorkloadUpdateMethods: &[]string{}, ComparePatchAdded: true},
			Rancher:                                  &v1beta1.SavedRancher{UpgradeStrategy: &runtime.RawExtension{Raw: []byte(`{"controlPlaneConcurrency":"10%"}`)}},
		},
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: v1beta1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: string(v1beta1.PhaseNodeUpgrading), Message: "node upgrade paused: n2",
	})
	want := p.Status.DeepCopy()
	if err := env.Client.Status().Update(ctx(t), p); err != nil {
		t.Fatalf("status update: %v", err)
	}
	got := &v1beta1.UpgradePlan{}
	if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatalf("get: %v", err)
	}
	// The server stamps times in UTC; compare them as instants.
	for i := range want.Conditions {
		want.Conditions[i].LastTransitionTime = got.Status.Conditions[i].LastTransitionTime
	}
	if !apiequality.Semantic.DeepEqual(*want, got.Status) {
		t.Errorf("status did not round-trip:\nwant %+v\n got %+v", *want, got.Status)
	}
}

func TestStatusRejectsUnknownPhaseAndState(t *testing.T) {
	p := newPlan(v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")})
	if err := env.Client.Create(ctx(t), p); err != nil {
		t.Fatalf("create: %v", err)
	}
	p.Status.CurrentPhase = "Upgrading"
	wantInvalid(t, env.Client.Status().Update(ctx(t), p), "status.currentPhase")
	p.Status.CurrentPhase = v1beta1.PhaseInitializing
	p.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{"n1": {State: "Succeeded"}}
	wantInvalid(t, env.Client.Status().Update(ctx(t), p), "state")
}

// TestCRDDocumentsEverySpecField is what `kubectl explain upgradeplans.spec`
// shows: every field needs a description.
func TestCRDDocumentsEverySpecField(t *testing.T) {
	crd := &apiextv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx(t), client.ObjectKey{Name: "upgradeplans.management.harvesterhci.io"}, crd); err != nil {
		t.Fatalf("get CRD: %v", err)
	}
	if crd.Spec.Scope != apiextv1.ClusterScoped {
		t.Errorf("scope %s, want Cluster", crd.Spec.Scope)
	}
	if got := strings.Join(crd.Spec.Names.ShortNames, ","); got != "up,ups" {
		t.Errorf("short names %q, want up,ups", got)
	}
	v := crd.Spec.Versions[0]
	// The seeds' columns by default; PAUSED with -o wide only (priority 1).
	var cols []string
	for _, c := range v.AdditionalPrinterColumns {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		} else {
			cols = append(cols, fmt.Sprintf("%s(wide)", c.Name))
		}
	}
	if got := strings.Join(cols, ","); got != "VERSION,PHASE,AVAILABLE,PROGRESSING,DEGRADED,PAUSED(wide),AGE" {
		t.Errorf("printer columns %q", got)
	}
	spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
	var walk func(path string, s apiextv1.JSONSchemaProps)
	walk = func(path string, s apiextv1.JSONSchemaProps) {
		if strings.TrimSpace(s.Description) == "" {
			t.Errorf("%s has no description", path)
		}
		for name, p := range s.Properties {
			walk(path+"."+name, p)
		}
	}
	walk("spec", spec)
	windows := spec.Properties["nodeUpgradeOption"].Properties["maintenanceWindows"]
	if windows.Items == nil || windows.Items.Schema == nil || len(windows.Items.Schema.Properties) != 4 {
		t.Fatalf("spec.nodeUpgradeOption.maintenanceWindows has no items of four fields: %+v", windows.Items)
	}
	walk("spec.nodeUpgradeOption.maintenanceWindows[]", *windows.Items.Schema)
	// abort (issue 36) is the eleventh, imageCleanupOption (issue 37) the
	// twelfth, acceptRisks (issue 38) the thirteenth.
	if len(spec.Properties) != 13 {
		t.Errorf("spec has %d fields, want 13", len(spec.Properties))
	}
}

// TestUpgradeLogCRD is what `kubectl get upgradelogs` and `kubectl explain
// upgradelogs` show: cluster-scoped, the plan and the size in columns, every
// field described.
func TestUpgradeLogCRD(t *testing.T) {
	crd := &apiextv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx(t), client.ObjectKey{Name: "upgradelogs.management.harvesterhci.io"}, crd); err != nil {
		t.Fatalf("get CRD: %v", err)
	}
	if crd.Spec.Scope != apiextv1.ClusterScoped || crd.Spec.Names.Kind != "UpgradeLog" {
		t.Errorf("scope %s kind %s, want a cluster-scoped UpgradeLog", crd.Spec.Scope, crd.Spec.Names.Kind)
	}
	v := crd.Spec.Versions[0]
	var cols []string
	for _, c := range v.AdditionalPrinterColumns {
		cols = append(cols, c.Name)
	}
	if got := strings.Join(cols, ","); got != "PLAN,BYTES,TRUNCATED,AGE" {
		t.Errorf("printer columns %q", got)
	}
	var walk func(path string, s apiextv1.JSONSchemaProps)
	walk = func(path string, s apiextv1.JSONSchemaProps) {
		if strings.TrimSpace(s.Description) == "" {
			t.Errorf("%s has no description", path)
		}
		for name, p := range s.Properties {
			walk(path+"."+name, p)
		}
		if s.Items != nil && s.Items.Schema != nil {
			for name, p := range s.Items.Schema.Properties {
				walk(path+"[]."+name, p)
			}
		}
	}
	walk("spec", v.Schema.OpenAPIV3Schema.Properties["spec"])
	walk("status", v.Schema.OpenAPIV3Schema.Properties["status"])
}

// TestInsightBoundsMatchTheCRD: the limits Evaluate keeps to are the CRD's,
// which refuses a whole status beyond them.
func TestInsightBoundsMatchTheCRD(t *testing.T) {
	crd := &apiextv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx(t), client.ObjectKey{Name: "upgradeplans.management.harvesterhci.io"}, crd); err != nil {
		t.Fatalf("get CRD: %v", err)
	}
	insights := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["insights"]
	item := insights.Items.Schema
	for _, c := range []struct {
		what string
		crd  *int64
		want int
	}{
		{"status.insights maxItems", insights.MaxItems, v1beta1.MaxInsights},
		{"status.insights[].objects maxItems", item.Properties["objects"].MaxItems, v1beta1.MaxInsightObjects},
		{"status.insights[].message maxLength", item.Properties["message"].MaxLength, v1beta1.MaxInsightMessage},
	} {
		if c.crd == nil || *c.crd != int64(c.want) {
			t.Errorf("%s: the CRD says %v, the Go constant %d", c.what, c.crd, c.want)
		}
	}
}

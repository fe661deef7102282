package webhook_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

func node(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

func machine(name string) *capiv1beta1.Machine {
	return &capiv1beta1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: name}}
}

func localCluster() *provisioningv1.Cluster {
	return &provisioningv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName}}
}

// Faults of the cluster, each tripping one check.
var (
	nodeNotReady = func(t *testing.T) {
		modify(t, node("n2"), func(n *corev1.Node) {
			n.Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "PLEG is not healthy"}
		})
	}
	nodeCordoned = func(t *testing.T) { modify(t, node("n3"), func(n *corev1.Node) { n.Spec.Unschedulable = true }) }
	clusterBusy  = func(t *testing.T) {
		modify(t, localCluster(), func(c *provisioningv1.Cluster) {
			c.Status.Ready = false
			c.Status.Conditions = []common.Condition{{Type: "Ready", Status: "False", Message: "waiting for etcd"}}
		})
	}
	machineDown = func(t *testing.T) {
		modify(t, machine("m-n1"), func(m *capiv1beta1.Machine) { m.Status.Phase = "Failed" })
	}
	orphanNode = func(t *testing.T) {
		modify(t, node("n2"), func(n *corev1.Node) { n.Annotations[cluster.AnnotationCAPIMachine] = "m-deleted" })
	}
	degradedVolume = func(t *testing.T) {
		createTemp(t, volume("vol-degraded", 3, cluster.LonghornVolumeAttached, cluster.LonghornRobustnessDegraded))
	}
	activeSingleReplica = func(t *testing.T) {
		createTemp(t, volume("vol-single", 1, cluster.LonghornVolumeAttached, "healthy"))
	}
	detachedSingleReplica = func(t *testing.T) { createTemp(t, volume("vol-parked", 1, "detached", "unknown")) }
	backupRunning         = func(t *testing.T) {
		createTemp(t, &harvesterv1beta1.VirtualMachineBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nightly-1"},
			Spec:       harvesterv1beta1.VirtualMachineBackupSpec{Source: harvesterv1beta1.BackupSource{Kind: "VirtualMachine", Name: "vm-plain"}, Type: "backup"},
			Status:     &harvesterv1beta1.VirtualMachineBackupStatus{ReadyToUse: ptr.To(false), Progress: 40},
		})
	}
	scheduleActive = func(t *testing.T) {
		createTemp(t, &harvesterv1beta1.ScheduleVMBackup{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hourly"},
			Spec:       harvesterv1beta1.ScheduleVMBackupSpec{Cron: "0 * * * *"},
		})
	}
	pinnedVM = func(t *testing.T) {
		v := vmi("vm-gpu", "n2")
		v.Spec.Domain.Devices.GPUs = []kubevirtv1.HostDevice{{Name: "gpu1", DeviceName: "nvidia.com/TU104GL_Tesla_T4"}}
		createTemp(t, v)
	}
	chartNotReady = func(t *testing.T) {
		modify(t, &managementv3.ManagedChart{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "harvester"}},
			func(c *managementv3.ManagedChart) {
				c.Status.Conditions = []common.Condition{{Type: "Ready", Status: "False", Message: "Modified(1) [Cluster fleet-local/local]"}}
			})
	}
	addonMoving = func(t *testing.T) {
		modify(t, &harvesterv1beta1.Addon{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.KubeSystemNamespace, Name: cluster.DeschedulerAddon}},
			func(a *harvesterv1beta1.Addon) { a.Status.Status = "AddonUpdating" })
	}
	otherPlanRunning = func(t *testing.T) {
		p := plan("hvst-upgrade-first")
		p.Annotations = map[string]string{v1beta1.AnnotationSkipWebhook: "true"}
		if err := env.Client.Create(ctxFor(t), p); err != nil {
			t.Fatal(err)
		}
		setPhase(t, p, v1beta1.PhaseImagePreloading)
	}
)

type malformed struct {
	name  string // the plan's name
	spec  v1beta1.UpgradePlanSpec
	annot map[string]string
	fault func(t *testing.T)
	want  string
}

var version = v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0")}

func withPause(nodes ...string) v1beta1.UpgradePlanSpec {
	return v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), NodeUpgradeOption: &v1beta1.NodeUpgradeOption{PauseNodes: nodes}}
}

// TestRefusedPlansAreNeverStored: malformed or unsafe plans, each refused
// with a message that says what is wrong, and none stored for the
// controller to act on.
func TestRefusedPlansAreNeverStored(t *testing.T) {
	a := func(k, v string) map[string]string { return map[string]string{k: v} }
	tests := []malformed{
		// The plan's name.
		{name: "upgrade.v1.8.0", spec: version, want: `metadata.name: Invalid value: "upgrade.v1.8.0": must start with a lowercase letter and contain only lowercase letters, digits and '-' (no '.')`},
		{name: "180-upgrade", spec: version, want: `metadata.name: Invalid value: "180-upgrade": must start with a lowercase letter`},
		{name: "Upgrade", spec: version, want: `metadata.name: Invalid value: "Upgrade": a lowercase RFC 1123 subdomain`},
		{name: "upgrade_1", spec: version, want: `a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters`},
		// The spec, by the CRD's rules.
		{name: "no-release", spec: v1beta1.UpgradePlanSpec{Upgrade: ptr.To("dev")}, want: "at least one of spec.version or spec.image must be set"},
		{name: "version-with-namespace", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("harvester-system/v1.8.0")}, want: "spec.version must be the name of a Version object"},
		{name: "image-with-namespace", spec: v1beta1.UpgradePlanSpec{Image: ptr.To("default/iso")}, want: "without a namespace"},
		{name: "bad-toolkit-tag", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Upgrade: ptr.To("-dev")}, want: "spec.upgrade must be a container image tag"},
		{name: "empty-pause-entry", spec: withPause(""), want: "spec.nodeUpgradeOption.pauseNodes[0]"},
		{name: "empty-pause-entry-later", spec: withPause("n1", ""), want: "spec.nodeUpgradeOption.pauseNodes[1]"},
		{name: "duplicate-pause-entry", spec: withPause("n1", "n1"), want: "Duplicate value"},
		// The spec, by the webhook.
		{name: "unknown-version", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v9.9.9")}, want: `spec.version: Not found: "v9.9.9": no Version "v9.9.9" in harvester-system; create it first`},
		{name: "unknown-image", spec: v1beta1.UpgradePlanSpec{Image: ptr.To("missing-iso")}, want: `spec.image: Not found: "missing-iso": no VirtualMachineImage "missing-iso" in harvester-system`},
		{name: "pause-unknown-node", spec: withPause("n1", "node-4"), want: `spec.nodeUpgradeOption.pauseNodes[1]: Not found: "node-4": is not a managed node of this cluster (managed nodes: n1, n2, n3)`},
		// The annotations.
		{name: "skip-webhook-yes", spec: version, annot: a(v1beta1.AnnotationSkipWebhook, "yes"), want: `metadata.annotations[management.harvesterhci.io/skip-webhook]: Invalid value: "yes": must be "true" or "false"`},
		{name: "skip-webhook-capital", spec: version, annot: a(v1beta1.AnnotationSkipWebhook, "True"), want: `Invalid value: "True": must be "true" or "false"`},
		{name: "skip-single-replica-1", spec: version, annot: a(v1beta1.AnnotationSkipSingleReplicaDetachedVol, "1"), want: `metadata.annotations[management.harvesterhci.io/skip-single-replica-detached-vol]: Invalid value: "1"`},
		{name: "allow-deletion-on", spec: version, annot: a(v1beta1.AnnotationAllowDeletion, "on"), want: `metadata.annotations[management.harvesterhci.io/allow-deletion]: Invalid value: "on"`},
		{name: "skip-gc-empty", spec: version, annot: a(v1beta1.AnnotationSkipGCThresholdCheck, ""), want: `metadata.annotations[management.harvesterhci.io/skip-garbage-collection-threshold-check]: Invalid value: ""`},
		{name: "min-certs-negative", spec: version, annot: a(v1beta1.AnnotationMinCertsExpirationInDay, "-7"), want: `metadata.annotations[management.harvesterhci.io/min-certs-expiration-in-day]: Invalid value: "-7": must be a whole number of days greater than 0`},
		{name: "min-certs-zero", spec: version, annot: a(v1beta1.AnnotationMinCertsExpirationInDay, "0"), want: `Invalid value: "0": must be a whole number of days greater than 0`},
		{name: "min-certs-words", spec: version, annot: a(v1beta1.AnnotationMinCertsExpirationInDay, "a week"), want: `Invalid value: "a week": must be a whole number of days`},
		{name: "min-certs-fraction", spec: version, annot: a(v1beta1.AnnotationMinCertsExpirationInDay, "1.5"), want: `Invalid value: "1.5": must be a whole number of days`},
		{name: "toolkit-image-tagged", spec: version, annot: a(v1beta1.AnnotationUpgradeToolkitImage, "rancher/harvester-upgrade-toolkit:v1.8.0"), want: `metadata.annotations[management.harvesterhci.io/upgrade-toolkit-image]: Invalid value: "rancher/harvester-upgrade-toolkit:v1.8.0": must be an image repository without a tag or digest`},
		{name: "toolkit-image-upper", spec: version, annot: a(v1beta1.AnnotationUpgradeToolkitImage, "Rancher/Toolkit"), want: `must be an image repository without a tag or digest`},
		{name: "toolkit-image-spaces", spec: version, annot: a(v1beta1.AnnotationUpgradeToolkitImage, "my registry/toolkit"), want: `must be an image repository without a tag or digest`},
		// The one upgrade slot, which no risk accepted frees; and an unknown risk.
		{name: "accepts-unknown-risk", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), AcceptRisks: []string{"NodeCordoned", "NodeCordonned"}},
			want: `spec.acceptRisks[1]: Unsupported value: "NodeCordonned": supported values: "NodeNotReady", "NodeCordoned"`},
		{name: "accepts-lowercase-risk", spec: v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), AcceptRisks: []string{"nodeCordoned"}},
			want: `spec.acceptRisks[0]: Invalid value: "nodeCordoned": spec.acceptRisks[0] in body should match`},
		{name: "other-plan-running", spec: version, fault: otherPlanRunning, want: `spec: Forbidden: another upgrade "hvst-upgrade-first" is in progress (phase ImagePreloading)`},
		// The cluster's state: one risk refused by name (every risk has its
		// own test in TestEveryRiskIsRaisedOnTheWorld).
		{name: "node-not-ready", spec: version, fault: nodeNotReady, want: `spec.acceptRisks: Forbidden: risk NodeNotReady: node "n2" is not Ready (KubeletNotReady: PLEG is not healthy)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			removePlansAfter(t)
			if tt.fault != nil {
				tt.fault(t)
			}
			before := storedPlans(t)
			p := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: tt.name, Annotations: tt.annot}, Spec: tt.spec}
			err := env.Client.Create(ctxFor(t), p)
			if err == nil {
				t.Fatalf("admitted; want refused with %q", tt.want)
			}
			if !apierrors.IsInvalid(err) {
				t.Errorf("got %v; want a 422 Invalid", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("refusal does not say what is wrong:\n got %s\nwant %s", err, tt.want)
			}
			if after := storedPlans(t); after != before {
				t.Errorf("%d plans stored before, %d after: the refused plan reached the controller", before, after)
			}
		})
	}
}

func TestHealthyPlanIsAdmittedWithoutWarnings(t *testing.T) {
	removePlansAfter(t)
	c, w := clientWithWarnings(t)
	for _, p := range []*v1beta1.UpgradePlan{plan("by-version"), {ObjectMeta: metav1.ObjectMeta{Name: "by-image"},
		Spec: v1beta1.UpgradePlanSpec{Image: ptr.To("uploaded-iso"), NodeUpgradeOption: &v1beta1.NodeUpgradeOption{PauseNodes: nodeNames}}}} {
		if err := c.Create(ctxFor(t), p); err != nil {
			t.Fatalf("healthy plan %s refused: %v", p.Name, err)
		}
		// Only one plan at a time: let the next one in.
		if err := c.Delete(ctxFor(t), p); err != nil {
			t.Fatalf("deleting the plan that has not started: %v", err)
		}
	}
	if got := w.all(); len(got) > 0 {
		t.Errorf("warnings %q", got)
	}
}

func TestEveryFailingCheckIsListed(t *testing.T) {
	removePlansAfter(t)
	nodeCordoned(t)
	backupRunning(t)
	addonMoving(t)
	err := env.Client.Create(ctxFor(t), plan("three-faults"))
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v; want a 422 Invalid", err)
	}
	var apiErr apierrors.APIStatus
	if !errors.As(err, &apiErr) {
		t.Fatalf("%v carries no API status", err)
	}
	status := apiErr.Status()
	if status.Details == nil || len(status.Details.Causes) != 3 {
		t.Fatalf("want three causes, got %+v", status.Details)
	}
	for _, want := range []string{`node "n3" is cordoned`, "VM backups or snapshots are in progress: default/nightly-1", `addon kube-system/descheduler is enabled but still on status "AddonUpdating"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not list %q", err, want)
		}
	}
	for _, c := range status.Details.Causes {
		if c.Field != "spec.acceptRisks" {
			t.Errorf("cause %q has field %q; want spec.acceptRisks", c.Message, c.Field)
		}
	}
}

func TestSkipAnnotations(t *testing.T) {
	t.Run("skip-webhook bypasses every check with a warning", func(t *testing.T) {
		removePlansAfter(t)
		nodeCordoned(t)
		pinnedVM(t)
		c, w := clientWithWarnings(t)
		p := plan("skipped")
		p.Spec.Version = ptr.To("v9.9.9")
		p.Annotations = map[string]string{v1beta1.AnnotationSkipWebhook: "true"}
		if err := c.Create(ctxFor(t), p); err != nil {
			t.Fatalf("skip-webhook refused: %v", err)
		}
		if got := strings.Join(w.all(), "\n"); !strings.Contains(got, "skip-webhook=true: the cluster's health") {
			t.Errorf("warnings %q", got)
		}
	})
	t.Run("skip-single-replica-detached-vol lets detached volumes through", func(t *testing.T) {
		removePlansAfter(t)
		detachedSingleReplica(t)
		c, w := clientWithWarnings(t)
		p := plan("accepts-detached")
		p.Annotations = map[string]string{v1beta1.AnnotationSkipSingleReplicaDetachedVol: "true"}
		if err := c.Create(ctxFor(t), p); err != nil {
			t.Fatalf("refused: %v", err)
		}
		if got := strings.Join(w.all(), "\n"); !strings.Contains(got, "default/vol-parked have no other copy") {
			t.Errorf("warnings %q", got)
		}
	})
	t.Run("but not attached ones", func(t *testing.T) {
		removePlansAfter(t)
		activeSingleReplica(t)
		p := plan("accepts-detached")
		p.Annotations = map[string]string{v1beta1.AnnotationSkipSingleReplicaDetachedVol: "true"}
		if err := env.Client.Create(ctxFor(t), p); err == nil || !strings.Contains(err.Error(), "active single-replica volumes found: default/vol-single") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("restoreVM lets non-migratable VMs through, listed in a warning", func(t *testing.T) {
		removePlansAfter(t)
		pinnedVM(t)
		c, w := clientWithWarnings(t)
		p := plan("restores-vms")
		p.Spec.RestoreVM = ptr.To(true)
		p.Spec.Force = ptr.To(true)
		if err := c.Create(ctxFor(t), p); err != nil {
			t.Fatalf("refused: %v", err)
		}
		got := strings.Join(w.all(), "\n")
		for _, want := range []string{"these VMs cannot be live-migrated; each is shut down while its node is upgraded and restarted afterwards: default/vm-gpu",
			"spec.force is true"} {
			if !strings.Contains(got, want) {
				t.Errorf("warnings %q lack %q", got, want)
			}
		}
	})
}

// TestDryRunDefersTheClusterChecks: a dry run on an unhealthy cluster is
// admitted (its controller reports what is wrong), while a plan with the
// same spec but no dryRun is refused, and a dry run still has its own
// fields and annotations judged.
func TestDryRunDefersTheClusterChecks(t *testing.T) {
	removePlansAfter(t)
	nodeCordoned(t)
	pinnedVM(t)
	if err := env.Client.Create(ctxFor(t), plan("upgrade")); err == nil {
		t.Fatal("the unhealthy cluster must refuse an upgrade, or the dry run below proves nothing")
	}
	p := plan("preview")
	p.Spec.DryRun = ptr.To(true)
	if err := env.Client.Create(ctxFor(t), p); err != nil {
		t.Fatalf("dry run refused: %v", err)
	}
	bad := plan("bad-annotation")
	bad.Spec.DryRun = ptr.To(true)
	bad.Annotations = map[string]string{v1beta1.AnnotationSkipWebhook: "yes"}
	if err := env.Client.Create(ctxFor(t), bad); err == nil || !strings.Contains(err.Error(), `must be "true" or "false"`) {
		t.Errorf("a dry run with a bad annotation: %v", err)
	}
}

func TestUpdateRules(t *testing.T) {
	removePlansAfter(t)
	p := plan("running")
	if err := env.Client.Create(ctxFor(t), p); err != nil {
		t.Fatal(err)
	}
	setPhase(t, p, v1beta1.PhaseImagePreloading)

	p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"n2", "n3"}}
	if err := env.Client.Update(ctxFor(t), p); err != nil {
		t.Fatalf("pausing managed nodes refused: %v", err)
	}
	p.Spec.NodeUpgradeOption.PauseNodes = []string{"n2", "n3", "n4"}
	if err := env.Client.Update(ctxFor(t), p); err == nil || !strings.Contains(err.Error(),
		`spec.nodeUpgradeOption.pauseNodes[2]: Not found: "n4": is not a managed node`) {
		t.Fatalf("pausing an unknown node: got %v", err)
	}
	p.Spec.NodeUpgradeOption.PauseNodes = []string{"n3"}
	p.Spec.RestoreVM = ptr.To(true)
	if err := env.Client.Update(ctxFor(t), p); err == nil || !strings.Contains(err.Error(),
		"spec.restoreVM: Forbidden: cannot be changed while the upgrade runs (phase ImagePreloading)") {
		t.Fatalf("changing restoreVM while running: got %v", err)
	}
	p.Spec.RestoreVM = ptr.To(false)
	p.Annotations = map[string]string{v1beta1.AnnotationMinCertsExpirationInDay: "-1"}
	if err := env.Client.Update(ctxFor(t), p); err == nil || !strings.Contains(err.Error(), "must be a whole number of days greater than 0") {
		t.Fatalf("bad annotation on update: got %v", err)
	}
	p.Annotations = map[string]string{v1beta1.AnnotationAllowDeletion: "true"}
	c, w := clientWithWarnings(t)
	if err := c.Update(ctxFor(t), p); err != nil {
		t.Fatalf("resuming a node and allowing deletion refused: %v", err)
	}
	if got := strings.Join(w.all(), "\n"); !strings.Contains(got, "allow-deletion=true") {
		t.Errorf("warnings %q", got)
	}
}

func TestDeleteRules(t *testing.T) {
	tests := []struct {
		phase v1beta1.UpgradePlanPhase
		allow bool
		want  string // "" when the delete goes through
	}{
		{"", false, ""},
		{v1beta1.PhaseInitializing, false, "cannot delete UpgradePlan \"doomed\" while it runs (phase Initializing)"},
		{v1beta1.PhaseInitializing, true, ""},
		{v1beta1.PhaseImagePreloaded, false, "allow-deletion=true"},
		{v1beta1.PhaseImagePreloaded, true, ""},
		{v1beta1.PhaseClusterUpgrading, false, "while the cluster's components are being upgraded (phase ClusterUpgrading), whatever its annotations"},
		{v1beta1.PhaseClusterUpgrading, true, "whatever its annotations"},
		{v1beta1.PhaseClusterUpgraded, false, "allow-deletion"},
		{v1beta1.PhaseNodeUpgrading, false, "while the nodes are being upgraded (phase NodeUpgrading)"},
		{v1beta1.PhaseNodeUpgrading, true, "delete the ValidatingWebhookConfiguration " + opts.Webhook.ConfigurationName},
		{v1beta1.PhaseCleaningUp, true, ""},
		{v1beta1.PhaseSucceeded, false, ""},
		{v1beta1.PhaseFailed, false, ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.phase)+map[bool]string{true: "+allow-deletion"}[tt.allow], func(t *testing.T) {
			removePlansAfter(t)
			p := plan("doomed")
			if tt.allow {
				p.Annotations = map[string]string{v1beta1.AnnotationAllowDeletion: "true"}
			}
			if err := env.Client.Create(ctxFor(t), p); err != nil {
				t.Fatal(err)
			}
			if tt.phase != "" {
				setPhase(t, p, tt.phase)
			}
			err := env.Client.Delete(ctxFor(t), p)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("delete refused: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("deleted; want refused with %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("got %v; want %q", err, tt.want)
			case tt.want != "" && storedPlans(t) != 1:
				t.Fatalf("the refused delete removed the plan")
			}
		})
	}
}

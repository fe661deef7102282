package preflight

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

func testPlan() *v1beta1.UpgradePlan {
	return &v1beta1.UpgradePlan{
		ObjectMeta: metav1.ObjectMeta{Name: "hvst-upgrade-abcde"},
		Spec:       v1beta1.UpgradePlanSpec{Version: ptr.To("v1.8.0"), Force: ptr.To(false), RestoreVM: ptr.To(false)},
	}
}

func testNode(name string) corev1.Node {
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{cluster.LabelManagedNode: "true"},
			Annotations: map[string]string{cluster.AnnotationCAPIMachine: "m-" + name},
		},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

func testMachine(node string) capiv1beta1.Machine {
	return capiv1beta1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "m-" + node},
		Status:     capiv1beta1.MachineStatus{Phase: cluster.MachinePhaseRunning, NodeRef: &corev1.ObjectReference{Kind: "Node", Name: node}},
	}
}

func testVolume(name string, replicas int, state, robustness string) longhornv1beta2.Volume {
	return longhornv1beta2.Volume{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: name},
		Spec:       longhornv1beta2.VolumeSpec{NumberOfReplicas: replicas},
		Status: longhornv1beta2.VolumeStatus{State: state, Robustness: robustness,
			KubernetesStatus: longhornv1beta2.KubernetesStatus{Namespace: "default", PVCName: name + "-pvc"}},
	}
}

func testVMI(name, node string) kubevirtv1.VirtualMachineInstance {
	return kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Status:     kubevirtv1.VirtualMachineInstanceStatus{NodeName: node, Phase: "Running"},
	}
}

// healthyFacts is a three-node cluster ready to upgrade.
func healthyFacts() *AdmissionFacts {
	f := &AdmissionFacts{
		VersionExists: true,
		Cluster: &provisioningv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
			Status:     provisioningv1.ClusterStatus{Ready: true},
		},
		Volumes: []longhornv1beta2.Volume{testVolume("vol-a", 3, cluster.LonghornVolumeAttached, "healthy")},
		Backups: []harvesterv1beta1.VirtualMachineBackup{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "done"},
			Status:     &harvesterv1beta1.VirtualMachineBackupStatus{ReadyToUse: ptr.To(true)},
		}},
		BackupSchedules: []harvesterv1beta1.ScheduleVMBackup{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nightly"},
			Spec:       harvesterv1beta1.ScheduleVMBackupSpec{Cron: "0 0 * * *", Suspend: true},
		}},
		VMIs: []kubevirtv1.VirtualMachineInstance{testVMI("vm-a", "n1")},
		ManagedCharts: []managementv3.ManagedChart{{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "harvester"},
			Status:     managementv3.ManagedChartStatus{Conditions: []common.Condition{{Type: "Ready", Status: "True"}}},
		}},
		Addons: []harvesterv1beta1.Addon{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "on"}, Spec: harvesterv1beta1.AddonSpec{Enabled: true},
				Status: harvesterv1beta1.AddonStatus{Status: cluster.AddonStateDeployed}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "never"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "off"}, Status: harvesterv1beta1.AddonStatus{Status: cluster.AddonStateDisabled}},
		},
		OtherPlans: []v1beta1.UpgradePlan{{
			ObjectMeta: metav1.ObjectMeta{Name: "last-year"},
			Status:     v1beta1.UpgradePlanStatus{CurrentPhase: v1beta1.PhaseSucceeded},
		}},
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		f.Nodes = append(f.Nodes, testNode(n))
		f.Machines = append(f.Machines, testMachine(n))
	}
	return f
}

func errorStrings(r AdmissionResult) []string {
	var out []string
	for _, e := range r.Errors() {
		out = append(out, e.Error())
	}
	return out
}

func TestAdmitCreateHealthyClusterPasses(t *testing.T) {
	r := AdmitCreate(testPlan(), healthyFacts())
	if !r.Allowed() || len(r.Warnings()) > 0 {
		t.Fatalf("healthy cluster: errors %v, warnings %v", errorStrings(r), r.Warnings())
	}
}

// TestEveryAdmissionCheckGivesAVerdict: each check says it passed, or why
// not, under its own reason.
func TestEveryAdmissionCheckGivesAVerdict(t *testing.T) {
	reasons := func(r AdmissionResult, result v1beta1.CheckResult) map[Reason]bool {
		out := map[Reason]bool{}
		for _, v := range r.Verdicts {
			if v.Reason == "" || v.Message == "" {
				t.Errorf("verdict without a reason or a message: %+v", v)
			}
			if v.Result == result {
				out[v.Reason] = true
			}
		}
		return out
	}
	passed := reasons(AdmitCreate(testPlan(), healthyFacts()), v1beta1.CheckPassed)
	for _, c := range append(admissionChecks, admissionCheck{reason: ReasonPlanName}, admissionCheck{reason: ReasonAnnotations}) {
		if !passed[c.reason] {
			t.Errorf("check %s gave no passing verdict on a healthy cluster", c.reason)
		}
	}
	for _, c := range riskChecks {
		if !passed[c.reason] {
			t.Errorf("risk check %s gave no passing verdict on a healthy cluster", c.reason)
		}
	}
	// A risk found is named by the risk, not by its check.
	f := healthyFacts()
	f.Nodes[0].Spec.Unschedulable = true
	r := AdmitCreate(testPlan(), f)
	if failed := reasons(r, v1beta1.CheckFailed); !failed[RiskNodeCordoned] || len(failed) != 1 {
		t.Errorf("a cordoned node fails %v, want %s alone: %v", failed, RiskNodeCordoned, errorStrings(r))
	}
	// Accepted, it is a warning under the same name.
	p := testPlan()
	p.Spec.AcceptRisks = []string{string(RiskNodeCordoned)}
	r = AdmitCreate(p, f)
	if warned := reasons(r, v1beta1.CheckWarning); !r.Allowed() || !warned[RiskNodeCordoned] {
		t.Errorf("an accepted cordoned node: allowed %v, warnings %v", r.Allowed(), r.Warnings())
	}
}

func TestAdmitCreateRefuses(t *testing.T) {
	tests := []struct {
		name   string
		change func(p *v1beta1.UpgradePlan, f *AdmissionFacts)
		want   string // the whole error line, field path included
	}{
		{"unknown version", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.VersionExists = false },
			`spec.version: Not found: "v1.8.0": no Version "v1.8.0" in harvester-system; create it first`},
		{"unknown image", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { p.Spec.Image = ptr.To("iso") },
			`spec.image: Not found: "iso": no VirtualMachineImage "iso" in harvester-system`},
		{"image with a namespace", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { p.Spec.Image = ptr.To("default/iso") },
			`spec.image: Invalid value: "default/iso": must be the plain name of a VirtualMachineImage in harvester-system, without a namespace`},
		{"neither version nor image", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { p.Spec.Version = nil },
			`spec.version: Required value: set spec.version or spec.image`},
		{"another plan running", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.OtherPlans = append(f.OtherPlans, v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "busy"},
				Status: v1beta1.UpgradePlanStatus{CurrentPhase: v1beta1.PhaseNodeUpgrading}})
		}, `another upgrade "busy" is in progress (phase NodeUpgrading); only one upgrade can run at a time`},
		{"another plan waiting", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.OtherPlans = append(f.OtherPlans, v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "queued"}})
		}, `another upgrade "queued" is waiting to start`},
		{"another plan cleaning up", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.OtherPlans = append(f.OtherPlans, v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "going", DeletionTimestamp: &metav1.Time{}},
				Status: v1beta1.UpgradePlanStatus{CurrentPhase: v1beta1.PhaseImagePreloading}})
		}, `upgrade "going" is being deleted and still cleaning up`},
		{"no managed nodes", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			for i := range f.Nodes {
				f.Nodes[i].Labels = nil
			}
		}, `no managed nodes found (label harvesterhci.io/managed=true)`},
		{"node not ready", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Nodes[1].Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
				Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status."}
		}, `node "n2" is not Ready (NodeStatusUnknown: Kubelet stopped posting node status.); wait for it`},
		{"node without Ready condition", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Nodes[0].Status.Conditions = nil },
			`node "n1" is not Ready (it reports no Ready condition)`},
		{"node cordoned", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Nodes[2].Spec.Unschedulable = true },
			`node "n3" is cordoned (unschedulable); uncordon it (kubectl uncordon n3)`},
		{"no provisioning cluster", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Cluster = nil },
			`provisioning cluster fleet-local/local not found`},
		{"provisioning cluster not ready", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Cluster.Status.Ready = false
			f.Cluster.Status.Conditions = []common.Condition{{Type: "Ready", Status: "False", Message: "configuring etcd"}}
		}, `provisioning cluster fleet-local/local is not ready (configuring etcd); wait for Rancher`},
		{"machine not running", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Machines[0].Status.Phase = "Provisioning" },
			`machine fleet-local/m-n1 is not running (phase "Provisioning")`},
		{"more nodes than machines", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Machines = f.Machines[:2] },
			`node count (3) does not match machine count (2)`},
		{"no nodes at all", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Nodes = nil },
			`node count (0) does not match machine count (3)`},
		{"machine without node reference", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Machines[1].Status.NodeRef = nil },
			`machine fleet-local/m-n2 has no node reference`},
		{"node without managed label", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { delete(f.Nodes[0].Labels, cluster.LabelManagedNode) },
			`node "n1" is missing the harvesterhci.io/managed=true label`},
		{"node without machine annotation", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Nodes[0].Annotations = nil },
			`node "n1" is missing the cluster.x-k8s.io/machine annotation`},
		{"node naming a missing machine", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Nodes[0].Annotations[cluster.AnnotationCAPIMachine] = "m-gone"
		}, `node "n1" references machine "m-gone" which does not exist`},
		{"machine pointing at another node", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Machines[0].Status.NodeRef.Name = "n9" },
			`machine "m-n1" NodeRef.Name "n9" does not match node "n1"`},
		{"degraded volume", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Volumes = append(f.Volumes, testVolume("vol-b", 3, cluster.LonghornVolumeAttached, cluster.LonghornRobustnessDegraded))
		}, `Longhorn volumes are degraded: default/vol-b-pvc; wait until all volumes are healthy`},
		{"attached single-replica volume", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Volumes = append(f.Volumes, testVolume("vol-b", 1, cluster.LonghornVolumeAttached, "healthy"))
		}, `active single-replica volumes found: default/vol-b-pvc`},
		{"attached single-replica volume even with the skip annotation", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationSkipSingleReplicaDetachedVol: "true"}
			f.Volumes = append(f.Volumes, testVolume("vol-b", 1, cluster.LonghornVolumeAttaching, "unknown"))
		}, `active single-replica volumes found: default/vol-b-pvc`},
		{"detached single-replica volume", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			v := testVolume("vol-b", 1, "detached", "unknown")
			v.Status.KubernetesStatus = longhornv1beta2.KubernetesStatus{}
			f.Volumes = append(f.Volumes, v)
		}, `single-replica volumes found: volume vol-b; even detached`},
		{"backup just created", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Backups = append(f.Backups, harvesterv1beta1.VirtualMachineBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "new"}})
		}, `VM backups or snapshots are in progress: ns/new; wait until they have finished`},
		{"backup progressing", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Backups = append(f.Backups, harvesterv1beta1.VirtualMachineBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "half"},
				Status: &harvesterv1beta1.VirtualMachineBackupStatus{ReadyToUse: ptr.To(false), Progress: 50}})
		}, `VM backups or snapshots are in progress: ns/half`},
		{"active schedule", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.BackupSchedules[0].Spec.Suspend = false },
			`VM backup or snapshot schedules are active: default/nightly; suspend them (spec.suspend: true)`},
		{"VM that cannot migrate", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			v := testVMI("gpu-vm", "n2")
			v.Spec.Domain.Devices.GPUs = []kubevirtv1.HostDevice{{Name: "g", DeviceName: "nvidia.com/T4"}}
			f.VMIs = append(f.VMIs, v)
		}, `VMs that cannot be live-migrated must be shut off before the upgrade: default/gpu-vm (passes through GPUs nvidia.com/T4); shut them down, or set spec.restoreVM: true`},
		{"managed chart not ready", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.ManagedCharts[0].Status.Conditions[0] = common.Condition{Type: "Ready", Status: "False", Message: "ErrApplied(1) [Cluster fleet-local/local]"}
		}, `managed chart fleet-local/harvester is not ready (ErrApplied(1) [Cluster fleet-local/local]); wait for it to be ready or fix it`},
		{"managed chart without conditions", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.ManagedCharts[0].Status.Conditions = nil },
			`managed chart fleet-local/harvester is not ready; wait`},
		{"addon being enabled", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Addons[0].Status.Status = "AddonEnabling" },
			`addon kube-system/on is enabled but still on status "AddonEnabling"; wait for it to be deployed or fix it`},
		{"addon failed to deploy", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Addons[0].Status.Status = "AddonDeployFailed" },
			`addon kube-system/on is enabled but still on status "AddonDeployFailed"`},
		{"addon being disabled", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { f.Addons[2].Status.Status = "AddonDisabling" },
			`addon kube-system/off is disabled but still on status "AddonDisabling"; wait for it to be disabled or fix it`},
		{"pausing an unknown node", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"n1", "n7"}}
		}, `spec.nodeUpgradeOption.pauseNodes[1]: Not found: "n7": is not a managed node of this cluster (managed nodes: n1, n2, n3)`},
		{"pausing an unmanaged node", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Nodes = append(f.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "extra"}})
			p.Spec.NodeUpgradeOption = &v1beta1.NodeUpgradeOption{PauseNodes: []string{"extra"}}
		}, `spec.nodeUpgradeOption.pauseNodes[0]: Not found: "extra"`},
		{"name with a dot", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { p.Name = "upgrade.v1.8.0" },
			`metadata.name: Invalid value: "upgrade.v1.8.0": must start with a lowercase letter and contain only lowercase letters, digits and '-' (no '.')`},
		{"name starting with a digit", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { p.Name = "180-upgrade" },
			`metadata.name: Invalid value: "180-upgrade"`},
		{"skip-webhook not a bool", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationSkipWebhook: "yes"}
		}, `metadata.annotations[management.harvesterhci.io/skip-webhook]: Invalid value: "yes": must be "true" or "false"`},
		{"allow-deletion capitalised", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationAllowDeletion: "True"}
		}, `metadata.annotations[management.harvesterhci.io/allow-deletion]: Invalid value: "True": must be "true" or "false"`},
		{"skip-gc empty", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationSkipGCThresholdCheck: ""}
		}, `metadata.annotations[management.harvesterhci.io/skip-garbage-collection-threshold-check]: Invalid value: "": must be "true" or "false"`},
		{"skip-single-replica 1", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationSkipSingleReplicaDetachedVol: "1"}
		}, `metadata.annotations[management.harvesterhci.io/skip-single-replica-detached-vol]: Invalid value: "1"`},
		{"min certs zero", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationMinCertsExpirationInDay: "0"}
		}, `metadata.annotations[management.harvesterhci.io/min-certs-expiration-in-day]: Invalid value: "0": must be a whole number of days greater than 0, e.g. "7"`},
		{"min certs negative", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationMinCertsExpirationInDay: "-3"}
		}, `Invalid value: "-3": must be a whole number of days greater than 0`},
		{"min certs not a number", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationMinCertsExpirationInDay: "7d"}
		}, `Invalid value: "7d": must be a whole number of days greater than 0`},
		{"toolkit image with a tag", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationUpgradeToolkitImage: "rancher/harvester-upgrade-toolkit:v1.8.0"}
		}, `metadata.annotations[management.harvesterhci.io/upgrade-toolkit-image]: Invalid value: "rancher/harvester-upgrade-toolkit:v1.8.0": must be an image repository without a tag or digest`},
		{"toolkit image with a digest", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationUpgradeToolkitImage: "r/t@sha256:" + strings.Repeat("a", 64)}
		}, `must be an image repository without a tag or digest`},
		{"toolkit image in upper case", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationUpgradeToolkitImage: "Rancher/Toolkit"}
		}, `Invalid value: "Rancher/Toolkit": must be an image repository without a tag or digest`},
		{"toolkit image empty", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationUpgradeToolkitImage: ""}
		}, `Invalid value: "": must be an image repository`},
	}
	// Faults that other checks see too, and how many errors they make.
	seenTwice := map[string]int{"no managed nodes": 4, "more nodes than machines": 2, "no nodes at all": 2, "pausing an unmanaged node": 4}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, f := testPlan(), healthyFacts()
			tt.change(p, f)
			r := AdmitCreate(p, f)
			got := errorStrings(r)
			if n := max(seenTwice[tt.name], 1); len(got) != n {
				t.Fatalf("got %d errors %q; want %d, one containing %q", len(got), got, n, tt.want)
			}
			if !slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, tt.want) }) {
				t.Errorf("got  %q\nwant %s", got, tt.want)
			}
		})
	}
}

func TestAdmitCreateAllows(t *testing.T) {
	tests := []struct {
		name   string
		change func(p *v1beta1.UpgradePlan, f *AdmissionFacts)
		warn   string // a warning that must be given; "" for none at all
	}{
		{"image instead of an unknown version", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Spec.Image, f.VersionExists, f.ImageExists = ptr.To("iso"), false, true
		}, ""},
		{"finished plans do not block", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.OtherPlans = append(f.OtherPlans, v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "failed", DeletionTimestamp: &metav1.Time{}},
				Status: v1beta1.UpgradePlanStatus{CurrentPhase: v1beta1.PhaseFailed}})
		}, ""},
		{"dry runs do not block", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.OtherPlans = append(f.OtherPlans, v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "preview"},
				Spec: v1beta1.UpgradePlanSpec{DryRun: ptr.To(true)}})
		}, ""},
		{"degraded volumes on two nodes are expected", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Nodes, f.Machines = f.Nodes[:2], f.Machines[:2]
			f.Volumes = append(f.Volumes, testVolume("vol-b", 3, cluster.LonghornVolumeAttached, cluster.LonghornRobustnessDegraded))
		}, ""},
		{"a witness node does not count as a third node", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Nodes[2].Labels[cluster.LabelWitnessNode] = "true"
			f.Volumes = append(f.Volumes, testVolume("vol-b", 2, cluster.LonghornVolumeAttached, cluster.LonghornRobustnessDegraded))
		}, ""},
		{"single-replica volumes on a single node", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Nodes, f.Machines, f.VMIs = f.Nodes[:1], f.Machines[:1], nil
			f.Volumes = append(f.Volumes, testVolume("vol-b", 1, cluster.LonghornVolumeAttached, "healthy"))
		}, ""},
		{"detached single-replica volumes with the skip annotation", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationSkipSingleReplicaDetachedVol: "true"}
			f.Volumes = append(f.Volumes, testVolume("vol-b", 1, "detached", "unknown"))
		}, "detached single-replica volumes are not checked (management.harvesterhci.io/skip-single-replica-detached-vol=true): default/vol-b-pvc have no other copy"},
		{"failed backups do not block", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Backups = append(f.Backups, harvesterv1beta1.VirtualMachineBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "broken"},
				Status: &harvesterv1beta1.VirtualMachineBackupStatus{ReadyToUse: ptr.To(false), Error: &harvesterv1beta1.BackupError{Message: ptr.To("target unreachable")}}})
		}, ""},
		{"schedules suspended by Harvester after failures", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.BackupSchedules[0].Spec.Suspend, f.BackupSchedules[0].Status.Suspended = false, true
		}, ""},
		{"non-migratable VMs with restoreVM", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Spec.RestoreVM = ptr.To(true)
			v := testVMI("pinned", "n3")
			v.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "n3"}
			f.VMIs = append(f.VMIs, v)
		}, "these VMs cannot be live-migrated; each is shut down while its node is upgraded and restarted afterwards: default/pinned (pinned by nodeSelector kubernetes.io/hostname=n3)"},
		{"a paused VM that cannot move", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Spec.RestoreVM = ptr.To(true)
			v := testVMI("paused", "n3")
			v.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "n3"}
			v.Status.Conditions = append(v.Status.Conditions, kubevirtv1.Condition{Type: cluster.ConditionPaused, Status: "True"})
			f.VMIs = append(f.VMIs, v)
		}, "these VMs are paused and cannot be live-migrated, so the upgrade can neither move nor stop them and fails when it reaches their node: default/paused; unpause them"},
		{"single node without restoreVM", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Nodes, f.Machines = f.Nodes[:1], f.Machines[:1]
		}, "single-node cluster: all 1 running VMs are shut down during the upgrade and stay off afterwards because spec.restoreVM is false"},
		{"single node with restoreVM", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Nodes, f.Machines, p.Spec.RestoreVM = f.Nodes[:1], f.Machines[:1], ptr.To(true)
		}, ""},
		{"addon disabled from the start while enabled is false", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			f.Addons[1].Status.Status = cluster.AddonStateInit
		}, ""},
		{"force", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) { p.Spec.Force = ptr.To(true) },
			"spec.force is true: the upgrade eligibility check"},
		{"explicit false annotations", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationSkipWebhook: "false", v1beta1.AnnotationAllowDeletion: "false",
				v1beta1.AnnotationSkipGCThresholdCheck: "false", v1beta1.AnnotationSkipSingleReplicaDetachedVol: "false",
				v1beta1.AnnotationMinCertsExpirationInDay: "30"}
		}, ""},
		{"skip the GC threshold check", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationSkipGCThresholdCheck: "true"}
		}, "management.harvesterhci.io/skip-garbage-collection-threshold-check=true: the disk-space check"},
		{"allow deletion", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationAllowDeletion: "true"}
		}, "management.harvesterhci.io/allow-deletion=true: this plan can be deleted while it runs"},
		{"short certificate window", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationMinCertsExpirationInDay: "3"}
		}, "management.harvesterhci.io/min-certs-expiration-in-day=3: the upgrade starts even if the API server's certificate expires within 3 days (default 7)"},
		{"own toolkit image", func(p *v1beta1.UpgradePlan, f *AdmissionFacts) {
			p.Annotations = map[string]string{v1beta1.AnnotationUpgradeToolkitImage: "registry.example.com:5000/harvester/upgrade-toolkit"}
		}, "management.harvesterhci.io/upgrade-toolkit-image: the upgrade runs registry.example.com:5000/harvester/upgrade-toolkit instead of rancher/harvester-upgrade-toolkit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, f := testPlan(), healthyFacts()
			tt.change(p, f)
			r := AdmitCreate(p, f)
			if !r.Allowed() {
				t.Fatalf("refused: %v", errorStrings(r))
			}
			if tt.warn == "" {
				if len(r.Warnings()) > 0 {
					t.Errorf("unexpected warnings %q", r.Warnings())
				}
				return
			}
			if len(r.Warnings()) != 1 || !strings.Contains(r.Warnings()[0], tt.warn) {
				t.Errorf("warnings %q; want one containing %q", r.Warnings(), tt.warn)
			}
		})
	}
}

func TestAdmitCreateListsEveryFailure(t *testing.T) {
	p, f := testPlan(), healthyFacts()
	f.VersionExists = false
	f.Nodes[0].Spec.Unschedulable = true
	f.Addons[0].Status.Status = "AddonUpdating"
	p.Annotations = map[string]string{v1beta1.AnnotationMinCertsExpirationInDay: "-1"}
	got := errorStrings(AdmitCreate(p, f))
	want := []string{
		"metadata.annotations[management.harvesterhci.io/min-certs-expiration-in-day]",
		`spec.version: Not found: "v1.8.0"`,
		`node "n1" is cordoned`,
		`addon kube-system/on is enabled but still on status "AddonUpdating"`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors %q; want %d", len(got), got, len(want))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("error %d: %q does not contain %q", i, got[i], want[i])
		}
	}
}

func TestAdmitCreateSkipWebhook(t *testing.T) {
	p := testPlan()
	p.Annotations = map[string]string{v1beta1.AnnotationSkipWebhook: "true"}
	// No facts at all: nothing of the cluster is looked at.
	r := AdmitCreate(p, nil)
	if !r.Allowed() {
		t.Fatalf("skip-webhook refused: %v", errorStrings(r))
	}
	if len(r.Warnings()) != 1 || !strings.Contains(r.Warnings()[0], "skip-webhook=true: the cluster's health") {
		t.Errorf("warnings %q", r.Warnings())
	}
	// The plan's own annotations are still validated.
	p.Annotations[v1beta1.AnnotationMinCertsExpirationInDay] = "soon"
	p.Name = "bad.name"
	if got := errorStrings(AdmitCreate(p, nil)); len(got) != 2 {
		t.Errorf("got %q; want the name and the annotation refused", got)
	}
}

func TestAdmissionMessagesNameAtMostTenObjects(t *testing.T) {
	p, f := testPlan(), healthyFacts()
	f.BackupSchedules = nil
	for i := range 13 {
		f.BackupSchedules = append(f.BackupSchedules, harvesterv1beta1.ScheduleVMBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%02d", i)}})
	}
	got := errorStrings(AdmitCreate(p, f))
	if len(got) != 1 || !strings.Contains(got[0], "ns/s09 and 3 more;") || strings.Contains(got[0], "ns/s10") {
		t.Errorf("got %q", got)
	}
}

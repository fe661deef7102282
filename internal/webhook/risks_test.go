package webhook_test

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
)

// More faults of the cluster, each raising one risk.
var (
	nodeTainted = func(t *testing.T) {
		modify(t, node("n2"), func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
		})
	}
	clockAhead = func(t *testing.T) {
		createTemp(t, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.NodeLeaseNamespace, Name: "n1"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n1"), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: &metav1.MicroTime{Time: time.Now().Add(5 * time.Minute)}},
		})
	}
	capiPaused = func(t *testing.T) {
		createTemp(t, &capiv1beta1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
			Spec:       capiv1beta1.ClusterSpec{Paused: true},
		})
	}
	faultedVolume = func(t *testing.T) {
		createTemp(t, volume("vol-faulted", 3, "detached", cluster.LonghornRobustnessFaulted))
	}
	staleVolume = func(t *testing.T) {
		v := volume("vol-stale", 3, cluster.LonghornVolumeAttached, "healthy")
		v.Status.CurrentNodeID = "n2"
		v.Status.KubernetesStatus.LastPodRefAt = "2026-11-27T09:00:00Z"
		v.Status.KubernetesStatus.WorkloadsStatus = []longhornv1beta2.WorkloadStatus{{PodName: "virt-launcher-old", PodStatus: "Succeeded"}}
		createTemp(t, v)
	}
	pausedVM = func(t *testing.T) {
		v := vmi("vm-held", "n2")
		v.Spec.Domain.Devices.GPUs = []kubevirtv1.HostDevice{{Name: "gpu1", DeviceName: "nvidia.com/TU104GL_Tesla_T4"}}
		v.Status.Conditions = []kubevirtv1.Condition{{Type: cluster.ConditionPaused, Status: "True"}}
		createTemp(t, v)
	}
	// oneWorkloadNode makes n2 and n3 witness nodes: n1 alone runs VMs.
	oneWorkloadNode = func(t *testing.T) {
		for _, name := range []string{"n2", "n3"} {
			modify(t, node(name), func(n *corev1.Node) { n.Labels[cluster.LabelWitnessNode] = "true" })
		}
	}
	bundleNotReady = func(t *testing.T) {
		createTemp(t, &fleetv1alpha1.Bundle{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: "fleet-agent-local"},
			Status: fleetv1alpha1.BundleStatus{
				Conditions: []common.Condition{{Type: "Ready", Status: "False", Message: "ErrApplied(1) [Cluster fleet-local/local: timed out waiting for the condition]"}},
				Summary:    fleetv1alpha1.BundleSummary{ErrApplied: 1, DesiredReady: 1},
			},
		})
	}
	systemPodFailed = func(t *testing.T) {
		createTemp(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: "harvester-webhook-7d9f"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "webhook", Image: "rancher/harvester-webhook:v1.7.1"}}},
			Status:     corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"},
		})
	}
	budgetAtLimit = func(t *testing.T) {
		createTemp(t, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "guard"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
			Status: policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, ExpectedPods: 1, CurrentHealthy: 1, DesiredHealthy: 1},
		})
	}
	alertFiring = func(t *testing.T) {
		alertmanager.fire(t, "KubeAPIErrorBudgetBurn", "warning", "the API server is burning its error budget")
		alertmanager.fire(t, "EtcdNoLeader", "critical", "etcd cluster has no leader")
	}
	alertmanagerDown = func(t *testing.T) { alertmanager.fail(t) }
)

// riskFault raises one risk on the test world.
type riskFault struct {
	fault func(t *testing.T)
	// want is part of the risk's message.
	want string
	// restoreVM is the plan's spec.restoreVM.
	restoreVM bool
}

// riskFaults raise every risk judged at admission; the test fails for a
// risk of the catalogue that has none.
var riskFaults = map[preflight.Reason]riskFault{
	preflight.RiskNodeNotReady:                {fault: nodeNotReady, want: `node "n2" is not Ready (KubeletNotReady: PLEG is not healthy)`},
	preflight.RiskNodeCordoned:                {fault: nodeCordoned, want: `node "n3" is cordoned (unschedulable); uncordon it`},
	preflight.RiskNodeTainted:                 {fault: nodeTainted, want: `node "n2" is tainted dedicated=gpu:NoSchedule`},
	preflight.RiskNodeClockSkew:               {fault: clockAhead, want: `node "n1"'s clock is about 5m0s ahead of the manager's`},
	preflight.RiskClusterNotReady:             {fault: clusterBusy, want: `provisioning cluster fleet-local/local is not ready (waiting for etcd)`},
	preflight.RiskCAPIClusterPaused:           {fault: capiPaused, want: `the CAPI Cluster fleet-local/local is paused`},
	preflight.RiskMachineNotRunning:           {fault: machineDown, want: `machine fleet-local/m-n1 is not running (phase "Failed")`},
	preflight.RiskMachineNodeMismatch:         {fault: orphanNode, want: `node "n2" references machine "m-deleted" which does not exist`},
	preflight.RiskVolumeDegraded:              {fault: degradedVolume, want: `Longhorn volumes are degraded: default/vol-degraded`},
	preflight.RiskVolumeFaulted:               {fault: faultedVolume, want: `Longhorn volumes are faulted (no healthy replica): default/vol-faulted`},
	preflight.RiskSingleReplicaVolume:         {fault: activeSingleReplica, want: `active single-replica volumes found: default/vol-single`},
	preflight.RiskSingleReplicaDetachedVolume: {fault: detachedSingleReplica, want: `single-replica volumes found: default/vol-parked; even detached`},
	preflight.RiskStaleAttachedVolume:         {fault: staleVolume, want: `attached but no pod uses them: default/vol-stale on n2`},
	preflight.RiskBackupInProgress:            {fault: backupRunning, want: `VM backups or snapshots are in progress: default/nightly-1`},
	preflight.RiskBackupScheduleActive:        {fault: scheduleActive, want: `VM backup or snapshot schedules are active: default/hourly`},
	preflight.RiskVMNotMigratable:             {fault: pinnedVM, want: `VMs that cannot be live-migrated must be shut off before the upgrade: default/vm-gpu (passes through GPUs nvidia.com/TU104GL_Tesla_T4)`},
	preflight.RiskVMPaused:                    {fault: pausedVM, want: `these VMs are paused and cannot be live-migrated`, restoreVM: true},
	preflight.RiskVMsStayOff:                  {fault: oneWorkloadNode, want: `single-node cluster: all 1 running VMs are shut down during the upgrade and stay off`},
	preflight.RiskManagedChartNotReady:        {fault: chartNotReady, want: `managed chart fleet-local/harvester is not ready (Modified(1) [Cluster fleet-local/local])`},
	preflight.RiskFleetBundleNotReady:         {fault: bundleNotReady, want: `Fleet bundle fleet-local/fleet-agent-local is not ready (ErrApplied(1)`},
	preflight.RiskAddonNotSettled:             {fault: addonMoving, want: `addon kube-system/descheduler is enabled but still on status "AddonUpdating"`},
	preflight.RiskSystemPodNotRunning:         {fault: systemPodFailed, want: `pods of system namespaces are not running: harvester-system/harvester-webhook-7d9f (Failed: Evicted)`},
	preflight.RiskPodDisruptionBudgetAtLimit:  {fault: budgetAtLimit, want: `PodDisruptionBudgets allow no disruption now: default/guard (minAvailable 1, 0 disruptions allowed)`},
	preflight.RiskCriticalAlertFiring:         {fault: alertFiring, want: `critical alerts are firing: EtcdNoLeader (etcd cluster has no leader)`},
	preflight.RiskAlertsUnknown:               {fault: alertmanagerDown, want: `the firing alerts are unknown: asking Alertmanager at`},
}

// TestEveryRiskIsRaisedOnTheWorld: each risk of the catalogue judged at
// admission, raised on the real API server. An Error-level risk refuses
// the plan, naming it and how to accept it, and stores nothing; the same
// plan accepting it by name is admitted with a warning that says so. A
// Warning-level risk is a warning.
func TestEveryRiskIsRaisedOnTheWorld(t *testing.T) {
	for _, risk := range preflight.Catalogue {
		if risk.JudgedAt != preflight.JudgedAtAdmission {
			continue
		}
		rf, ok := riskFaults[risk.Name]
		if !ok {
			t.Errorf("risk %s has no fault that raises it on the world", risk.Name)
			continue
		}
		t.Run(string(risk.Name), func(t *testing.T) {
			removePlansAfter(t)
			rf.fault(t)
			c, w := clientWithWarnings(t)
			p := plan("risky")
			p.Spec.RestoreVM = ptr.To(rf.restoreVM)
			if risk.Level == preflight.LevelError {
				before := storedPlans(t)
				err := c.Create(ctxFor(t), p.DeepCopy())
				if !apierrors.IsInvalid(err) {
					t.Fatalf("got %v; want refused for the risk", err)
				}
				for _, want := range []string{"spec.acceptRisks: Forbidden: risk " + string(risk.Name) + ": ", rf.want,
					"accept the risk by name: spec.acceptRisks: [" + string(risk.Name) + "]"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal lacks %q:\n%v", want, err)
					}
				}
				if after := storedPlans(t); after != before {
					t.Errorf("%d plans stored before, %d after: the refused plan was stored", before, after)
				}
				p.Spec.AcceptRisks = []string{string(risk.Name)}
			}
			if err := c.Create(ctxFor(t), p); err != nil {
				t.Fatalf("plan refused: %v", err)
			}
			want := "risk " + string(risk.Name) + ": "
			if risk.Level == preflight.LevelError {
				want = "risk " + string(risk.Name) + " accepted (spec.acceptRisks): "
			}
			got := strings.Join(w.all(), "\n")
			if !strings.Contains(got, want) || !strings.Contains(got, rf.want) {
				t.Errorf("warnings lack %q and %q:\n%s", want, rf.want, got)
			}
		})
	}
}

// TestAcceptRisksMayGrowWhileTheUpgradeRuns: a running plan may accept a
// risk that appeared since (Initialize fails on it and a retry goes on), but
// not a name of no risk.
func TestAcceptRisksMayGrowWhileTheUpgradeRuns(t *testing.T) {
	removePlansAfter(t)
	p := plan("running")
	if err := env.Client.Create(ctxFor(t), p); err != nil {
		t.Fatal(err)
	}
	setPhase(t, p, v1beta1.PhaseInitializing)
	p.Spec.AcceptRisks = []string{string(preflight.RiskBackupScheduleActive)}
	if err := env.Client.Update(ctxFor(t), p); err != nil {
		t.Fatalf("accepting a risk while running: %v", err)
	}
	p.Spec.AcceptRisks = append(p.Spec.AcceptRisks, "Everything")
	err := env.Client.Update(ctxFor(t), p)
	if err == nil || !strings.Contains(err.Error(), `spec.acceptRisks[1]: Unsupported value: "Everything"`) {
		t.Fatalf("got %v; want the unknown name refused", err)
	}
}

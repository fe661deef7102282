package cluster_test

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/catalogv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/helmv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/upgradev1"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, &env)) }

// fixture is one foreign kind: its plural resource, scope, whether it has a
// status subresource, and a sample object that sets the fields we use.
type fixture struct {
	resource   schema.GroupResource
	namespaced bool
	status     bool
	sample     client.Object
}

func objMeta(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

var vmSource = harvesterv1beta1.BackupSource{APIGroup: ptr.To("kubevirt.io"), Kind: "VirtualMachine", Name: "vm1"}

var conds = []common.Condition{{Type: "Ready", Status: "True", Reason: "Done", Message: "ok"}}

func fixtures() []fixture {
	h := cluster.HarvesterNamespace
	return []fixture{
		{schema.GroupResource{Group: "harvesterhci.io", Resource: "versions"}, true, false,
			&harvesterv1beta1.Version{ObjectMeta: objMeta(h, "v1.8.0"), Spec: harvesterv1beta1.VersionSpec{ISOURL: "http://x/h.iso", ISOChecksum: "abc", MinUpgradableVersion: "v1.7.0"}}},
		{schema.GroupResource{Group: "harvesterhci.io", Resource: "virtualmachineimages"}, true, false,
			&harvesterv1beta1.VirtualMachineImage{ObjectMeta: objMeta(h, "iso"),
				Spec:   harvesterv1beta1.VirtualMachineImageSpec{DisplayName: "iso", SourceType: "download", URL: "http://x", Backend: "cdi", Retry: 3, TargetStorageClassName: "longhorn-static"},
				Status: harvesterv1beta1.VirtualMachineImageStatus{Progress: 50, Conditions: conds}}},
		{schema.GroupResource{Group: "harvesterhci.io", Resource: "settings"}, false, false,
			&harvesterv1beta1.Setting{ObjectMeta: objMeta("", "server-version"), Value: "v1.7.1"}},
		{schema.GroupResource{Group: "harvesterhci.io", Resource: "addons"}, true, true,
			&harvesterv1beta1.Addon{ObjectMeta: objMeta(cluster.KubeSystemNamespace, "descheduler"),
				Spec: harvesterv1beta1.AddonSpec{Enabled: true, Repo: "http://harvester-cluster-repo.cattle-system.svc/charts", Chart: "descheduler", Version: "0.33.0", ValuesContent: "{}"}, Status: harvesterv1beta1.AddonStatus{Status: "AddonDeploySuccessful"}}},
		{schema.GroupResource{Group: "harvesterhci.io", Resource: "virtualmachinebackups"}, true, false,
			&harvesterv1beta1.VirtualMachineBackup{ObjectMeta: objMeta("default", "b1"),
				Spec:   harvesterv1beta1.VirtualMachineBackupSpec{Source: vmSource, Type: "backup"},
				Status: &harvesterv1beta1.VirtualMachineBackupStatus{ReadyToUse: ptr.To(false)}}},
		{schema.GroupResource{Group: "harvesterhci.io", Resource: "schedulevmbackups"}, true, false,
			&harvesterv1beta1.ScheduleVMBackup{ObjectMeta: objMeta("default", "s1"), Spec: harvesterv1beta1.ScheduleVMBackupSpec{Cron: "0 * * * *", Suspend: true, Retain: 8, MaxFailure: 4,
				VMBackup: harvesterv1beta1.VirtualMachineBackupSpec{Source: vmSource, Type: "backup"}},
				Status: harvesterv1beta1.ScheduleVMBackupStatus{Suspended: true}}},
		{schema.GroupResource{Group: "harvesterhci.io", Resource: "upgrades"}, true, false,
			&harvesterv1beta1.Upgrade{ObjectMeta: objMeta(cluster.HarvesterNamespace, "hvst-upgrade-1"), Spec: harvesterv1beta1.UpgradeSpec{Version: "v1.8.0"},
				Status: harvesterv1beta1.UpgradeStatus{Conditions: []harvesterv1beta1.UpgradeCondition{{Type: "Completed", Status: "Unknown", Message: "m"}}}}},
		{schema.GroupResource{Group: "upgrade.cattle.io", Resource: "plans"}, true, true,
			&upgradev1.Plan{ObjectMeta: objMeta(cluster.CattleNamespace, "p1"),
				Spec: upgradev1.PlanSpec{Concurrency: 2, NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
					Upgrade: &upgradev1.ContainerSpec{Image: "img:tag", Command: []string{"x"}}},
				Status: upgradev1.PlanStatus{LatestHash: "h", Applying: []string{"n1"}, Conditions: conds}}},
		{schema.GroupResource{Group: "provisioning.cattle.io", Resource: "clusters"}, true, true,
			&provisioningv1.Cluster{ObjectMeta: objMeta(cluster.FleetLocalNamespace, "local"),
				Spec: provisioningv1.ClusterSpec{KubernetesVersion: "v1.35.2+rke2r1", RKEConfig: &provisioningv1.RKEConfig{ProvisionGeneration: 2,
					UpgradeStrategy: &provisioningv1.ClusterUpgradeStrategy{ControlPlaneConcurrency: "1",
						ControlPlaneDrainOptions: provisioningv1.DrainOptions{Enabled: true, PreDrainHooks: []provisioningv1.DrainHook{{Annotation: "x/pre-hook"}}}}}},
				Status: provisioningv1.ClusterStatus{Ready: true, Conditions: conds}}},
		{schema.GroupResource{Group: "management.cattle.io", Resource: "managedcharts"}, true, true,
			&managementv3.ManagedChart{ObjectMeta: objMeta(cluster.FleetLocalNamespace, "harvester"),
				Spec: managementv3.ManagedChartSpec{Chart: "harvester", Diff: &managementv3.DiffOptions{ComparePatches: []managementv3.ComparePatch{
					{Kind: "KubeVirt", APIVersion: "kubevirt.io/v1", Name: "kubevirt", JSONPointers: []string{"/spec/workloadUpdateStrategy/workloadUpdateMethods"}}}}},
				Status: managementv3.ManagedChartStatus{Conditions: conds}}},
		{schema.GroupResource{Group: "cluster.x-k8s.io", Resource: "machines"}, true, true,
			&capiv1beta1.Machine{ObjectMeta: objMeta(cluster.FleetLocalNamespace, "custom-1"), Spec: capiv1beta1.MachineSpec{ClusterName: "local",
				Bootstrap:         capiv1beta1.Bootstrap{DataSecretName: ptr.To("custom-1-machine-bootstrap")},
				InfrastructureRef: corev1.ObjectReference{APIVersion: "rke.cattle.io/v1", Kind: "CustomMachine", Name: "custom-1"}},
				Status: capiv1beta1.MachineStatus{Phase: "Running"}}},
		{schema.GroupResource{Group: "kubevirt.io", Resource: "kubevirts"}, true, true,
			&kubevirtv1.KubeVirt{ObjectMeta: objMeta(h, "kubevirt"),
				Spec:   kubevirtv1.KubeVirtSpec{WorkloadUpdateStrategy: kubevirtv1.KubeVirtWorkloadUpdateStrategy{WorkloadUpdateMethods: []string{"LiveMigrate"}}},
				Status: kubevirtv1.KubeVirtStatus{Phase: "Deployed", ObservedKubeVirtVersion: "v1.7.1"}}},
		{schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachines"}, true, true,
			&kubevirtv1.VirtualMachine{ObjectMeta: objMeta("default", "vm1"), Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To("RerunOnFailure"),
				Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{EvictionStrategy: ptr.To("LiveMigrateIfPossible")}}},
				Status: kubevirtv1.VirtualMachineStatus{PrintableStatus: "Running", Ready: true}}},
		{schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachineinstances"}, true, false,
			&kubevirtv1.VirtualMachineInstance{ObjectMeta: objMeta("default", "vm1"),
				Spec: kubevirtv1.VirtualMachineInstanceSpec{NodeSelector: map[string]string{"k": "v"}, EvictionStrategy: ptr.To("LiveMigrateIfPossible"),
					Domain: kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{HostDevices: []kubevirtv1.HostDevice{{Name: "gpu", DeviceName: "nvidia.com/x"}}}}},
				Status: kubevirtv1.VirtualMachineInstanceStatus{NodeName: "n1", Phase: "Running", Conditions: []kubevirtv1.Condition{{Type: "Ready", Status: "True"}}}}},
		{schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachineinstancemigrations"}, true, true,
			&kubevirtv1.VirtualMachineInstanceMigration{ObjectMeta: objMeta("default", "m1"), Spec: kubevirtv1.VirtualMachineInstanceMigrationSpec{VMIName: "vm1"},
				Status: kubevirtv1.VirtualMachineInstanceMigrationStatus{Phase: "Running"}}},
		{schema.GroupResource{Group: "longhorn.io", Resource: "settings"}, true, true,
			&longhornv1beta2.Setting{ObjectMeta: objMeta(cluster.LonghornNamespace, "replica-replenishment-wait-interval"), Value: "600",
				Status: longhornv1beta2.SettingStatus{Applied: true}}},
		{schema.GroupResource{Group: "longhorn.io", Resource: "volumes"}, true, true,
			&longhornv1beta2.Volume{ObjectMeta: objMeta(cluster.LonghornNamespace, "pvc-1"), Spec: longhornv1beta2.VolumeSpec{NumberOfReplicas: 3},
				Status: longhornv1beta2.VolumeStatus{State: "attached", Robustness: "healthy", KubernetesStatus: longhornv1beta2.KubernetesStatus{Namespace: "default", PVCName: "data"}}}},
		{schema.GroupResource{Group: "longhorn.io", Resource: "engines"}, true, true,
			&longhornv1beta2.Engine{ObjectMeta: objMeta(cluster.LonghornNamespace, "pvc-1-e-0"), Spec: longhornv1beta2.EngineSpec{VolumeName: "pvc-1", NodeID: "n1"},
				Status: longhornv1beta2.EngineStatus{CurrentState: "running", ReplicaModeMap: map[string]string{"pvc-1-r-1": "RW", "pvc-1-r-2": "WO"},
					ReplicaTransitionTimeMap: map[string]string{"pvc-1-r-1": "2026-01-02T03:04:05Z", "pvc-1-r-2": "2026-01-02T03:04:06Z"}}}},
		{schema.GroupResource{Group: "longhorn.io", Resource: "replicas"}, true, true,
			&longhornv1beta2.Replica{ObjectMeta: objMeta(cluster.LonghornNamespace, "pvc-1-r-0a1b2c3d"), Spec: longhornv1beta2.ReplicaSpec{VolumeName: "pvc-1", NodeID: "n1"},
				Status: longhornv1beta2.ReplicaStatus{CurrentState: "running"}}},
		{schema.GroupResource{Group: "management.cattle.io", Resource: "settings"}, false, false,
			&managementv3.Setting{ObjectMeta: objMeta("", "server-version"), Value: "v2.14.0", Default: "dev"}},
		{schema.GroupResource{Group: "catalog.cattle.io", Resource: "clusterrepos"}, false, true,
			&catalogv1.ClusterRepo{ObjectMeta: objMeta("", "harvester-charts"),
				Spec:   catalogv1.ClusterRepoSpec{URL: "http://harvester-cluster-repo.cattle-system/charts", ForceUpdate: &metav1.Time{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}},
				Status: catalogv1.ClusterRepoStatus{DownloadTime: metav1.Time{Time: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)}, ObservedGeneration: 1}}},
		{schema.GroupResource{Group: "management.cattle.io", Resource: "clusters"}, false, true,
			&managementv3.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "local", Annotations: map[string]string{"rancher.io/imported-cluster-version-management": "false"}},
				Status: managementv3.ClusterStatus{Conditions: conds}}},
		{schema.GroupResource{Group: "cluster.x-k8s.io", Resource: "clusters"}, true, true,
			&capiv1beta1.Cluster{ObjectMeta: objMeta(cluster.FleetLocalNamespace, "local"), Status: capiv1beta1.ClusterStatus{Phase: "Provisioned", ObservedGeneration: 1}}},
		{schema.GroupResource{Group: "fleet.cattle.io", Resource: "clusters"}, true, true,
			&fleetv1alpha1.Cluster{ObjectMeta: objMeta(cluster.FleetLocalNamespace, "local"), Spec: fleetv1alpha1.ClusterSpec{RedeployAgentGeneration: 3},
				Status: fleetv1alpha1.ClusterStatus{AgentDeployedGeneration: ptr.To[int64](3), AgentTLSMode: "strict", Conditions: conds}}},
		{schema.GroupResource{Group: "fleet.cattle.io", Resource: "bundles"}, true, true,
			&fleetv1alpha1.Bundle{ObjectMeta: objMeta(cluster.FleetLocalNamespace, "mcc-harvester"),
				Spec: fleetv1alpha1.BundleSpec{Paused: true, Helm: &fleetv1alpha1.HelmOptions{Version: "1.8.0", TimeoutSeconds: 600, Values: &runtime.RawExtension{Raw: []byte(`{"a":"b"}`)}}},
				Status: fleetv1alpha1.BundleStatus{ObservedGeneration: 2, Unavailable: 1, Conditions: conds,
					Summary: fleetv1alpha1.BundleSummary{Ready: 0, DesiredReady: 1, WaitApplied: 1}, Display: fleetv1alpha1.BundleDisplay{ReadyClusters: "0/1", State: "WaitApplied"}}}},
		{schema.GroupResource{Group: "helm.cattle.io", Resource: "helmchartconfigs"}, true, false,
			&helmv1.HelmChartConfig{ObjectMeta: objMeta(cluster.KubeSystemNamespace, "rke2-multus"), Spec: helmv1.HelmChartConfigSpec{FailurePolicy: "abort", ValuesContent: "a: b\n"}}},
		{schema.GroupResource{Group: "longhorn.io", Resource: "instancemanagers"}, true, true,
			&longhornv1beta2.InstanceManager{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: "instance-manager-1", Labels: map[string]string{"longhorn.io/node": "n1"}},
				Spec: longhornv1beta2.InstanceManagerSpec{Image: "longhornio/longhorn-instance-manager:v1.11.0", NodeID: "n1"}, Status: longhornv1beta2.InstanceManagerStatus{CurrentState: "running"}}},
		{schema.GroupResource{Group: "longhorn.io", Resource: "nodes"}, true, true,
			&longhornv1beta2.Node{ObjectMeta: objMeta(cluster.LonghornNamespace, "n1"), Status: longhornv1beta2.NodeStatus{Conditions: []longhornv1beta2.Condition{{Type: "Ready", Status: "True", Reason: "Done", Message: "ok"}}}}},
	}
}

// TestForeignKindFixtures checks the toolkit's picture of each foreign kind
// against its real upstream CRD: scope, status subresource, and a sample with
// the fields the toolkit uses survives a round trip.
func TestForeignKindFixtures(t *testing.T) {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, f := range fixtures() {
		t.Run(f.resource.String(), func(t *testing.T) {
			crd := &apiextv1.CustomResourceDefinition{}
			if err := env.Client.Get(c, client.ObjectKey{Name: f.resource.String()}, crd); err != nil {
				t.Fatalf("CRD %s not installed: %v", f.resource, err)
			}
			if got := crd.Spec.Scope == apiextv1.NamespaceScoped; got != f.namespaced {
				t.Errorf("namespaced=%v, want %v", got, f.namespaced)
			}
			hasStatus := crd.Spec.Versions[0].Subresources != nil && crd.Spec.Versions[0].Subresources.Status != nil
			if hasStatus != f.status {
				t.Errorf("status subresource=%v, want %v", hasStatus, f.status)
			}

			want := f.sample.DeepCopyObject().(client.Object)
			obj := f.sample.DeepCopyObject().(client.Object)
			if err := env.Client.Create(c, obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			if f.status {
				// Status is ignored on create; write it through the subresource.
				withStatus := want.DeepCopyObject().(client.Object)
				withStatus.SetResourceVersion(obj.GetResourceVersion())
				if err := env.Client.Status().Update(c, withStatus); err != nil {
					t.Fatalf("status update: %v", err)
				}
			}
			got := f.sample.DeepCopyObject().(client.Object)
			if err := env.Client.Get(c, client.ObjectKeyFromObject(obj), got); err != nil {
				t.Fatalf("get: %v", err)
			}
			if diff := diffIgnoringMeta(t, want, got); diff != "" {
				t.Errorf("fields were dropped by the schema: %s", diff)
			}
		})
	}
}

// diffIgnoringMeta compares two objects as JSON, apart from metadata and
// type meta, and describes the first difference.
func diffIgnoringMeta(t *testing.T, want, got client.Object) string {
	t.Helper()
	toMap := func(o client.Object) map[string]any {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "metadata")
		delete(m, "apiVersion")
		delete(m, "kind")
		return m
	}
	w, g := toMap(want), toMap(got)
	if reflect.DeepEqual(w, g) {
		return ""
	}
	wb, _ := json.Marshal(w)
	gb, _ := json.Marshal(g)
	return "\nwant " + string(wb) + "\n got " + string(gb)
}

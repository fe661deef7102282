package sim

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/fleetv1alpha1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// bootstrap creates the objects of a running Harvester cluster as the real
// components would have left them.
func (s *Sim) bootstrap(ctx context.Context) error {
	c := s.cfg
	for i, node := range c.allNodeNames() {
		if err := s.createNode(ctx, node, i); err != nil {
			return err
		}
	}
	objs := []statusObject{
		s.localCluster(),
		{obj: &harvesterv1beta1.Setting{ObjectMeta: metav1.ObjectMeta{Name: cluster.ServerVersionSetting}, Value: c.From.Harvester}},
		{obj: &harvesterv1beta1.Version{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: c.To.Harvester},
			Spec: harvesterv1beta1.VersionSpec{
				ISOURL:               fmt.Sprintf("https://releases.rancher.com/harvester/%s/harvester-%s-amd64.iso", c.To.Harvester, c.To.Harvester),
				ISOChecksum:          isoChecksum(c.To.Harvester),
				MinUpgradableVersion: c.To.MinUpgradableVersion,
				ReleaseDate:          time.Now().UTC().Format(time.DateOnly),
			},
		}},
		s.kubeVirt(),
		s.harvesterChart(),
		{obj: &longhornv1beta2.Setting{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornReplicaReplenishmentWaitInterval},
			Value:      "600",
		}, status: func(o client.Object) { o.(*longhornv1beta2.Setting).Status.Applied = true }},
		{obj: &harvesterv1beta1.Addon{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.KubeSystemNamespace, Name: cluster.DeschedulerAddon},
			Spec:       harvesterv1beta1.AddonSpec{Repo: "http://harvester-cluster-repo.cattle-system.svc/charts", Chart: "descheduler", Version: "0.33.0", Enabled: true, ValuesContent: "{}"},
		}, status: func(o client.Object) { o.(*harvesterv1beta1.Addon).Status.Status = cluster.AddonStateDeployed }},
	}
	// Harvester's storage classes, Longhorn's volumes.
	for _, sc := range []string{"longhorn", "longhorn-static"} {
		objs = append(objs, statusObject{obj: &storagev1.StorageClass{
			ObjectMeta:  metav1.ObjectMeta{Name: sc},
			Provisioner: longhornCSIDriver, ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete),
			AllowVolumeExpansion: ptr.To(true), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
		}})
	}
	objs = append(objs, s.volumes()...)
	objs = append(objs, s.componentObjects()...)
	objs = append(objs, deployedBundles(objs)...)
	for _, o := range objs {
		if err := s.createWithStatus(ctx, o); err != nil {
			return err
		}
	}
	if err := s.createHelmReleases(ctx); err != nil {
		return err
	}
	// The service accounts Harvester runs its Jobs with; without them the
	// API server admits no pod of those Jobs.
	for _, sa := range []types.NamespacedName{
		{Namespace: cluster.HarvesterNamespace, Name: harvesterServiceAccount},
		{Namespace: cluster.CattleNamespace, Name: sucServiceAccount},
	} {
		if err := s.createWithStatus(ctx, statusObject{obj: &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: sa.Name}}}); err != nil {
			return err
		}
	}
	for _, vm := range c.VMs {
		if err := s.createVM(ctx, vm); err != nil {
			return err
		}
	}
	return s.waitNodesReady(ctx)
}

// waitNodesReady waits until kwok runs every node and the node-lifecycle
// controller lifted the not-ready taint the API server gives new nodes.
func (s *Sim) waitNodesReady(ctx context.Context) error {
	var pending []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var nodes corev1.NodeList
		if err := s.direct.List(ctx, &nodes); err != nil {
			return false, nil //nolint:nilerr // try again
		}
		pending = pending[:0]
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if !cluster.NodeReady(n) || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady }) {
				pending = append(pending, n.Name)
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("sim: nodes %s did not become Ready: the simulator needs kwok and kube-controller-manager beside the API server (testenv.StartWith with WorldOptions): %w", strings.Join(pending, ", "), err)
	}
	return nil
}

// deployedBundles are the Bundles Rancher made of the ManagedCharts among
// objs, each deployed by Fleet, as a running cluster has them.
func deployedBundles(objs []statusObject) []statusObject {
	var out []statusObject
	for _, o := range objs {
		mc, ok := o.obj.(*managementv3.ManagedChart)
		if !ok {
			continue
		}
		b := &fleetv1alpha1.Bundle{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: cluster.ManagedChartBundlePrefix + mc.Name},
			Spec: cluster.ManagedChartBundleSpec(mc)}
		out = append(out, statusObject{obj: b, status: func(o client.Object) {
			o.(*fleetv1alpha1.Bundle).Status = deployedBundleStatus(o.GetGeneration())
		}})
	}
	return out
}

// statusObject is an object to create and, for kinds with a status
// subresource, the status to write afterwards.
type statusObject struct {
	obj    client.Object
	status func(client.Object)
}

func (s *Sim) createWithStatus(ctx context.Context, o statusObject) error {
	if err := s.direct.Create(ctx, o.obj); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("sim: %s %s already exists: the simulator bootstraps a fresh cluster, start it on an empty API server", kindOf(s, o.obj), client.ObjectKeyFromObject(o.obj))
		}
		return fmt.Errorf("sim: creating %s %s: %w", kindOf(s, o.obj), client.ObjectKeyFromObject(o.obj), err)
	}
	if o.status == nil {
		return nil
	}
	// The real controllers may change a new object at once (a node gets the
	// TTL controller's annotation): write the status onto the latest one.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.direct.Get(ctx, client.ObjectKeyFromObject(o.obj), o.obj); err != nil {
			return err
		}
		o.status(o.obj)
		return cluster.UpdateStatus(ctx, s.direct, o.obj)
	})
	if err != nil {
		return fmt.Errorf("sim: writing the status of %s %s: %w", kindOf(s, o.obj), client.ObjectKeyFromObject(o.obj), err)
	}
	return nil
}

func kindOf(s *Sim, obj runtime.Object) string {
	gvks, _, err := s.scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return fmt.Sprintf("%T", obj)
	}
	return gvks[0].Kind
}

// machineName is the CAPI Machine of a node, named like Rancher names the
// machines of a custom cluster.
func machineName(node string) string {
	sum := sha256.Sum256([]byte(node))
	return "custom-" + hex.EncodeToString(sum[:])[:12]
}

func machinePlanSecretName(machine string) string { return machine + "-machine-plan" }

// isoChecksum is a stand-in SHA-512 of the release ISO.
func isoChecksum(version string) string {
	sum := sha512.Sum512([]byte("harvester-" + version + "-amd64.iso"))
	return hex.EncodeToString(sum[:])
}

// nodePlan is what the simulated Rancher keeps per machine in its plan
// Secret: what the machine must run, and what it runs.
type nodePlan struct {
	KubernetesVersion   string `json:"kubernetesVersion"`
	ProvisionGeneration int64  `json:"provisionGeneration"`
}

// storedPlan is a nodePlan as the Secret holds it: with the files Rancher's
// system agent writes on the node, which make the simulated Secret as heavy
// as a real plan (files, images and probes: many KiB per node), so that what
// the manager caches of it shows in the benchmarks.
type storedPlan struct {
	nodePlan
	Files []planFile `json:"files"`
}

// planFile is one file of a plan, base64-encoded as Rancher encodes it.
type planFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// planFileSize is the size of the simulated RKE2 config file of a plan.
const planFileSize = 16 << 10

func (p nodePlan) encode() []byte {
	var config strings.Builder
	for i := 0; config.Len() < planFileSize; i++ {
		fmt.Fprintf(&config, "# kubernetes %s, setting %d\nnode-label+: [\"harvesterhci.io/setting-%d=true\"]\n", p.KubernetesVersion, i, i)
	}
	b, _ := json.Marshal(storedPlan{nodePlan: p, Files: []planFile{{
		Path:    "/etc/rancher/rke2/config.yaml.d/50-rancher.yaml",
		Content: base64.StdEncoding.EncodeToString([]byte(config.String())),
	}}})
	return b
}

func decodeNodePlan(b []byte) (nodePlan, bool) {
	var p nodePlan
	if len(b) == 0 || json.Unmarshal(b, &p) != nil {
		return nodePlan{}, false
	}
	return p, true
}

func (s *Sim) createNode(ctx context.Context, name string, index int) error {
	c := s.cfg
	witness := c.Witness && name == c.witnessName()
	controlPlane := witness || index < 3
	machine := machineName(name)
	ip := s.nodeIP(index)

	labels := map[string]string{
		cluster.LabelManagedNode: "true",
		labelHostname:            name,
		// Powered on once its status is written (below): kwok, as its
		// kubelet, then reports it.
		LabelPower:           powerOff,
		"kubernetes.io/os":   "linux",
		"kubernetes.io/arch": "amd64",
	}
	machineLabels := map[string]string{"cluster.x-k8s.io/cluster-name": cluster.LocalClusterName, labelMachineClusterName: cluster.LocalClusterName}
	switch {
	case witness:
		labels[cluster.LabelWitnessNode] = "true"
		labels[labelNodeEtcd] = "true"
		machineLabels[labelMachineEtcd] = "true"
	case controlPlane:
		labels[labelNodeControlPlane], labels[labelNodeEtcd], labels[labelNodeMaster] = "true", "true", "true"
		machineLabels[labelMachineControlPlane], machineLabels[labelMachineEtcd], machineLabels[labelMachineWorker] = "true", "true", "true"
	default:
		labels[labelNodeWorker] = "true"
		machineLabels[labelMachineWorker] = "true"
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: labels,
		Annotations: map[string]string{
			cluster.AnnotationInternalIP:  ip.String(),
			cluster.AnnotationCAPIMachine: machine,
		},
	}}
	if witness {
		node.Spec.Taints = []corev1.Taint{{Key: labelNodeEtcd, Value: "true", Effect: corev1.TaintEffectNoExecute}}
	}
	var port int32
	if s.kubelets != nil {
		port = s.kubelets.port(name)
	}
	plan := nodePlan{KubernetesVersion: c.From.Kubernetes}.encode()
	objs := []statusObject{
		{obj: node, status: func(o client.Object) {
			n := o.(*corev1.Node)
			n.Status = corev1.NodeStatus{
				Capacity:    nodeResources(),
				Allocatable: nodeResources(),
				// kwok, as the node's kubelet, reports it Ready.
				Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}},
				DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: port}},
				NodeInfo: corev1.NodeSystemInfo{
					MachineID: machine, SystemUUID: machine, BootID: newBootID(),
					KernelVersion: "6.4.0-150600.23.53-default", OSImage: c.From.OS,
					ContainerRuntimeVersion: "containerd://2.0.5-k3s1", KubeletVersion: c.From.Kubernetes,
					OperatingSystem: "linux", Architecture: "amd64",
				},
			}
		}},
		{obj: &capiv1beta1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: machine, Labels: machineLabels},
			// As Rancher creates the machines of a custom cluster.
			Spec: capiv1beta1.MachineSpec{ClusterName: cluster.LocalClusterName,
				Bootstrap: capiv1beta1.Bootstrap{
					ConfigRef:      &corev1.ObjectReference{APIVersion: "rke.cattle.io/v1", Kind: "RKEBootstrap", Namespace: cluster.FleetLocalNamespace, Name: machine},
					DataSecretName: ptr.To(machine + "-machine-bootstrap"),
				},
				InfrastructureRef: corev1.ObjectReference{APIVersion: "rke.cattle.io/v1", Kind: "CustomMachine", Namespace: cluster.FleetLocalNamespace, Name: machine},
			},
		}, status: func(o client.Object) {
			o.(*capiv1beta1.Machine).Status = capiv1beta1.MachineStatus{
				Phase:   cluster.MachinePhaseRunning,
				NodeRef: &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name},
			}
		}},
		{obj: &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: cluster.FleetLocalNamespace, Name: machinePlanSecretName(machine),
				Labels: map[string]string{cluster.LabelMachineName: machine, labelMachineClusterName: cluster.LocalClusterName},
			},
			Type: cluster.MachinePlanSecretType,
			Data: map[string][]byte{
				cluster.MachinePlanKey:     plan,
				cluster.AppliedPlanKey:     plan,
				cluster.AppliedChecksumKey: []byte(cluster.PlanChecksum(plan)),
			},
		}},
	}
	for _, o := range objs {
		if err := s.createWithStatus(ctx, o); err != nil {
			return err
		}
	}
	on := client.MergeFrom(node.DeepCopy())
	node.Labels[LabelPower] = powerOn
	if err := s.direct.Patch(ctx, node, on); err != nil {
		return fmt.Errorf("sim: powering node %s on: %w", name, err)
	}
	return nil
}

// nodeIP is the InternalIP of a node: the kubelets' address, or, without
// kubelets, a loopback address the API server refuses to proxy to (so a
// disk check fails fast instead of sending traffic anywhere).
func (s *Sim) nodeIP(index int) net.IP {
	if s.kubelets != nil {
		return s.kubelets.ip
	}
	return net.IPv4(127, 0, 1, byte(index+1))
}

// newBootID is a new boot's ID, random like the kernel's
// (/proc/sys/kernel/random/boot_id).
func newBootID() string { return string(uuid.NewUUID()) }

func nodeResources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("16"),
		corev1.ResourceMemory:           resource.MustParse("64Gi"),
		corev1.ResourcePods:             resource.MustParse("200"),
		corev1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
	}
}

func readyCondition(status corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
	now := metav1.Now()
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
}

func (s *Sim) localCluster() statusObject {
	return statusObject{
		obj: &provisioningv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.LocalClusterName},
			Spec:       provisioningv1.ClusterSpec{KubernetesVersion: s.cfg.From.Kubernetes, RKEConfig: &provisioningv1.RKEConfig{}},
		},
		status: func(o client.Object) {
			cl := o.(*provisioningv1.Cluster)
			now := wranglerNow()
			cl.Status = provisioningv1.ClusterStatus{
				Ready: true, ObservedGeneration: cl.Generation, ClusterName: cluster.LocalClusterName,
				Conditions: []common.Condition{
					{Type: "Ready", Status: "True", LastUpdateTime: now},
					{Type: "Provisioned", Status: "True", LastUpdateTime: now},
					{Type: "Updated", Status: "True", LastUpdateTime: now},
				},
			}
		},
	}
}

func (s *Sim) kubeVirt() statusObject {
	return statusObject{
		obj: &kubevirtv1.KubeVirt{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName},
			Spec: kubevirtv1.KubeVirtSpec{WorkloadUpdateStrategy: kubevirtv1.KubeVirtWorkloadUpdateStrategy{
				WorkloadUpdateMethods: []string{"LiveMigrate"},
			}},
		},
		status: func(o client.Object) {
			kv := o.(*kubevirtv1.KubeVirt)
			kv.Status = kubevirtv1.KubeVirtStatus{
				Phase: "Deployed", ObservedKubeVirtVersion: s.cfg.KubeVirtVersion, TargetKubeVirtVersion: s.cfg.KubeVirtVersion,
				Conditions: []kubevirtv1.Condition{
					{Type: "Available", Status: "True", Reason: "AllComponentsReady", Message: "All components are ready."},
					{Type: "Progressing", Status: "False", Reason: "AllComponentsReady", Message: "All components are ready."},
					{Type: "Degraded", Status: "False", Reason: "AllComponentsReady", Message: "All components are ready."},
				},
			}
		},
	}
}

func (s *Sim) harvesterChart() statusObject {
	values, _ := json.Marshal(map[string]any{"kubevirt": map[string]any{"spec": map[string]any{
		"workloadUpdateStrategy": map[string]any{"workloadUpdateMethods": []string{"LiveMigrate"}},
	}}})
	return statusObject{
		obj: &managementv3.ManagedChart{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart},
			Spec: managementv3.ManagedChartSpec{
				Chart: "harvester", RepoName: "harvester-charts", ReleaseName: "harvester",
				Version: strings.TrimPrefix(s.cfg.From.Harvester, "v"), DefaultNamespace: cluster.HarvesterNamespace,
				TimeoutSeconds: 600, Values: &runtime.RawExtension{Raw: values},
			},
		},
		status: func(o client.Object) {
			o.(*managementv3.ManagedChart).Status = deployedBundleStatus(o.GetGeneration())
		},
	}
}

func readyTrue() common.Condition {
	return common.Condition{Type: "Ready", Status: "True", LastUpdateTime: wranglerNow()}
}

// wranglerNow is a timestamp as Rancher's and Harvester's conditions carry it.
func wranglerNow() string { return time.Now().UTC().Format(time.RFC3339) }

// LostReplicaNode is the node, never created, that holds a replica of the
// DegradedVolumes.
const LostReplicaNode = "lost-node"

// volumes places VolumesPerNode volumes per managed node, each with up to
// three replicas on consecutive nodes and its engine on the first of them,
// every replica in sync (but one on LostReplicaNode).
func (s *Sim) volumes() []statusObject {
	nodes := s.cfg.nodeNames()
	replicas := min(3, len(nodes))
	now := time.Now().UTC().Format(time.RFC3339)
	var out []statusObject
	for i := 0; i < len(nodes)*max(s.cfg.VolumesPerNode, 0); i++ {
		var placed []string
		for r := 0; r < replicas; r++ {
			placed = append(placed, nodes[(i+r)%len(nodes)])
		}
		robustness := robustnessHealthy
		if i < s.cfg.DegradedVolumes {
			placed[len(placed)-1], robustness = LostReplicaNode, robustnessDegraded
		}
		name := fmt.Sprintf("pvc-%08d-sim", i+1)
		pvc := fmt.Sprintf("data-%d", i+1)
		out = append(out, statusObject{
			obj: &longhornv1beta2.Volume{
				ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: name},
				Spec:       longhornv1beta2.VolumeSpec{NumberOfReplicas: replicas, Size: "10737418240"},
			},
			status: func(o client.Object) {
				o.(*longhornv1beta2.Volume).Status = longhornv1beta2.VolumeStatus{
					State: cluster.LonghornVolumeAttached, Robustness: robustness, CurrentNodeID: placed[0],
					KubernetesStatus: longhornv1beta2.KubernetesStatus{Namespace: "default", PVCName: pvc, PVName: name},
				}
			},
		})
		modes, since := map[string]string{}, map[string]string{}
		for _, node := range placed {
			r := replicaName(name, node)
			mode, state := replicaModeRW, instanceRunning
			if node == LostReplicaNode {
				mode, state = replicaModeERR, instanceUnknown
			}
			modes[r], since[r] = mode, now
			out = append(out, statusObject{
				obj: &longhornv1beta2.Replica{
					ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: r,
						Labels: map[string]string{labelLonghornVolume: name, labelLonghornNode: node}},
					Spec: longhornv1beta2.ReplicaSpec{VolumeName: name, NodeID: node},
				},
				status: func(o client.Object) { o.(*longhornv1beta2.Replica).Status.CurrentState = state },
			})
		}
		out = append(out, statusObject{
			obj: &longhornv1beta2.Engine{
				ObjectMeta: metav1.ObjectMeta{Namespace: cluster.LonghornNamespace, Name: engineName(name)},
				Spec:       longhornv1beta2.EngineSpec{VolumeName: name, NodeID: placed[0]},
			},
			status: func(o client.Object) {
				o.(*longhornv1beta2.Engine).Status = longhornv1beta2.EngineStatus{
					CurrentState: instanceRunning, ReplicaModeMap: modes, ReplicaTransitionTimeMap: since,
				}
			},
		})
	}
	return out
}

// createVM creates a VirtualMachine and, when it runs, its instance on its
// node.
func (s *Sim) createVM(ctx context.Context, vm VM) error {
	tmpl := kubevirtv1.VirtualMachineInstanceSpec{EvictionStrategy: ptr.To(vm.EvictionStrategy)}
	if vm.Pinned {
		tmpl.NodeSelector = map[string]string{labelHostname: vm.Node}
	}
	if vm.HostDevice {
		tmpl.Domain.Devices.HostDevices = []kubevirtv1.HostDevice{{Name: "nic1", DeviceName: "intel.com/82599_ETHERNET_CONTROLLER_VIRTUAL_FUNCTION"}}
	}
	obj := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(vm.RunStrategy),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				Spec: tmpl,
			},
		},
	}
	running := vm.RunStrategy == runStrategyAlways || vm.RunStrategy == runStrategyRerunOnFailure
	if err := s.createWithStatus(ctx, statusObject{obj: obj, status: func(o client.Object) {
		o.(*kubevirtv1.VirtualMachine).Status = vmStatus(running, running, vm.RunStrategy)
	}}); err != nil {
		return err
	}
	if !running {
		return nil
	}
	return s.createWithStatus(ctx, statusObject{obj: newVMI(obj, vm.Node), status: func(o client.Object) {
		vmi := o.(*kubevirtv1.VirtualMachineInstance)
		vmi.Status = vmiStatus(vm.Node, &vmi.Spec)
		if vm.Paused {
			vmi.Status.Conditions = append(vmi.Status.Conditions, pausedCondition)
		}
	}})
}

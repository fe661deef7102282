package sim

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/common"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/harvesterv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/managementv3"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
	"github.com/harvester/upgrade-toolkit/internal/preflight"
)

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no nodes", Config{}, "at least one managed node"},
		{"VM on unknown node", Config{Nodes: 2, VMs: []VM{{Name: "a", Node: "node-9"}}}, `placed on node "node-9"`},
		{"duplicate VM", Config{Nodes: 1, VMs: []VM{{Name: "a", Node: "node-1"}, {Name: "a", Node: "node-1"}}}, "listed twice"},
		{"bad run strategy", Config{Nodes: 1, VMs: []VM{{Name: "a", Node: "node-1", RunStrategy: "Sometimes"}}}, `run strategy "Sometimes"`},
		{"disk of unknown node", Config{Nodes: 1, DiskByNode: map[string]Disk{"node-7": {}}}, `names node "node-7"`},
		{"fault of unknown VM", Config{Nodes: 1, Faults: FaultSet{OwnerStops: []string{"vm-node-1-1"}}}, `FaultSet.OwnerStops names VM "vm-node-1-1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.setDefaults()
			err := tc.cfg.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	ok := Config{Nodes: 3, Witness: true}
	ok.setDefaults()
	if err := ok.validate(); err != nil {
		t.Fatalf("a default config is invalid: %v", err)
	}
}

func TestBootstrap(t *testing.T) {
	s := start(t, Config{Nodes: 4, Witness: true, NonMigratableVMs: 2})
	ctx := context.Background()
	c := env.Client
	cfg := s.Config()

	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 5 {
		t.Fatalf("got %d nodes, want 4 managed + 1 witness", len(nodes.Items))
	}
	for _, n := range nodes.Items {
		machine := n.Annotations[cluster.AnnotationCAPIMachine]
		if n.Labels[cluster.LabelManagedNode] != "true" || n.Labels[labelHostname] != n.Name || machine == "" || n.Annotations[cluster.AnnotationInternalIP] == "" {
			t.Errorf("node %s lacks Harvester's labels or annotations: %v %v", n.Name, n.Labels, n.Annotations)
		}
		if !cluster.NodeReady(&n) || n.Status.NodeInfo.OSImage != "Harvester v1.7.1" || n.Status.NodeInfo.KubeletVersion != "v1.34.4+rke2r1" {
			t.Errorf("node %s: ready=%v osImage=%q kubelet=%q", n.Name, cluster.NodeReady(&n), n.Status.NodeInfo.OSImage, n.Status.NodeInfo.KubeletVersion)
		}
		if len(n.Status.Addresses) != 1 || n.Status.Addresses[0].Type != corev1.NodeInternalIP || n.Status.Addresses[0].Address != n.Annotations[cluster.AnnotationInternalIP] {
			t.Errorf("node %s addresses %v: want only its InternalIP", n.Name, n.Status.Addresses)
		}
		m := &capiv1beta1.Machine{}
		get(t, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: machine}, m)
		if m.Status.Phase != "Running" || m.Status.NodeRef == nil || m.Status.NodeRef.Name != n.Name {
			t.Errorf("machine %s: %+v", machine, m.Status)
		}
		sec := &corev1.Secret{}
		get(t, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: machine + "-machine-plan"}, sec)
		if sec.Type != cluster.MachinePlanSecretType || sec.Labels[cluster.LabelMachineName] != machine {
			t.Errorf("plan secret of %s: type %q labels %v", machine, sec.Type, sec.Labels)
		}
	}
	witness := &corev1.Node{}
	get(t, client.ObjectKey{Name: "witness-1"}, witness)
	if witness.Labels[cluster.LabelWitnessNode] != "true" {
		t.Errorf("witness labels %v", witness.Labels)
	}
	worker := &corev1.Node{}
	get(t, client.ObjectKey{Name: "node-4"}, worker)
	if worker.Labels[labelNodeControlPlane] != "" || worker.Labels[labelNodeWorker] != "true" {
		t.Errorf("node-4 should be a worker: %v", worker.Labels)
	}

	cl := &provisioningv1.Cluster{}
	get(t, localClusterKey, cl)
	if !cl.Status.Ready || cl.Spec.KubernetesVersion != cfg.From.Kubernetes {
		t.Errorf("cluster: ready=%v version=%q", cl.Status.Ready, cl.Spec.KubernetesVersion)
	}
	sv := &harvesterv1beta1.Setting{}
	get(t, client.ObjectKey{Name: cluster.ServerVersionSetting}, sv)
	ver := &harvesterv1beta1.Version{}
	get(t, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: "v1.8.0"}, ver)
	if sv.Value != "v1.7.1" || !strings.HasSuffix(ver.Spec.ISOURL, ".iso") || len(ver.Spec.ISOChecksum) != 128 {
		t.Errorf("server-version %q, version %+v", sv.Value, ver.Spec)
	}
	kv := &kubevirtv1.KubeVirt{}
	get(t, client.ObjectKey{Namespace: cluster.HarvesterNamespace, Name: cluster.KubeVirtName}, kv)
	if kv.Status.Phase != "Deployed" || kv.Status.ObservedKubeVirtVersion == "" || strings.Join(kv.Spec.WorkloadUpdateStrategy.WorkloadUpdateMethods, ",") != "LiveMigrate" {
		t.Errorf("kubevirt %+v %+v", kv.Spec, kv.Status)
	}
	mc := &managementv3.ManagedChart{}
	get(t, client.ObjectKey{Namespace: cluster.FleetLocalNamespace, Name: cluster.HarvesterManagedChart}, mc)
	lh := &longhornv1beta2.Setting{}
	get(t, client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: cluster.LonghornReplicaReplenishmentWaitInterval}, lh)
	addon := &harvesterv1beta1.Addon{}
	get(t, client.ObjectKey{Namespace: cluster.KubeSystemNamespace, Name: cluster.DeschedulerAddon}, addon)
	if !common.IsTrue(mc.Status.Conditions, "Ready") || lh.Value == "" || !addon.Spec.Enabled {
		t.Errorf("managed chart ready=%v, longhorn setting %q, descheduler enabled=%v", common.IsTrue(mc.Status.Conditions, "Ready"), lh.Value, addon.Spec.Enabled)
	}
	var vols longhornv1beta2.VolumeList
	if err := c.List(ctx, &vols); err != nil || len(vols.Items) != 4 {
		t.Fatalf("volumes: %d, %v", len(vols.Items), err)
	}
	for _, v := range vols.Items {
		var replicas longhornv1beta2.ReplicaList
		if err := c.List(ctx, &replicas, client.MatchingLabels{labelLonghornVolume: v.Name}); err != nil {
			t.Fatal(err)
		}
		e := &longhornv1beta2.Engine{}
		get(t, client.ObjectKey{Namespace: cluster.LonghornNamespace, Name: v.Name + "-e-0"}, e)
		if v.Status.Robustness != robustnessHealthy || len(replicas.Items) != 3 || len(e.Status.ReplicaModeMap) != 3 ||
			e.Spec.NodeID != v.Status.CurrentNodeID || e.Status.CurrentState != instanceRunning {
			t.Errorf("volume %s: %+v, %d replicas, engine %+v %+v", v.Name, v.Status, len(replicas.Items), e.Spec, e.Status)
		}
		for _, r := range replicas.Items {
			if !regexp.MustCompile(`^`+v.Name+`-r-[0-9a-f]{8}$`).MatchString(r.Name) || r.Spec.VolumeName != v.Name ||
				r.Labels[labelLonghornNode] != r.Spec.NodeID || r.Status.CurrentState != instanceRunning || e.Status.ReplicaModeMap[r.Name] != replicaModeRW {
				t.Errorf("replica %s: %+v %+v labels %v, mode %q", r.Name, r.Spec, r.Status, r.Labels, e.Status.ReplicaModeMap[r.Name])
			}
		}
	}

	var vmis kubevirtv1.VirtualMachineInstanceList
	if err := c.List(ctx, &vmis); err != nil {
		t.Fatal(err)
	}
	if len(vmis.Items) != len(cfg.VMs) || len(cfg.VMs) != 4*2+2 {
		t.Fatalf("%d instances for %d VMs, want 10", len(vmis.Items), len(cfg.VMs))
	}
	pinned, passthrough := 0, 0
	for _, vmi := range vmis.Items {
		if vmi.Labels[cluster.LabelVMINodeName] != vmi.Status.NodeName || vmi.Status.Phase != vmiPhaseRunning {
			t.Errorf("instance %s: label %q, status %+v", vmi.Name, vmi.Labels[cluster.LabelVMINodeName], vmi.Status)
		}
		if vmi.Spec.NodeSelector != nil {
			pinned++
		}
		if len(vmi.Spec.Domain.Devices.HostDevices) > 0 {
			passthrough++
			if kubevirtv1.ConditionStatus(vmi.Status.Conditions, "LiveMigratable") != "False" {
				t.Errorf("instance %s has a host device but is live-migratable", vmi.Name)
			}
		}
	}
	if pinned != 1 || passthrough != 1 {
		t.Errorf("pinned %d, passthrough %d: want 1 and 1", pinned, passthrough)
	}
}

func TestBootstrapRefusesAnOccupiedCluster(t *testing.T) {
	start(t, Config{Nodes: 1})
	_, err := Start(context.Background(), env.Config, Config{Nodes: 1, NoKubelet: true})
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a second bootstrap on the same API server: %v, want an 'already exists' error", err)
	}
}

// TestKubeletThroughNodeProxy reads every node's kubelet through the API
// server's node proxy, as the toolkit's disk-space check does.
func TestKubeletThroughNodeProxy(t *testing.T) {
	if _, err := KubeletAddress(); errors.Is(err, ErrNoGlobalUnicastAddress) {
		t.Skip("this machine has no global-unicast address for simulated kubelets")
	}
	full := Disk{CapacityBytes: 100 * gib, UsedBytes: 90 * gib, ImageGCHighThresholdPercent: 80}
	s := start(t, Config{Nodes: 3, DiskByNode: map[string]Disk{"node-2": full}})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int32]bool{}
	for _, node := range s.Nodes() {
		n := &corev1.Node{}
		get(t, client.ObjectKey{Name: node}, n)
		ports[n.Status.DaemonEndpoints.KubeletEndpoint.Port] = true

		raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "stats", "summary").DoRaw(context.Background())
		if err != nil {
			t.Fatalf("GET /api/v1/nodes/%s/proxy/stats/summary: %v", node, err)
		}
		var sum statsv1alpha1.Summary
		if err := json.Unmarshal(raw, &sum); err != nil {
			t.Fatalf("summary of %s: %v in %s", node, err, raw)
		}
		cfg := s.Config()
		want := cfg.disk(node)
		fs := sum.Node.Fs
		if sum.Node.NodeName != node || fs == nil || ptr.Deref(fs.CapacityBytes, 0) != want.CapacityBytes ||
			ptr.Deref(fs.UsedBytes, 0) != want.UsedBytes || ptr.Deref(fs.AvailableBytes, 0) != want.CapacityBytes-want.UsedBytes ||
			sum.Node.Runtime == nil || sum.Node.Runtime.ImageFs == nil {
			t.Errorf("summary of %s: %s", node, raw)
		}

		raw, err = cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "configz").DoRaw(context.Background())
		if err != nil {
			t.Fatalf("GET /api/v1/nodes/%s/proxy/configz: %v", node, err)
		}
		var configz struct {
			KubeletConfig kubeletconfigv1beta1.KubeletConfiguration `json:"kubeletconfig"`
		}
		if err := json.Unmarshal(raw, &configz); err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(configz.KubeletConfig.ImageGCHighThresholdPercent, 0); got != want.ImageGCHighThresholdPercent {
			t.Errorf("configz of %s: imageGCHighThresholdPercent %d, want %d", node, got, want.ImageGCHighThresholdPercent)
		}
	}
	// The toolkit's disk-space gatherer reads them too.
	for _, node := range s.Nodes() {
		d, err := preflight.GatherNodeDisk(context.Background(), preflight.ProxyKubelet{Kube: cs}, node)
		cfg := s.Config()
		want := cfg.disk(node)
		if err != nil || d.CapacityBytes != want.CapacityBytes || d.UsedBytes != want.UsedBytes || d.ImageGCHighThresholdPercent != int(want.ImageGCHighThresholdPercent) {
			t.Errorf("preflight.GatherNodeDisk(%s) = %+v, %v; want %+v", node, d, err, want)
		}
	}
	if len(ports) != 3 {
		t.Errorf("kubelet ports %v: want one distinct port per node", ports)
	}
}

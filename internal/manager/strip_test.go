package manager

import (
	"testing"
	"unsafe"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
)

// TestStripPodKeepsWhatTheManagerReads: the cached pod keeps its node, its
// containers' names and its status (the log capture, the Job observer and
// the repo's failure check read them) and loses the rest of its spec.
func TestStripPodKeepsWhatTheManagerReads(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}, Finalizers: []string{"f"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: corev1.PodSpec{
			NodeName:       "node-1",
			InitContainers: []corev1.Container{{Name: "init", Image: "i", Env: []corev1.EnvVar{{Name: "X", Value: "1"}}}},
			Containers:     []corev1.Container{{Name: "main", Image: "m", Command: []string{"run"}}},
			Volumes:        []corev1.Volume{{Name: "host"}},
			Tolerations:    []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodFailed,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, Message: "placed"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", RestartCount: 1, ContainerID: "containerd://x", ImageID: "sha256:y",
				State:        corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Message: "failed"}},
				VolumeMounts: []corev1.VolumeMountStatus{{Name: "host", MountPath: "/host"}}}},
			HostIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.1.0.1"}}},
	}
	out, err := stripPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if p.Spec.NodeName != "node-1" || len(p.Spec.InitContainers) != 1 || p.Spec.InitContainers[0].Name != "init" ||
		len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Name != "main" || p.Spec.Containers[0].Image != "m" {
		t.Errorf("stripped spec lost what the manager reads: %+v", p.Spec)
	}
	if p.Status.Phase != corev1.PodFailed || len(p.Status.ContainerStatuses) != 1 || p.Labels["a"] != "b" || len(p.Finalizers) != 1 {
		t.Errorf("stripped pod lost its status or metadata: %+v", p)
	}
	if len(p.Spec.Volumes) != 0 || len(p.Spec.Tolerations) != 0 || p.Spec.Containers[0].Command != nil || p.Spec.InitContainers[0].Env != nil || p.ManagedFields != nil {
		t.Errorf("stripped pod kept what nothing reads: %+v", p)
	}
	c := p.Status.ContainerStatuses[0]
	if c.RestartCount != 1 || c.State.Terminated == nil || c.State.Terminated.ExitCode != 3 || c.State.Terminated.Message != "failed" ||
		len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != corev1.PodScheduled || p.Status.Conditions[0].Message != "placed" {
		t.Errorf("stripped pod lost how its containers ended or the scheduler's verdict: %+v", p.Status)
	}
	if c.ContainerID != "" || c.ImageID != "" || c.VolumeMounts != nil || p.Status.HostIP != "" || p.Status.PodIPs != nil {
		t.Errorf("stripped pod status kept what nothing reads: %+v", p.Status)
	}
}

// TestStripNodeKeepsWhatTheManagerReads: a cached node keeps its Ready
// condition and nodeInfo (readiness, kubelet, OS image, boot ID) and its
// metadata and spec (labels, taints, cordon); not its other conditions.
func TestStripNodeKeepsWhatTheManagerReads(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "k"}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Message: "enough"},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1", BootID: "b"},
			Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			Images:    []corev1.ContainerImage{{Names: []string{"x"}}},
		},
	}
	out, err := stripNode(node)
	if err != nil {
		t.Fatal(err)
	}
	n := out.(*corev1.Node)
	if len(n.Status.Conditions) != 1 || !cluster.NodeReady(n) || n.Status.NodeInfo.BootID != "b" || n.Labels["a"] != "b" || !n.Spec.Unschedulable || len(n.Spec.Taints) != 1 {
		t.Errorf("stripped node lost what the manager reads: %+v", n)
	}
	if n.Status.Capacity != nil || n.Status.Addresses != nil || n.Status.Images != nil {
		t.Errorf("stripped node kept what nothing reads: %+v", n.Status)
	}
}

// TestStripJobKeepsWhatTheManagerReads: a cached Job keeps its metadata,
// status and suspension, and loses the rest of its spec.
func TestStripJobKeepsWhatTheManagerReads(t *testing.T) {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "harvester-system", Labels: map[string]string{"a": "b"}},
		Spec: batchv1.JobSpec{
			Suspend:          ptr.To(true),
			Selector:         &metav1.LabelSelector{MatchLabels: map[string]string{"controller-uid": "u"}},
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionFailJob}}},
			BackoffLimit:     ptr.To[int32](3),
			Template:         corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}},
		},
		Status: batchv1.JobStatus{Succeeded: 1, Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}},
	}
	out, err := stripJob(job)
	if err != nil {
		t.Fatal(err)
	}
	j := out.(*batchv1.Job)
	if !ptr.Deref(j.Spec.Suspend, false) || j.Status.Succeeded != 1 || len(j.Status.Conditions) != 1 || j.Labels["a"] != "b" || j.Namespace != "harvester-system" {
		t.Errorf("stripped Job lost what the manager reads: %+v", j)
	}
	if !equality.Semantic.DeepEqual(j.Spec, batchv1.JobSpec{Suspend: ptr.To(true)}) {
		t.Errorf("stripped Job kept what nothing reads: %+v", j.Spec)
	}
}

// TestStripLonghornKeepsWhatTheManagerReads: a cached Longhorn engine keeps
// its name and its replicas' modes, a replica its name and node; Longhorn's
// labels, annotations and owners and the rest go.
func TestStripLonghornKeepsWhatTheManagerReads(t *testing.T) {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: cluster.LonghornNamespace,
			Labels: map[string]string{"longhornvolume": "pvc-1"}, Annotations: map[string]string{"a": "b"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "longhorn.io/v1beta2", Kind: "Volume", Name: "pvc-1"}}}
	}
	bare := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: cluster.LonghornNamespace}
	}
	for _, tc := range []struct{ in, want any }{
		{&longhornv1beta2.Engine{ObjectMeta: meta("pvc-1-e-0"), Spec: longhornv1beta2.EngineSpec{VolumeName: "pvc-1", NodeID: "n1"},
			Status: longhornv1beta2.EngineStatus{CurrentState: "running", ReplicaModeMap: map[string]string{"pvc-1-r-1": "WO"},
				ReplicaTransitionTimeMap: map[string]string{"pvc-1-r-1": "2026-01-02T03:04:05Z"}}},
			&longhornv1beta2.Engine{ObjectMeta: bare("pvc-1-e-0"), Status: longhornv1beta2.EngineStatus{ReplicaModeMap: map[string]string{"pvc-1-r-1": "WO"}}}},
		{&longhornv1beta2.Replica{ObjectMeta: meta("pvc-1-r-1"), Spec: longhornv1beta2.ReplicaSpec{VolumeName: "pvc-1", NodeID: "n1"},
			Status: longhornv1beta2.ReplicaStatus{CurrentState: "running"}},
			&longhornv1beta2.Replica{ObjectMeta: bare("pvc-1-r-1"), Spec: longhornv1beta2.ReplicaSpec{NodeID: "n1"}}},
	} {
		got, err := stripLonghorn(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got, tc.want) {
			t.Errorf("stripped %+v, want %+v", got, tc.want)
		}
	}
}

// TestShareMeta: the strings that cached objects' metadata repeat are one
// copy, and the metadata reads as before.
func TestShareMeta(t *testing.T) {
	meta := func() *metav1.ObjectMeta {
		// Built from bytes, as the decoder builds them: separate copies.
		s := func(v string) string { return string([]byte(v)) }
		return &metav1.ObjectMeta{
			Name: s("log-1"), Namespace: s("harvester-system"),
			Labels:          map[string]string{s("management.harvesterhci.io/upgrade-plan"): s("hvst-upgrade-1")},
			Annotations:     map[string]string{s("management.harvesterhci.io/upgrade-log-node"): s("node-1")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: s("management.harvesterhci.io/v1beta1"), Kind: s("UpgradeLog"), Name: s("hvst-upgrade-1")}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}},
		}
	}
	a, b := meta(), meta()
	want := a.DeepCopy()
	want.ManagedFields = nil
	shareMeta(a)
	shareMeta(b)
	if !equality.Semantic.DeepEqual(a, want) {
		t.Fatalf("shareMeta changed the metadata:\n%+v\nwant\n%+v", a, want)
	}
	same := func(what, x, y string) {
		if unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s %q: two copies", what, x)
		}
	}
	same("namespace", a.Namespace, b.Namespace)
	for k := range a.Labels {
		for l := range b.Labels {
			same("label key", k, l)
		}
		same("label value", a.Labels[k], b.Labels[k])
	}
	for k := range a.Annotations {
		for l := range b.Annotations {
			same("annotation key", k, l)
		}
	}
	same("owner kind", a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind)
	if unsafe.StringData(a.Name) == unsafe.StringData(b.Name) {
		t.Errorf("names are the objects' own: want them left alone")
	}
}

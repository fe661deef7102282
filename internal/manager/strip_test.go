package manager

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "main"}}},
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
}

// TestStripNodeKeepsWhatTheManagerReads: a cached node keeps its conditions
// and nodeInfo (readiness, kubelet, OS image, boot ID) and its metadata and
// spec (labels, taints, cordon).
func TestStripNodeKeepsWhatTheManagerReads(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"a": "b"}},
		Spec:       corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "k"}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1", BootID: "b"},
			Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			Images:     []corev1.ContainerImage{{Names: []string{"x"}}},
		},
	}
	out, err := stripNode(node)
	if err != nil {
		t.Fatal(err)
	}
	n := out.(*corev1.Node)
	if len(n.Status.Conditions) != 1 || n.Status.NodeInfo.BootID != "b" || n.Labels["a"] != "b" || !n.Spec.Unschedulable || len(n.Spec.Taints) != 1 {
		t.Errorf("stripped node lost what the manager reads: %+v", n)
	}
	if n.Status.Capacity != nil || n.Status.Addresses != nil || n.Status.Images != nil {
		t.Errorf("stripped node kept what nothing reads: %+v", n.Status)
	}
}

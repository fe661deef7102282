package upgradelog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/cluster"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/capiv1beta1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/kubevirtv1"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/longhornv1beta2"
	"github.com/harvester/upgrade-toolkit/internal/cluster/apis/provisioningv1"
)

// clusterObjects are the objects of the cluster a support bundle holds
// besides the plan's own: what the upgrade moves (nodes, VMs and their
// instances, Longhorn volumes, Rancher's provisioning Cluster and CAPI
// Machines). They are read whole (every field, not the toolkit's reduced
// types), without their managed fields.
var clusterObjects = []struct {
	file      string
	gvk       schema.GroupVersionKind
	namespace string
	name      string // one object; all of the namespace when empty
}{
	{"nodes.yaml", corev1.SchemeGroupVersion.WithKind("Node"), "", ""},
	{"vms.yaml", kubevirtv1.GroupVersion.WithKind("VirtualMachine"), "", ""},
	{"vmis.yaml", kubevirtv1.GroupVersion.WithKind("VirtualMachineInstance"), "", ""},
	{"longhorn-volumes.yaml", longhornv1beta2.GroupVersion.WithKind("Volume"), cluster.LonghornNamespace, ""},
	{"provisioning-cluster.yaml", provisioningv1.GroupVersion.WithKind("Cluster"), cluster.FleetLocalNamespace, cluster.LocalClusterName},
	{"machines.yaml", capiv1beta1.GroupVersion.WithKind("Machine"), cluster.FleetLocalNamespace, ""},
}

// ManagerLogLines is how much of each manager container's log a bundle
// holds: its last lines.
const ManagerLogLines = 2000

// ManagerLogFile is the bundle's file of the manager's recent log.
const ManagerLogFile = "manager.log"

// ManagerLog reads the recent log of the manager's pods (the chart's
// labels) in namespace: the last ManagerLogLines of each container.
type ManagerLog func(ctx context.Context) ([]byte, error)

// ManagerLogOf is the ManagerLog read through kube.
func ManagerLogOf(kube kubernetes.Interface, namespace string) ManagerLog {
	return func(ctx context.Context) ([]byte, error) {
		pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: managerSelector})
		if err != nil {
			return nil, fmt.Errorf("listing the manager's pods in %s: %w", namespace, err)
		}
		if len(pods.Items) == 0 {
			return nil, fmt.Errorf("no pod of the manager in %s (labels %s)", namespace, managerSelector)
		}
		var b bytes.Buffer
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				fmt.Fprintf(&b, "==> %s/%s %s (node %s, last %d lines) <==\n", p.Namespace, p.Name, c.Name, p.Spec.NodeName, ManagerLogLines)
				req := kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, TailLines: ptr.To(int64(ManagerLogLines))})
				r, err := req.Stream(ctx)
				if err != nil {
					fmt.Fprintf(&b, "# %v\n", err)
					continue
				}
				_, err = io.Copy(&b, r)
				_ = r.Close()
				if err != nil {
					fmt.Fprintf(&b, "# %v\n", err)
				}
			}
		}
		return b.Bytes(), nil
	}
}

// managerSelector selects the manager's pods, as the chart labels them.
const managerSelector = "app.kubernetes.io/name=upgrade-toolkit,app.kubernetes.io/component=manager"

// readClusterObject reads one entry of clusterObjects: the object or the
// list, or why it could not be read (a kind the cluster does not serve, a
// request refused), which the bundle notes instead.
func readClusterObject(ctx context.Context, c client.Reader, gvk schema.GroupVersionKind, namespace, name string) (any, error) {
	if name != "" {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u); err != nil {
			return nil, describeRead(err, gvk, namespace+"/"+name)
		}
		u.SetManagedFields(nil)
		return u.Object, nil
	}
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := c.List(ctx, l, client.InNamespace(namespace)); err != nil {
		where := "the cluster"
		if namespace != "" {
			where = namespace
		}
		return nil, describeRead(err, gvk, where)
	}
	items := make([]map[string]any, 0, len(l.Items))
	sort.Slice(l.Items, func(i, j int) bool {
		return l.Items[i].GetNamespace()+"/"+l.Items[i].GetName() < l.Items[j].GetNamespace()+"/"+l.Items[j].GetName()
	})
	for _, u := range l.Items {
		u.SetManagedFields(nil)
		items = append(items, u.Object)
	}
	return items, nil
}

func describeRead(err error, gvk schema.GroupVersionKind, where string) error {
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("the cluster serves no %s (%s): %w", gvk.Kind, gvk.GroupVersion(), err)
	}
	return fmt.Errorf("reading %s in %s: %w", gvk.Kind, where, err)
}

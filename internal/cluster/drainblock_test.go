package cluster

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestDrainErrorPods(t *testing.T) {
	msg := `[error when evicting pods/"db-0" -n "apps": global timeout reached: 10m0s, ` +
		`error when evicting pods/"instance-manager-abc" -n "longhorn-system" (will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget., ` +
		`error when evicting pods/"db-0" -n "apps": global timeout reached: 10m0s]`
	want := []types.NamespacedName{{Namespace: "apps", Name: "db-0"}, {Namespace: "longhorn-system", Name: "instance-manager-abc"}}
	if got := DrainErrorPods(msg); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := DrainErrorPods("error trying to reach service: dial tcp: i/o timeout"); got != nil {
		t.Errorf("an error naming no pod gave %v", got)
	}
}

func TestDescribeDrainBlock(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db-0", Labels: map[string]string{"app": "db"}}}
	vmPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "virt-launcher-vm1-x",
		Labels: map[string]string{"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "vm1", "app": "db"}}}
	pdb := func(name, ns string, sel *metav1.LabelSelector, min *intstr.IntOrString, allowed int32) policyv1.PodDisruptionBudget {
		return policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: sel, MinAvailable: min},
			Status:     policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: allowed},
		}
	}
	db := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	one := ptr.To(intstr.FromInt32(1))
	maxZero := pdb("strict", "apps", &metav1.LabelSelector{}, nil, 0)
	maxZero.Spec.MaxUnavailable = ptr.To(intstr.FromString("0%"))
	unobserved := pdb("new", "apps", db, one, 0)
	unobserved.Generation = 2
	key := types.NamespacedName{Namespace: "apps", Name: "db-0"}
	tests := map[string]struct {
		pod  *corev1.Pod
		pdbs []policyv1.PodDisruptionBudget
		want string
	}{
		"one budget": {pod, []policyv1.PodDisruptionBudget{pdb("db", "apps", db, one, 0), pdb("other", "apps", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, one, 0)},
			"drain of node n1 blocked: PodDisruptionBudget apps/db (minAvailable 1, 0 disruptions allowed) protects pod apps/db-0; delete or relax the PodDisruptionBudget, or move the pod's workload"},
		"two budgets, an empty selector selects every pod": {pod, []policyv1.PodDisruptionBudget{pdb("db", "apps", db, one, 0), maxZero},
			"drain of node n1 blocked: PodDisruptionBudgets apps/db (minAvailable 1, 0 disruptions allowed), apps/strict (maxUnavailable 0%, 0 disruptions allowed) protects pod apps/db-0; delete or relax the PodDisruptionBudgets, or move the pod's workload"},
		"a missing selector selects none, another namespace neither": {pod, []policyv1.PodDisruptionBudget{pdb("none", "apps", nil, one, 0), pdb("db", "other", db, one, 0)},
			"drain of node n1 blocked: Rancher cannot evict pod apps/db-0 and no PodDisruptionBudget selects it now; check the pod (kubectl describe pod -n apps db-0): move the pod's workload"},
		"status not computed": {pod, []policyv1.PodDisruptionBudget{unobserved},
			"drain of node n1 blocked: PodDisruptionBudget apps/new (minAvailable 1, status not computed yet) protects pod apps/db-0"},
		"a VM's pod": {vmPod, []policyv1.PodDisruptionBudget{pdb("db", "apps", db, one, 0)},
			"protects pod apps/db-0 of VM apps/vm1; delete or relax the PodDisruptionBudget, or stop VM apps/vm1 (virtctl stop vm1 -n apps) or find why it does not live-migrate (kubectl get vmim -n apps)"},
		"pod gone": {nil, nil, "drain of node n1 blocked: Rancher could not evict pod apps/db-0, which is gone now; Rancher retries the drain"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := DescribeDrainBlock("n1", key, tt.pod, tt.pdbs)
			if !strings.Contains(got, tt.want) {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

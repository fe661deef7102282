package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// TestStatusPatch: applied to the stored plan, the patch gives the working
// copy's status, carries the stored resourceVersion, and names only the
// nodes that changed.
func TestStatusPatch(t *testing.T) {
	at := metav1.Date(2026, 11, 25, 10, 0, 0, 0, metav1.Now().Location())
	stored := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "42"},
		Status: v1beta1.UpgradePlanStatus{
			CurrentPhase: v1beta1.PhaseNodeUpgrading,
			SingleNode:   ptr.To("n0"),
			Conditions:   []metav1.Condition{{Type: "Progressing", Status: "True", Reason: "NodeUpgrade", LastTransitionTime: at}},
			NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
				"n1": {State: v1beta1.NodeStatePreDrained, Reason: "Waiting", Message: "drain error", LastTransitionTime: &at, HealthGateSince: &at},
				"n2": {State: v1beta1.NodeStateImagePreloaded},
				"n3": {State: v1beta1.NodeStateImagePreloaded},
			},
		}}
	for name, change := range map[string]func(*v1beta1.UpgradePlanStatus){
		"a node moves, its reason and deadline cleared": func(st *v1beta1.UpgradePlanStatus) {
			st.NodeUpgradeStatuses["n1"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeStatePostDraining, Message: "upgrading", LastTransitionTime: &at}
		},
		"a node added, one gone": func(st *v1beta1.UpgradePlanStatus) {
			delete(st.NodeUpgradeStatuses, "n3")
			st.NodeUpgradeStatuses["n4"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeStateImagePreloading}
		},
		"phase, conditions and a pointer": func(st *v1beta1.UpgradePlanStatus) {
			st.CurrentPhase = v1beta1.PhaseCleaningUp
			st.SingleNode = nil
			st.Conditions = append(st.Conditions, metav1.Condition{Type: "Degraded", Status: "False", Reason: "ReconcileSuccess", LastTransitionTime: at})
		},
		"every node gone": func(st *v1beta1.UpgradePlanStatus) { st.NodeUpgradeStatuses = nil },
	} {
		t.Run(name, func(t *testing.T) {
			working := stored.DeepCopy()
			change(&working.Status)
			patch, err := statusPatch(stored, working)
			if err != nil || patch == nil {
				t.Fatalf("statusPatch: %v, %v; want a patch for a changed status", patch, err)
			}
			if patch.Type() != types.MergePatchType {
				t.Errorf("patch type %s, want a JSON merge patch", patch.Type())
			}
			data, err := patch.Data(working)
			if err != nil {
				t.Fatal(err)
			}
			var envelope struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
				Status map[string]json.RawMessage `json:"status"`
			}
			if err := json.Unmarshal(data, &envelope); err != nil {
				t.Fatal(err)
			}
			if envelope.Metadata.ResourceVersion != "42" {
				t.Errorf("patch %s: resourceVersion %q, want the stored plan's 42", data, envelope.Metadata.ResourceVersion)
			}
			storedJSON, _ := json.Marshal(stored)
			patched, err := jsonpatch.MergePatch(storedJSON, data)
			if err != nil {
				t.Fatal(err)
			}
			var got v1beta1.UpgradePlan
			if err := json.Unmarshal(patched, &got); err != nil {
				t.Fatal(err)
			}
			// An empty map and no map are the same status.
			want := working.Status
			if len(want.NodeUpgradeStatuses) == 0 {
				want.NodeUpgradeStatuses = nil
			}
			if len(got.Status.NodeUpgradeStatuses) == 0 {
				got.Status.NodeUpgradeStatuses = nil
			}
			if !equality.Semantic.DeepEqual(got.Status, want) {
				t.Errorf("patch %s gives\n%+v\nwant\n%+v", data, got.Status, want)
			}
			for node, st := range stored.Status.NodeUpgradeStatuses {
				if now, ok := working.Status.NodeUpgradeStatuses[node]; ok && equality.Semantic.DeepEqual(now, st) &&
					strings.Contains(string(envelope.Status[nodeStatusesKey]), fmt.Sprintf("%q", node)) {
					t.Errorf("patch %s carries node %s, which did not change", data, node)
				}
			}
		})
	}
}

// TestStatusPatchNothingChanged: an unchanged status, a copy of it, or an
// empty node map for none, gives no patch, so the pass writes nothing.
func TestStatusPatchNothingChanged(t *testing.T) {
	at := metav1.Date(2026, 11, 25, 10, 0, 0, 0, metav1.Now().Location())
	stored := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "p", ResourceVersion: "7"},
		Status: v1beta1.UpgradePlanStatus{
			CurrentPhase: v1beta1.PhaseNodeUpgrading,
			Conditions:   []metav1.Condition{{Type: "Progressing", Status: "True", Reason: "NodeUpgrade", LastTransitionTime: at}},
			NodeUpgradeStatuses: map[string]v1beta1.NodeUpgradeStatus{
				"n1": {State: v1beta1.NodeStatePreDrained, LastTransitionTime: &at},
			},
		}}
	empty := &v1beta1.UpgradePlan{ObjectMeta: metav1.ObjectMeta{Name: "q"}}
	emptyMap := empty.DeepCopy()
	emptyMap.Status.NodeUpgradeStatuses = map[string]v1beta1.NodeUpgradeStatus{}
	for name, pair := range map[string][2]*v1beta1.UpgradePlan{
		"the same plan": {stored, stored},
		"a deep copy":   {stored, stored.DeepCopy()},
		"no map, empty": {empty, emptyMap},
	} {
		patch, err := statusPatch(pair[0], pair[1])
		if err != nil || patch != nil {
			data := []byte(nil)
			if patch != nil {
				data, _ = patch.Data(pair[1])
			}
			t.Errorf("%s: statusPatch gave %s, %v; want no patch", name, data, err)
		}
	}
}

package planstatus

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
			CurrentPhase:    v1beta1.PhaseNodeUpgrading,
			SingleNode:      ptr.To("n0"),
			PreviousVersion: ptr.To("v1.7.0"),
			ReleaseMetadata: &v1beta1.ReleaseMetadata{Harvester: "v1.8.0", OS: "Harvester v1.8.0", Kubernetes: "v1.34.4+rke2r1"},
			Conditions:      []metav1.Condition{{Type: "Progressing", Status: "True", Reason: "NodeUpgrade", LastTransitionTime: at}},
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
		"a node moves at a time finer than a second": func(st *v1beta1.UpgradePlanStatus) {
			later := metav1.NewTime(at.Add(1500 * time.Millisecond))
			st.NodeUpgradeStatuses["n2"] = v1beta1.NodeUpgradeStatus{State: v1beta1.NodeStatePreDraining, LastTransitionTime: &later}
			st.Conditions[0].LastTransitionTime = later
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
		"a field of the release metadata changed, one gone": func(st *v1beta1.UpgradePlanStatus) {
			st.ReleaseMetadata.Kubernetes = "v1.34.5+rke2r1"
			st.ReleaseMetadata.OS = ""
		},
		"a field gone": func(st *v1beta1.UpgradePlanStatus) { st.PreviousVersion = nil },
	} {
		t.Run(name, func(t *testing.T) {
			working := stored.DeepCopy()
			change(&working.Status)
			data, applied, err := statusPatch(stored, working)
			if err != nil || data == nil {
				t.Fatalf("statusPatch: %s, %v; want a patch for a changed status", data, err)
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
			// The working copy as the server stores it (times to the
			// second); an empty map and no map are the same status.
			var want v1beta1.UpgradePlanStatus
			if workingJSON, err := json.Marshal(working.Status); err != nil || json.Unmarshal(workingJSON, &want) != nil {
				t.Fatal(err)
			}
			if len(want.NodeUpgradeStatuses) == 0 {
				want.NodeUpgradeStatuses = nil
			}
			if len(got.Status.NodeUpgradeStatuses) == 0 {
				got.Status.NodeUpgradeStatuses = nil
			}
			if !equality.Semantic.DeepEqual(got.Status, want) {
				t.Errorf("patch %s gives\n%+v\nwant\n%+v", data, got.Status, want)
			}
			// What the watch reports for the write is what the API server
			// decodes: times to the second.
			if !equality.Semantic.DeepEqual(applied, got.Status) {
				t.Errorf("applied status\n%+v\nbut the server would hold\n%+v", applied, got.Status)
			}
			if _, sent := envelope.Status["releaseMetadata"]; sent && equality.Semantic.DeepEqual(working.Status.ReleaseMetadata, stored.Status.ReleaseMetadata) {
				t.Errorf("patch %s carries the release metadata, which did not change", data)
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
		data, _, err := statusPatch(pair[0], pair[1])
		if err != nil || data != nil {
			t.Errorf("%s: statusPatch gave %s, %v; want no patch", name, data, err)
		}
	}
}

// TestSameEntry: node entries compare by value, times as instants.
func TestSameEntry(t *testing.T) {
	at := metav1.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	elsewhere := metav1.NewTime(at.In(time.FixedZone("CET", 3600)))
	later := metav1.NewTime(at.Add(time.Second))
	base := v1beta1.NodeUpgradeStatus{State: v1beta1.NodeStatePreDrained, Reason: "r", Message: "m", LastTransitionTime: &at, PreviousBootID: "b"}
	for name, c := range map[string]struct {
		change func(*v1beta1.NodeUpgradeStatus)
		same   bool
	}{
		"a copy":                     {func(*v1beta1.NodeUpgradeStatus) {}, true},
		"the same instant elsewhere": {func(e *v1beta1.NodeUpgradeStatus) { e.LastTransitionTime = &elsewhere }, true},
		"another time":               {func(e *v1beta1.NodeUpgradeStatus) { e.LastTransitionTime = &later }, false},
		"a time gone":                {func(e *v1beta1.NodeUpgradeStatus) { e.LastTransitionTime = nil }, false},
		"a health gate held":         {func(e *v1beta1.NodeUpgradeStatus) { e.HealthGateSince = &at }, false},
		"another state":              {func(e *v1beta1.NodeUpgradeStatus) { e.State = v1beta1.NodeStatePostDraining }, false},
		"another message":            {func(e *v1beta1.NodeUpgradeStatus) { e.Message = "n" }, false},
		"another boot ID recorded":   {func(e *v1beta1.NodeUpgradeStatus) { e.PreviousBootID = "c" }, false},
		"another OS image recorded":  {func(e *v1beta1.NodeUpgradeStatus) { e.PreviousOSImage = "os" }, false},
		"the reason cleared":         {func(e *v1beta1.NodeUpgradeStatus) { e.Reason = "" }, false},
	} {
		other := *base.DeepCopy()
		c.change(&other)
		if got := sameEntry(base, other); got != c.same {
			t.Errorf("%s: sameEntry = %v, want %v", name, got, c.same)
		}
	}
}

package planstatus

import (
	"encoding/json"
	"reflect"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// statusPatch is the JSON merge patch of a plan's status from the stored
// plan to the working copy, with the stored plan's resourceVersion: the write
// fails with a conflict when the plan changed since it was read, as
// client.MergeFromWithOptimisticLock's does. Unlike that one, it does not
// serialise both whole plans to compare them: the per-node map is compared
// entry by entry and only the entries that changed are serialised, so a node
// step costs the same to write on a cluster of 500 nodes as on one of 5. The
// patch is nil when the status did not change: the comparison is the patch's
// own. applied is the status the API server holds once the patch is applied,
// as it would decode it (times to the second): what the watch of plans
// reports for the write without reading the plan back.
func statusPatch(from, to *v1beta1.UpgradePlan) (patch []byte, applied v1beta1.UpgradePlanStatus, err error) {
	status, applied, err := statusMergePatch(&from.Status, &to.Status)
	if err != nil || len(status) == 0 {
		return nil, applied, err
	}
	patch, err = json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": from.ResourceVersion},
		"status":   status,
	})
	return patch, applied, err
}

// nodeStatusesKey is the JSON name of UpgradePlanStatus.NodeUpgradeStatuses.
const nodeStatusesKey = "nodeUpgradeStatuses"

// statusMergePatch is the JSON merge patch that turns status from into to,
// and to as the API server stores it.
func statusMergePatch(from, to *v1beta1.UpgradePlanStatus) (map[string]json.RawMessage, v1beta1.UpgradePlanStatus, error) {
	var applied v1beta1.UpgradePlanStatus
	// Everything but the per-node map, the fields that changed only: most
	// writes change a condition and a node's entry, and the release
	// metadata, the version and the settings need not go through JSON on
	// each of them.
	fromRest, toRest := *from, *to
	fromRest.NodeUpgradeStatuses, toRest.NodeUpgradeStatuses = nil, nil
	unchanged := dropUnchanged(&fromRest, &toRest)
	if reflect.ValueOf(toRest).IsZero() && reflect.ValueOf(fromRest).IsZero() && sameEntries(from.NodeUpgradeStatuses, to.NodeUpgradeStatuses) {
		// Most passes change nothing: no patch, and no copy of the map.
		return nil, applied, nil
	}
	rest, toJSON, err := mergePatch(fromRest, toRest)
	if err != nil {
		return nil, applied, err
	}
	if err := json.Unmarshal(toJSON, &applied); err != nil {
		return nil, applied, err
	}
	// What did not change is the server's own.
	a, f := reflect.ValueOf(&applied).Elem(), reflect.ValueOf(from).Elem()
	for _, i := range unchanged {
		a.Field(i).Set(f.Field(i))
	}
	patch := map[string]json.RawMessage{}
	if err := json.Unmarshal(rest, &patch); err != nil {
		return nil, applied, err
	}
	nodes := map[string]json.RawMessage{}
	for name := range from.NodeUpgradeStatuses {
		if _, kept := to.NodeUpgradeStatuses[name]; !kept {
			nodes[name] = json.RawMessage("null")
		}
	}
	if len(to.NodeUpgradeStatuses) > 0 {
		applied.NodeUpgradeStatuses = make(map[string]v1beta1.NodeUpgradeStatus, len(to.NodeUpgradeStatuses))
	}
	for name, is := range to.NodeUpgradeStatuses {
		was, existed := from.NodeUpgradeStatuses[name]
		if existed && sameEntry(was, is) {
			// The stored entry is the server's own.
			applied.NodeUpgradeStatuses[name] = was
			continue
		}
		var isJSON []byte
		if existed {
			nodes[name], isJSON, err = mergePatch(was, is)
		} else {
			isJSON, err = json.Marshal(is)
			nodes[name] = isJSON
		}
		if err != nil {
			return nil, applied, err
		}
		var stored v1beta1.NodeUpgradeStatus
		if err := json.Unmarshal(isJSON, &stored); err != nil {
			return nil, applied, err
		}
		applied.NodeUpgradeStatuses[name] = stored
	}
	if len(nodes) > 0 {
		if patch[nodeStatusesKey], err = json.Marshal(nodes); err != nil {
			return nil, applied, err
		}
	}
	return patch, applied, nil
}

// dropUnchanged zeroes, in both a and b, each field that is the same in
// both, and returns their indexes.
func dropUnchanged(a, b *v1beta1.UpgradePlanStatus) []int {
	av, bv := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	var same []int
	for i := range av.NumField() {
		af, bf := av.Field(i), bv.Field(i)
		if af.IsZero() && bf.IsZero() || !reflect.DeepEqual(af.Interface(), bf.Interface()) {
			continue
		}
		af.SetZero()
		bf.SetZero()
		same = append(same, i)
	}
	return same
}

// sameEntries reports whether two per-node maps hold the same entries.
func sameEntries(a, b map[string]v1beta1.NodeUpgradeStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for name, x := range a {
		if y, ok := b[name]; !ok || !sameEntry(x, y) {
			return false
		}
	}
	return true
}

// sameEntry compares two node entries without reflection: every pass
// compares every node's, so a generic comparison would cost a large cluster
// more than the write. Times compare as instants; the rest with ==, which
// stops compiling if the entry ever holds a slice or a map.
func sameEntry(a, b v1beta1.NodeUpgradeStatus) bool {
	if !a.LastTransitionTime.Equal(b.LastTransitionTime) || !a.HealthGateSince.Equal(b.HealthGateSince) {
		return false
	}
	a.LastTransitionTime, b.LastTransitionTime = nil, nil
	a.HealthGateSince, b.HealthGateSince = nil, nil
	return a == b
}

// mergePatch is the JSON merge patch from a to b, and b's JSON.
func mergePatch(a, b any) (patch, bJSON []byte, err error) {
	aj, err := json.Marshal(a)
	if err != nil {
		return nil, nil, err
	}
	if bJSON, err = json.Marshal(b); err != nil {
		return nil, nil, err
	}
	patch, err = jsonpatch.CreateMergePatch(aj, bJSON)
	return patch, bJSON, err
}

package controller

import (
	"encoding/json"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// statusPatch is the JSON merge patch of a plan's status from the stored
// plan to the working copy, with the stored plan's resourceVersion: the write
// fails with a conflict when the plan changed since it was read, as
// client.MergeFromWithOptimisticLock's does. Unlike that one, it does not
// serialise both whole plans to compare them: the per-node map is compared
// entry by entry and only the entries that changed are serialised, so a node
// step costs the same to write on a cluster of 500 nodes as on one of 5. It is
// nil when the status did not change: the comparison is the patch's own.
func statusPatch(from, to *v1beta1.UpgradePlan) (client.Patch, error) {
	status, err := statusMergePatch(&from.Status, &to.Status)
	if err != nil || len(status) == 0 {
		return nil, err
	}
	data, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": from.ResourceVersion},
		"status":   status,
	})
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.MergePatchType, data), nil
}

// nodeStatusesKey is the JSON name of UpgradePlanStatus.NodeUpgradeStatuses.
const nodeStatusesKey = "nodeUpgradeStatuses"

// statusMergePatch is the JSON merge patch that turns status from into to.
func statusMergePatch(from, to *v1beta1.UpgradePlanStatus) (map[string]json.RawMessage, error) {
	// Everything but the per-node map: small, compared whole.
	fromRest, toRest := *from, *to
	fromRest.NodeUpgradeStatuses, toRest.NodeUpgradeStatuses = nil, nil
	rest, err := mergePatch(fromRest, toRest)
	if err != nil {
		return nil, err
	}
	patch := map[string]json.RawMessage{}
	if err := json.Unmarshal(rest, &patch); err != nil {
		return nil, err
	}
	nodes := map[string]json.RawMessage{}
	for name := range from.NodeUpgradeStatuses {
		if _, kept := to.NodeUpgradeStatuses[name]; !kept {
			nodes[name] = json.RawMessage("null")
		}
	}
	for name, is := range to.NodeUpgradeStatuses {
		was, existed := from.NodeUpgradeStatuses[name]
		switch {
		case !existed:
			if nodes[name], err = json.Marshal(is); err != nil {
				return nil, err
			}
		case !equality.Semantic.DeepEqual(was, is):
			if nodes[name], err = mergePatch(was, is); err != nil {
				return nil, err
			}
		}
	}
	if len(nodes) > 0 {
		if patch[nodeStatusesKey], err = json.Marshal(nodes); err != nil {
			return nil, err
		}
	}
	return patch, nil
}

// mergePatch is the JSON merge patch from a to b.
func mergePatch(a, b any) ([]byte, error) {
	aj, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	bj, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	return jsonpatch.CreateMergePatch(aj, bj)
}

package vmledger

import (
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Who says who last set a field of an object, as its managedFields tell:
// the field manager (for a person, the client they used: kubectl-edit,
// kubectl-annotate, virt-api for virtctl, harvester for the UI), the
// operation and when; "" when no entry owns the field. path is the field's
// keys, e.g. "spec", "runStrategy".
func Who(entries []metav1.ManagedFieldsEntry, path ...string) string {
	var best *metav1.ManagedFieldsEntry
	for i := range entries {
		e := &entries[i]
		if e.FieldsV1 == nil || !owns(e.FieldsV1.Raw, path) {
			continue
		}
		if best == nil || (e.Time != nil && (best.Time == nil || best.Time.Before(e.Time))) {
			best = e
		}
	}
	if best == nil {
		return ""
	}
	if best.Time == nil {
		return fmt.Sprintf("%s (%s)", best.Manager, best.Operation)
	}
	return fmt.Sprintf("%s (%s at %s)", best.Manager, best.Operation, best.Time.UTC().Format(time.RFC3339))
}

// owns reports whether a FieldsV1 set holds the field at path.
func owns(raw []byte, path []string) bool {
	var set map[string]json.RawMessage
	if json.Unmarshal(raw, &set) != nil {
		return false
	}
	for i, k := range path {
		v, ok := set["f:"+k]
		if !ok {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		set = nil
		if json.Unmarshal(v, &set) != nil {
			return false
		}
	}
	return false
}

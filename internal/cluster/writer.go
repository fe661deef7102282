package cluster

import (
	"bytes"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LastSpecWriter says who last changed the object's spec and when, from its
// managed fields: the newest entry whose fields include spec.field (e.g.
// "unschedulable", "taints"), else the newest that changed the spec at all
// (a field someone removed has no owner left). Empty when the object does
// not say (e.g. read from a cache that drops managed fields).
func LastSpecWriter(meta *metav1.ObjectMeta, field string) (string, time.Time) {
	want := []byte(`"f:` + field + `"`)
	var who, any string
	var at, anyAt time.Time
	for _, e := range meta.ManagedFields {
		if e.FieldsV1 == nil || e.Time == nil || !bytes.Contains(e.FieldsV1.Raw, []byte(`"f:spec"`)) {
			continue
		}
		t := e.Time.Time
		if bytes.Contains(e.FieldsV1.Raw, want) && !t.Before(at) {
			who, at = e.Manager, t
		}
		if !t.Before(anyAt) {
			any, anyAt = e.Manager, t
		}
	}
	if who != "" {
		return who, at
	}
	return any, anyAt
}

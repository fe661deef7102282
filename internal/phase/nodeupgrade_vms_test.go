package phase

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// sameVMs says whether a node's VM counts changed, as a status write
// would: every count and the deadline's instant.
func TestSameVMs(t *testing.T) {
	at := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	base := v1beta1.NodeVMs{ToMove: 3, Moved: 1, Pending: 2, MigrationDeadline: &metav1.Time{Time: at}}
	with := func(f func(*v1beta1.NodeVMs)) *v1beta1.NodeVMs {
		v := base
		f(&v)
		return &v
	}
	for _, tc := range []struct {
		name string
		a, b *v1beta1.NodeVMs
		want bool
	}{
		{"same", &base, with(func(v *v1beta1.NodeVMs) { v.MigrationDeadline = &metav1.Time{Time: at.In(time.Local)} }), true},
		{"both none", nil, nil, true},
		{"none and some", nil, &base, false},
		{"a count", &base, with(func(v *v1beta1.NodeVMs) { v.Failed = 1 }), false},
		{"a deadline set", with(func(v *v1beta1.NodeVMs) { v.MigrationDeadline = nil }), &base, false},
		{"a deadline moved", &base, with(func(v *v1beta1.NodeVMs) { v.MigrationDeadline = &metav1.Time{Time: at.Add(time.Second)} }), false},
	} {
		if got := sameVMs(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: sameVMs %v, want %v", tc.name, got, tc.want)
		}
	}
}

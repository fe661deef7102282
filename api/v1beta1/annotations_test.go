package v1beta1

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestBoolAnnotations(t *testing.T) {
	for _, tt := range []struct {
		value   *string
		want    bool
		wantErr bool
	}{
		{value: nil},
		{value: ptr.To("true"), want: true},
		{value: ptr.To("false")},
		{value: ptr.To("True"), wantErr: true},
		{value: ptr.To("1"), wantErr: true},
		{value: ptr.To(""), wantErr: true},
	} {
		p := &UpgradePlan{}
		if tt.value != nil {
			p.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{AnnotationSkipGCThresholdCheck: *tt.value}}
		}
		got, err := p.SkipGCThresholdCheck()
		var ae *AnnotationError
		if got != tt.want || (err != nil) != tt.wantErr || (err != nil && (!errors.As(err, &ae) || ae.Key != AnnotationSkipGCThresholdCheck)) {
			t.Errorf("SkipGCThresholdCheck with %v = %v, %v; want %v, error %v", tt.value, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestMinCertsExpirationInDay(t *testing.T) {
	for value, want := range map[string]int{"30": 30, "1": 1, "0": -1, "-3": -1, "7d": -1, "1.5": -1, "": -1} {
		p := &UpgradePlan{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationMinCertsExpirationInDay: value}}}
		got, err := p.MinCertsExpirationInDay()
		if (want < 0) != (err != nil) || (want >= 0 && got != want) {
			t.Errorf("MinCertsExpirationInDay with %q = %d, %v; want %d", value, got, err, want)
		}
	}
	if got, err := (&UpgradePlan{}).MinCertsExpirationInDay(); got != 0 || err != nil {
		t.Errorf("unset: %d, %v; want 0, nil", got, err)
	}
}

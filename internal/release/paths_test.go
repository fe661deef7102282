package release

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckSupportedPath(t *testing.T) {
	for _, tc := range []struct {
		current string
		refused bool
		names   []string
	}{
		{current: "v1.7.0"},
		{current: "v1.7.1"},
		{current: "v1.8.0-rc1"},
		{current: "v1.8-head"},
		{current: "master-head"},
		{current: "v1.7.0-rc2", refused: true, names: []string{"Longhorn's v1beta1", "NetworkManager"}},
		{current: "v1.6.1", refused: true, names: []string{"Longhorn's v1beta1", "NetworkManager"}},
		{current: "v1.3.2", refused: true, names: []string{"Grafana", "csi-driver"}},
		{current: "v1.0.3", refused: true, names: []string{"VLAN", "untilv1.1.1", "local-rke-state"}},
	} {
		t.Run(tc.current, func(t *testing.T) {
			err := CheckSupportedPath(tc.current)
			if (err != nil) != tc.refused {
				t.Fatalf("CheckSupportedPath(%s) = %v, want refused %v", tc.current, err, tc.refused)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrUnsupportedPath) || !strings.Contains(err.Error(), "v1.7.0 or newer") || !strings.Contains(err.Error(), "spec.force does not skip") {
				t.Errorf("message %q: want the oldest release and that force does not help", err)
			}
			for _, n := range tc.names {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("message %q does not name %q", err, n)
				}
			}
		})
	}
	if err := CheckSupportedPath("v 1"); err == nil || errors.Is(err, ErrUnsupportedPath) {
		t.Errorf("an invalid version: %v", err)
	}
	if strings.Contains(errorOf("v1.6.1"), "Grafana") {
		t.Error("v1.6.1 does not need the steps of v1.4")
	}
}

func errorOf(v string) string {
	if err := CheckSupportedPath(v); err != nil {
		return err.Error()
	}
	return ""
}

func TestParseSeries(t *testing.T) {
	for in, want := range map[string]string{"v1.7": "v1.7", "v1.7.1": "v1.7", "v1.7.0-rc2": "v1.7", "v1.8-head": "v1.8", "1.9.0": "v1.9", "v1.10-ab12cd34": "v1.10"} {
		s, ok := ParseSeries(in)
		if !ok || s.String() != want {
			t.Errorf("ParseSeries(%q) = %v, %v; want %s", in, s, ok, want)
		}
	}
	for _, in := range []string{"master-head", "", "f024f49a"} {
		if _, ok := ParseSeries(in); ok {
			t.Errorf("ParseSeries(%q) names a release line", in)
		}
	}
	a, _ := ParseSeries("v1.9")
	b, _ := ParseSeries("v1.10")
	if a.Compare(b) >= 0 || b.Compare(a) <= 0 || a.Compare(a) != 0 {
		t.Error("v1.9 is not before v1.10")
	}
}

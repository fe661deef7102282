package webhook

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// TestLogWarnings: a plan that asks for its logs is warned when the manager
// keeps none, and only then.
func TestLogWarnings(t *testing.T) {
	for _, tc := range []struct {
		logEnabled *bool
		managerOn  bool
		warn       bool
	}{
		{ptr.To(true), false, true},
		{ptr.To(true), true, false},
		{nil, false, false},
		{ptr.To(false), false, false},
	} {
		p := &v1beta1.UpgradePlan{Spec: v1beta1.UpgradePlanSpec{LogEnabled: tc.logEnabled}}
		w := logWarnings(p, tc.managerOn)
		if got := len(w) == 1 && strings.Contains(w[0], "--upgrade-log=false"); got != tc.warn {
			t.Errorf("logEnabled %v, manager %v: warnings %q, want a warning: %v", ptr.Deref(tc.logEnabled, false), tc.managerOn, w, tc.warn)
		}
	}
}

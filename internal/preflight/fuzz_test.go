package preflight

import (
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// userAnnotations are the annotations a user sets on a plan.
var userAnnotations = []string{
	v1beta1.AnnotationSkipWebhook, v1beta1.AnnotationSkipSingleReplicaDetachedVol, v1beta1.AnnotationAllowDeletion,
	v1beta1.AnnotationSkipGCThresholdCheck, v1beta1.AnnotationMinCertsExpirationInDay,
	v1beta1.AnnotationUpgradeToolkitImage, v1beta1.AnnotationRetry,
}

// FuzzAdmitAnnotations sets any value on each user annotation of a running
// plan: the webhook never panics, and every error it returns names the
// annotation it refuses and says what is wanted.
func FuzzAdmitAnnotations(f *testing.F) {
	for _, v := range []string{"true", "false", "yes", "", "0", "-3", "30", "99999999999999999999", "a:b", "registry.example.com:5000/x", "UPPER/Case", "x@sha256:abc", "\x00\xff"} {
		f.Add(uint8(0), v)
	}
	f.Fuzz(func(t *testing.T, which uint8, value string) {
		key := userAnnotations[int(which)%len(userAnnotations)]
		before := testPlan()
		before.Status.CurrentPhase = v1beta1.PhaseNodeUpgrading
		after := before.DeepCopy()
		after.Annotations = map[string]string{key: value}
		r := AdmitUpdate(before, after, []string{"n1"})
		for _, e := range r.Errors() {
			msg := e.Error()
			if !strings.Contains(msg, key) || len(e.Detail) < 10 {
				t.Fatalf("error %q for %s=%q does not name the annotation or say what is wanted", msg, key, value)
			}
		}
	})
}

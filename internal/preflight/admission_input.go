package preflight

import (
	"fmt"
	"regexp"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// admissionPlanName: the plan's name prefixes the names of the Services and
// Jobs the upgrade creates, and a Service name is a DNS-1035 label.
var admissionPlanName = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)

// admitName: the API server accepts dots and a leading digit in the name of
// a cluster-scoped object; the objects the plan creates would not.
func admitName(p *v1beta1.UpgradePlan) AdmissionResult {
	var r AdmissionResult
	if v := PlanName(p.Name); v.Result == v1beta1.CheckFailed {
		r.refuse(field.Invalid(field.NewPath("metadata", "name"), p.Name, v.Message))
	}
	return r
}

// PlanName checks a plan's name: the webhook refuses a plan whose name
// fails, and the manager fails one that got past it (written with the
// webhook off) before it creates anything. The message of a failure says
// what the name must be.
func PlanName(name string) Verdict {
	if admissionPlanName.MatchString(name) {
		return Passed(ReasonPlanName, "metadata.name %q can prefix the names of the upgrade's objects", name)
	}
	return Failed(ReasonPlanName, "%s", "must start with a lowercase letter and contain only lowercase letters, digits and '-' (no '.'), "+
		"because it prefixes the names of the Services and Jobs the upgrade creates; "+
		"e.g. use generateName: hvst-upgrade-")
}

// admissionBoolAnnotations take "true" or "false" and nothing else: the toolkit acts
// on "true" only, so a "yes" or "True" would silently do nothing.
var admissionBoolAnnotations = []string{
	v1beta1.AnnotationSkipWebhook,
	v1beta1.AnnotationSkipSingleReplicaDetachedVol,
	v1beta1.AnnotationAllowDeletion,
	v1beta1.AnnotationSkipGCThresholdCheck,
}

// admissionRiskyWhenTrue says what a bool annotation set to "true" gives up.
// skip-single-replica-detached-vol is warned about by its check, which names
// the volumes it lets through.
var admissionRiskyWhenTrue = map[string]string{
	v1beta1.AnnotationSkipWebhook: "the cluster's health (nodes, Rancher, Longhorn, backups, VMs, charts, addons) " +
		"was not checked before this upgrade",
	v1beta1.AnnotationAllowDeletion: "this plan can be deleted while it runs (except during ClusterUpgrading and " +
		"NodeUpgrading); deleting it stops the upgrade half-way",
	v1beta1.AnnotationSkipGCThresholdCheck: "the disk-space check against the kubelet image garbage collection " +
		"threshold is skipped; a node may run short of space when the new images are loaded",
}

// admitAnnotations validates the values of the user annotations that differ
// from before (nil on create) and warns about the risky ones. Unchanged
// values are left alone, so that an old plan never blocks updates of its
// metadata.
func admitAnnotations(before, after map[string]string) AdmissionResult {
	var r AdmissionResult
	changed := func(key string) (string, bool) {
		v, ok := after[key]
		old, had := before[key]
		return v, ok && (!had || old != v)
	}
	path := field.NewPath("metadata", "annotations")
	for _, key := range admissionBoolAnnotations {
		v, ok := changed(key)
		if !ok {
			continue
		}
		switch on, err := v1beta1.ParseBoolAnnotation(v); {
		case err != nil:
			r.refuse(field.Invalid(path.Key(key), v, err.Error()))
		case on:
			if risk, ok := admissionRiskyWhenTrue[key]; ok {
				r.warn("%s=true: %s", key, risk)
			}
		}
	}
	if v, ok := changed(v1beta1.AnnotationMinCertsExpirationInDay); ok {
		days, err := v1beta1.ParseMinCertsExpirationInDay(v)
		switch {
		case err != nil:
			r.refuse(field.Invalid(path.Key(v1beta1.AnnotationMinCertsExpirationInDay), v, err.Error()))
		case days < v1beta1.DefaultMinCertsExpirationInDay:
			r.warn("%s=%d: the upgrade starts even if the API server's certificate "+
				"expires within %[2]d days (default %d); rotate the RKE2 certificates first if it does",
				v1beta1.AnnotationMinCertsExpirationInDay, days, v1beta1.DefaultMinCertsExpirationInDay)
		}
	}
	if v, ok := changed(v1beta1.AnnotationUpgradeToolkitImage); ok {
		if err := admissionImageRepository(v); err != nil {
			r.refuse(field.Invalid(path.Key(v1beta1.AnnotationUpgradeToolkitImage), v, fmt.Sprintf(
				"must be an image repository without a tag or digest, e.g. %q or \"registry.example.com:5000/harvester/upgrade-toolkit\"; "+
					"the tag comes from spec.upgrade (%v)", v1beta1.DefaultUpgradeToolkitRepository, err)))
		} else {
			r.warn("%s: the upgrade runs %s instead of %s",
				v1beta1.AnnotationUpgradeToolkitImage, v, v1beta1.DefaultUpgradeToolkitRepository)
		}
	}
	return r
}

func admissionImageRepository(s string) error {
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return err
	}
	if !reference.IsNameOnly(named) {
		return fmt.Errorf("it has a tag or digest")
	}
	return nil
}

// admissionForceWarning warns when spec.force becomes true (on create, before is nil).
func admissionForceWarning(before, after *v1beta1.UpgradePlan) AdmissionResult {
	if !after.Forced() || (before != nil && before.Forced()) {
		return AdmissionResult{}
	}
	return admissionWarn("spec.force is true: the upgrade eligibility check (minimum upgradable version, no downgrade, " +
		"no dev to release) is skipped; an ineligible upgrade can leave the cluster broken")
}

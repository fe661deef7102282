package v1beta1

import (
	"errors"
	"fmt"
	"strconv"
)

// The user annotations' values are parsed here only, so that the webhook,
// which refuses a bad value, and the phases, which act on the value, read
// them by the same rule.

// AnnotationError is a user annotation whose value breaks its rule.
// +kubebuilder:object:generate=false
type AnnotationError struct {
	Key, Value string
	Err        error
}

func (e *AnnotationError) Error() string {
	return fmt.Sprintf("annotation %s has the value %q: %v", e.Key, e.Value, e.Err)
}

func (e *AnnotationError) Unwrap() error { return e.Err }

// ParseBoolAnnotation parses the value of a "true"/"false" annotation. The
// toolkit acts on "true" only, so any other spelling ("yes", "True") is an
// error rather than a silent false.
func ParseBoolAnnotation(value string) (bool, error) {
	switch value {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, errors.New(`must be "true" or "false"`)
}

// ParseMinCertsExpirationInDay parses AnnotationMinCertsExpirationInDay: a
// whole number of days greater than 0.
func ParseMinCertsExpirationInDay(value string) (int, error) {
	days, err := strconv.Atoi(value)
	if err != nil || days <= 0 {
		return 0, fmt.Errorf("must be a whole number of days greater than 0, e.g. \"%d\" (the default)", DefaultMinCertsExpirationInDay)
	}
	return days, nil
}

// boolAnnotation returns the plan's bool annotation key: false when unset,
// false and an *AnnotationError when its value is neither "true" nor "false".
func (p *UpgradePlan) boolAnnotation(key string) (bool, error) {
	v, ok := p.Annotations[key]
	if !ok {
		return false, nil
	}
	b, err := ParseBoolAnnotation(v)
	if err != nil {
		return false, &AnnotationError{Key: key, Value: v, Err: err}
	}
	return b, nil
}

// SkipWebhook reports AnnotationSkipWebhook.
func (p *UpgradePlan) SkipWebhook() (bool, error) { return p.boolAnnotation(AnnotationSkipWebhook) }

// SkipSingleReplicaDetachedVol reports AnnotationSkipSingleReplicaDetachedVol.
func (p *UpgradePlan) SkipSingleReplicaDetachedVol() (bool, error) {
	return p.boolAnnotation(AnnotationSkipSingleReplicaDetachedVol)
}

// AllowDeletion reports AnnotationAllowDeletion.
func (p *UpgradePlan) AllowDeletion() (bool, error) { return p.boolAnnotation(AnnotationAllowDeletion) }

// SkipGCThresholdCheck reports AnnotationSkipGCThresholdCheck.
func (p *UpgradePlan) SkipGCThresholdCheck() (bool, error) {
	return p.boolAnnotation(AnnotationSkipGCThresholdCheck)
}

// MinCertsExpirationInDay returns AnnotationMinCertsExpirationInDay's days,
// 0 when unset (the manager's default applies).
func (p *UpgradePlan) MinCertsExpirationInDay() (int, error) {
	v, ok := p.Annotations[AnnotationMinCertsExpirationInDay]
	if !ok {
		return 0, nil
	}
	days, err := ParseMinCertsExpirationInDay(v)
	if err != nil {
		return 0, &AnnotationError{Key: AnnotationMinCertsExpirationInDay, Value: v, Err: err}
	}
	return days, nil
}

// UpgradeToolkitImage returns AnnotationUpgradeToolkitImage's repository, ""
// when unset.
func (p *UpgradePlan) UpgradeToolkitImage() string {
	return p.Annotations[AnnotationUpgradeToolkitImage]
}

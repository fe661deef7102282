package release

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// ErrInvalidVersion is returned for a string that cannot be a Harvester
// version at all (empty, "v", or not a valid image tag).
var ErrInvalidVersion = errors.New("invalid Harvester version")

// ErrIncomparable is returned when a development build is compared with
// another version: dev builds carry no order.
var ErrIncomparable = errors.New("development builds cannot be ordered")

// imageTag is the grammar of a container image tag. Harvester versions are
// used as image tags (the toolkit image is tagged with the release) and as
// path segments in the repo, so a version must be one.
var imageTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Version is a Harvester version: a release ("v1.8.0"), a prerelease
// ("v1.8.0-rc1") or a development build ("v1.2-ab12cd34", "v1.2-head",
// "master-head", "f024f49a"). The leading "v" is optional.
//
// As in harvester/go-common's version package, anything that is not a strict
// SemVer 2.0 version once the leading "v" is removed is a development build.
type Version struct {
	raw    string
	semver *semver.Version // nil for a development build
}

// ParseVersion parses a Harvester version. It fails with ErrInvalidVersion
// only for strings that cannot be a version: empty, "v" alone, or not a valid
// image tag (for example with spaces, slashes or a "+").
func ParseVersion(s string) (Version, error) {
	if s == "" || s == "v" {
		return Version{}, fmt.Errorf("%w: %q is empty", ErrInvalidVersion, s)
	}
	if !imageTag.MatchString(s) {
		return Version{}, fmt.Errorf("%w: %q is not a valid image tag (letters, digits, '_', '.', '-'; at most 128 characters)", ErrInvalidVersion, s)
	}
	v := Version{raw: s}
	trimmed := strings.TrimPrefix(s, "v")
	// StrictNewVersion would also reject a second "v"; checking for a digit
	// keeps "vv1.2.3" a dev build, as in go-common.
	if trimmed[0] >= '0' && trimmed[0] <= '9' {
		if sv, err := semver.StrictNewVersion(trimmed); err == nil {
			v.semver = sv
		}
	}
	return v, nil
}

// String returns the version as it was parsed.
func (v Version) String() string { return v.raw }

// IsDev reports whether v is a development build.
func (v Version) IsDev() bool { return v.semver == nil }

// IsPrerelease reports whether v is a prerelease such as v1.8.0-rc1.
func (v Version) IsPrerelease() bool { return v.semver != nil && v.semver.Prerelease() != "" }

// Compare returns -1, 0 or +1 as v is older than, the same as or newer than
// o, by SemVer 2.0 precedence (v1.8.0-rc1 < v1.8.0 < v1.8.1). Two
// development builds are the same only when their strings are; any other
// comparison involving one fails with ErrIncomparable.
func (v Version) Compare(o Version) (int, error) {
	if v.IsDev() || o.IsDev() {
		if v.raw == o.raw {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: %s and %s", ErrIncomparable, v.raw, o.raw)
	}
	return v.semver.Compare(o.semver), nil
}

// stable returns major.minor.patch of a release or prerelease.
func (v Version) stable() string {
	return fmt.Sprintf("%d.%d.%d", v.semver.Major(), v.semver.Minor(), v.semver.Patch())
}

// Reasons an upgrade is not eligible. CheckEligibility returns an
// *EligibilityError that wraps one of them; test with errors.Is.
var (
	// ErrDowngrade: the target release is older than the running one.
	ErrDowngrade = errors.New("downgrade")
	// ErrBelowMinimum: the running release is older than the target's
	// minUpgradableVersion.
	ErrBelowMinimum = errors.New("below the minimum upgradable version")
	// ErrPrereleaseCrossVersion: the running release is a prerelease and the
	// target is not a build of the same version.
	ErrPrereleaseCrossVersion = errors.New("prerelease cross-version upgrade")
	// ErrDevToRelease: the running release is a development build and the
	// target is not (strict mode only).
	ErrDevToRelease = errors.New("development build to release")
)

// EligibilityError says why an upgrade from Current to Target is refused.
type EligibilityError struct {
	// Reason is one of ErrDowngrade, ErrBelowMinimum,
	// ErrPrereleaseCrossVersion and ErrDevToRelease.
	Reason  error
	Current string
	Target  string
	// Minimum is the target's minUpgradableVersion when it was applied.
	Minimum string
}

// Unwrap returns Reason, so errors.Is(err, ErrDowngrade) works.
func (e *EligibilityError) Unwrap() error { return e.Reason }

func (e *EligibilityError) Error() string {
	var msg string
	switch {
	case errors.Is(e.Reason, ErrDowngrade):
		msg = fmt.Sprintf("upgrading from %s to %s is a downgrade, which is not supported: use the ISO of %s or of a newer release",
			e.Current, e.Target, e.Current)
	case errors.Is(e.Reason, ErrBelowMinimum):
		msg = fmt.Sprintf("the cluster runs %s, but %s can only be installed on %s or newer (minUpgradableVersion): upgrade to %s or newer first",
			e.Current, e.Target, e.Minimum, e.Minimum)
	case errors.Is(e.Reason, ErrPrereleaseCrossVersion):
		msg = fmt.Sprintf("the cluster runs the prerelease %s, which can only be upgraded to a later build of the same version (a later prerelease or the release of v%s), not to %s",
			e.Current, stableOf(e.Current), e.Target)
	case errors.Is(e.Reason, ErrDevToRelease):
		msg = fmt.Sprintf("the cluster runs the development build %s, which can only be upgraded to another development build, not to %s",
			e.Current, e.Target)
	default:
		msg = fmt.Sprintf("upgrading from %s to %s is not allowed: %v", e.Current, e.Target, e.Reason)
	}
	return msg + "; set spec.force: true on the UpgradePlan to skip the version check at your own risk"
}

// stableOf returns major.minor.patch of a version string known to be a
// release or prerelease.
func stableOf(s string) string {
	v, err := ParseVersion(s)
	if err != nil || v.IsDev() {
		return s
	}
	return v.stable()
}

// CheckEligibility decides whether a cluster running current may be upgraded
// to target, given the target's minUpgradableVersion (minimum). The rules,
// in order, are those of harvester/go-common's CheckUpgradeEligibility:
//
//  1. current and target must be valid versions (ErrInvalidVersion);
//  2. upgrading to a development build is always allowed;
//  3. upgrading from a development build is refused in strict mode
//     (ErrDevToRelease) and allowed otherwise;
//  4. the same version is allowed (re-running an upgrade);
//  5. a downgrade is refused (ErrDowngrade);
//  6. current older than minimum is refused (ErrBelowMinimum); an empty,
//     invalid or development minimum means there is no minimum;
//  7. a prerelease may only move to a build of the same major.minor.patch
//     (ErrPrereleaseCrossVersion).
//
// Refusals are *EligibilityError values whose message names both versions
// and what to do.
func CheckEligibility(current, target, minimum string, strict bool) error {
	tv, err := ParseVersion(target)
	if err != nil {
		return fmt.Errorf("target version: %w", err)
	}
	cv, err := ParseVersion(current)
	if err != nil {
		return fmt.Errorf("current version: %w", err)
	}
	refuse := func(reason error) error {
		return &EligibilityError{Reason: reason, Current: current, Target: target}
	}
	if tv.IsDev() {
		return nil
	}
	if cv.IsDev() {
		if strict {
			return refuse(ErrDevToRelease)
		}
		return nil
	}
	// Neither is a dev build from here on, so Compare cannot fail.
	order, _ := cv.Compare(tv)
	switch {
	case order == 0:
		return nil
	case order > 0:
		return refuse(ErrDowngrade)
	}
	if mv, err := ParseVersion(minimum); err == nil && !mv.IsDev() {
		if below, _ := cv.Compare(mv); below < 0 {
			return &EligibilityError{Reason: ErrBelowMinimum, Current: current, Target: target, Minimum: minimum}
		}
	}
	if cv.IsPrerelease() && cv.stable() != tv.stable() {
		return refuse(ErrPrereleaseCrossVersion)
	}
	return nil
}

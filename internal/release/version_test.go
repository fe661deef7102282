package release

import (
	"errors"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in              string
		dev, prerelease bool
		invalid         bool
	}{
		// The go-common matrix.
		{in: "v1.2.2"},
		{in: "v1.2.2-rc1", prerelease: true},
		{in: "f024f49a", dev: true},
		{in: "", invalid: true},
		{in: "1.2.1"},
		{in: "1.2.2-rc1", prerelease: true},
		{in: "aabbccdd-dirty", dev: true},
		{in: "v1.2-11223344", dev: true},
		// Harvester's own dev build names.
		{in: "v1.2-ab12cd34", dev: true},
		{in: "v1.2-head", dev: true},
		{in: "master-head", dev: true},
		{in: "v1.8", dev: true},
		// Not strict SemVer once "v" is removed: dev builds.
		{in: "vv1.2.3", dev: true},
		{in: "V1.2.3", dev: true},
		{in: "v01.2.3", dev: true},
		{in: "v1.2.3-rc.01", dev: true},
		{in: "v1.2.3.4", dev: true},
		{in: "v1.10.0-rc.1", prerelease: true},
		// Cannot be versions at all.
		{in: "v", invalid: true},
		{in: " v1.2.3", invalid: true},
		{in: "v1.2.3 ", invalid: true},
		{in: "v1.2.3+build", invalid: true},
		{in: "v1.2/3", invalid: true},
		{in: "-v1.2.3", invalid: true},
		{in: ".hidden", invalid: true},
		{in: "v1.2.3\n", invalid: true},
		{in: strings.Repeat("a", 129), invalid: true},
	} {
		v, err := ParseVersion(tc.in)
		if tc.invalid {
			if !errors.Is(err, ErrInvalidVersion) {
				t.Errorf("ParseVersion(%q) = %v, %v; want ErrInvalidVersion", tc.in, v, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseVersion(%q): %v", tc.in, err)
			continue
		}
		if v.IsDev() != tc.dev || v.IsPrerelease() != tc.prerelease || v.String() != tc.in {
			t.Errorf("ParseVersion(%q) = dev %v, prerelease %v, %q; want dev %v, prerelease %v",
				tc.in, v.IsDev(), v.IsPrerelease(), v.String(), tc.dev, tc.prerelease)
		}
	}
}

// TestCompare is go-common's IsNewer/IsEqual/IsOlder matrix: want is the
// sign of Compare(a, b), incomparable an ErrIncomparable.
func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b         string
		want         int
		incomparable bool
	}{
		{a: "v1.2.1", b: "v1.2.1", want: 0},
		{a: "v1.2.2-rc1", b: "v1.2.2-rc1", want: 0},
		{a: "aabbccdd", b: "aabbccdd", want: 0},
		{a: "aabbccdd-dirty", b: "aabbccdd-dirty", want: 0},
		{a: "v1.2.2", b: "v1.2.1", want: 1},
		{a: "v1.2.1", b: "v1.2.2", want: -1},
		{a: "v1.2.2-rc1", b: "v1.2.1-rc1", want: 1},
		{a: "v1.2.1-rc1", b: "v1.2.2-rc1", want: -1},
		{a: "v1.2.2-rc1", b: "v1.2.1-rc2", want: 1},
		{a: "v1.2.1-rc2", b: "v1.2.2-rc1", want: -1},
		{a: "v1.2.1-rc3", b: "v1.2.1-rc2", want: 1},
		{a: "v1.2.1-rc2", b: "v1.2.1-rc3", want: -1},
		{a: "aabbccdd", b: "11223344", incomparable: true},
		{a: "aabbccdd-dirty", b: "11223344-dirty", incomparable: true},
		{a: "v1.2.2-rc1", b: "v1.2.1", want: 1},
		{a: "v1.2.1", b: "v1.2.2-rc1", want: -1},
		{a: "v1.2.2", b: "v1.2.2-rc1", want: 1},
		{a: "v1.2.2-rc1", b: "v1.2.2", want: -1},
		{a: "v1.2.2-rc1", b: "v1.3.0", want: -1},
		{a: "v1.10.0", b: "v1.2.0-rc10", want: 1},
		{a: "v1.10.0-rc1", b: "v1.2.0", want: 1},
		{a: "v1.2.1", b: "11223344", incomparable: true},
		{a: "11223344", b: "v1.2.1", incomparable: true},
		{a: "v1.2.1-rc1", b: "11223344", incomparable: true},
		{a: "11223344", b: "v1.2.1-rc1", incomparable: true},
		// The "v" does not matter.
		{a: "1.2.1", b: "v1.2.1", want: 0},
	} {
		a, errA := ParseVersion(tc.a)
		b, errB := ParseVersion(tc.b)
		if errA != nil || errB != nil {
			t.Fatalf("parse %q, %q: %v, %v", tc.a, tc.b, errA, errB)
		}
		got, err := a.Compare(b)
		if tc.incomparable {
			if !errors.Is(err, ErrIncomparable) {
				t.Errorf("Compare(%s, %s) = %d, %v; want ErrIncomparable", tc.a, tc.b, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Compare(%s, %s) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
		}
	}
}

// TestCheckEligibility holds go-common's CheckUpgradeEligibility matrix, the
// upstream toolkit's versionguard cases, and our own additions.
func TestCheckEligibility(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		current, target, minimum string
		loose                    bool
		want                     error
	}{
		// go-common: releases.
		{name: "same release", current: "v1.2.1", target: "v1.2.1", minimum: "v1.1.2"},
		{name: "from exactly the minimum", current: "v1.1.2", target: "v1.2.1", minimum: "v1.1.2"},
		{name: "from above the minimum", current: "v1.2.0", target: "v1.2.1", minimum: "v1.1.2"},
		{name: "from below the minimum", current: "v1.1.1", target: "v1.2.1", minimum: "v1.1.2", want: ErrBelowMinimum},
		{name: "to an older release", current: "v1.2.1", target: "v1.2.0", minimum: "v1.1.2", want: ErrDowngrade},
		{name: "from the minimum to a prerelease", current: "v1.1.2", target: "v1.2.1-rc1", minimum: "v1.1.2"},
		{name: "from above the minimum to a prerelease", current: "v1.2.0", target: "v1.2.1-rc1", minimum: "v1.1.2"},
		{name: "from below the minimum to a prerelease", current: "v1.1.1", target: "v1.2.1-rc1", minimum: "v1.1.2", want: ErrBelowMinimum},
		{name: "release to its own prerelease", current: "v1.2.1", target: "v1.2.1-rc1", minimum: "v1.1.2", want: ErrDowngrade},
		{name: "release to a dev build", current: "v1.2.1", target: "v1.2-ab12cd34"},
		// go-common: prereleases.
		{name: "same prerelease", current: "v1.2.2-rc1", target: "v1.2.2-rc1", minimum: "v1.2.1"},
		{name: "prerelease below the minimum to a release", current: "v1.1.2-rc1", target: "v1.2.1", minimum: "v1.1.2", want: ErrBelowMinimum},
		{name: "prerelease to another version", current: "v1.2.0-rc1", target: "v1.2.1", minimum: "v1.1.2", want: ErrPrereleaseCrossVersion},
		{name: "prerelease far below the minimum", current: "v1.1.1-rc1", target: "v1.2.1", minimum: "v1.1.2", want: ErrBelowMinimum},
		{name: "prerelease to a later prerelease", current: "v1.2.2-rc1", target: "v1.2.2-rc2", minimum: "v1.2.1"},
		{name: "prerelease below the minimum to a prerelease", current: "v1.2.1-rc1", target: "v1.2.2-rc2", minimum: "v1.2.1", want: ErrBelowMinimum},
		{name: "prerelease to a prerelease of another version", current: "v1.2.0-rc1", target: "v1.2.1-rc2", minimum: "v1.1.2", want: ErrPrereleaseCrossVersion},
		{name: "prerelease to a dev build", current: "v1.2.2-rc1", target: "v1.2-ab12cd34"},
		// go-common: dev builds.
		{name: "same dev build", current: "v1.2-ab12cd34", target: "v1.2-ab12cd34"},
		{name: "dev build to another", current: "v1.2-ab12cd34", target: "v1.2-1234567"},
		{name: "dev build to a release, strict", current: "v1.2-ab12cd34", target: "v1.2.1", minimum: "v1.1.2", want: ErrDevToRelease},
		{name: "dev build to a release, loose", current: "v1.2-ab12cd34", target: "v1.2.1", minimum: "v1.1.2", loose: true},
		{name: "dev build to a prerelease, strict", current: "v1.2-ab12cd34", target: "v1.2.2-rc1", minimum: "v1.2.1", want: ErrDevToRelease},
		{name: "dev build to a prerelease, loose", current: "v1.2-ab12cd34", target: "v1.2.2-rc1", minimum: "v1.2.1", loose: true},
		{name: "no minimum", current: "v1.2.1", target: "v1.3.0"},
		// upstream versionguard.
		{name: "from exactly the minimum, patch", current: "v1.2.1", target: "v1.2.2", minimum: "v1.2.1"},
		{name: "below the minimum, patch", current: "v1.2.0", target: "v1.2.2", minimum: "v1.2.1", want: ErrBelowMinimum},
		{name: "release to a prerelease", current: "v1.2.1", target: "v1.2.2-rc1", minimum: "v1.2.1"},
		{name: "later to earlier prerelease", current: "v1.2.2-rc2", target: "v1.2.2-rc1", minimum: "v1.2.1", want: ErrDowngrade},
		{name: "release to head", current: "v1.2.1", target: "v1.2-head"},
		{name: "head to head", current: "v1.2-head", target: "v1.3-head"},
		{name: "head to a release, strict", current: "v1.2-head", target: "v1.3.1", minimum: "v1.2.2", want: ErrDevToRelease},
		{name: "head to a release, loose", current: "v1.2-head", target: "v1.3.1", minimum: "v1.2.2", loose: true},
		{name: "prerelease to its release", current: "v1.2.2-rc1", target: "v1.2.2", minimum: "v1.2.1"},
		// The seed's example and our rules on the minimum.
		{name: "seed example", current: "v1.7.1", target: "v1.8.0-rc1", minimum: "v1.7.0"},
		{name: "one minor step too far", current: "v1.6.1", target: "v1.8.0", minimum: "v1.7.0", want: ErrBelowMinimum},
		{name: "rc below the GA minimum", current: "v1.7.0-rc3", target: "v1.8.0", minimum: "v1.7.0", want: ErrBelowMinimum},
		{name: "invalid minimum is no minimum", current: "v1.1.0", target: "v1.8.0", minimum: "not a version"},
		{name: "dev minimum is no minimum", current: "v1.1.0", target: "v1.8.0", minimum: "v1.7-head"},
		{name: "downgrade wins over the minimum", current: "v1.8.0", target: "v1.7.1", minimum: "v1.9.0", want: ErrDowngrade},
		{name: "the v does not matter", current: "1.7.1", target: "v1.7.1"},
		{name: "invalid current", current: "", target: "v1.8.0", want: ErrInvalidVersion},
		{name: "invalid target", current: "v1.7.1", target: "v1.8.0 rc1", want: ErrInvalidVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckEligibility(tc.current, tc.target, tc.minimum, !tc.loose)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckEligibility(%q, %q, %q) = %v, want nil", tc.current, tc.target, tc.minimum, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("CheckEligibility(%q, %q, %q) = %v, want %v", tc.current, tc.target, tc.minimum, err, tc.want)
			}
			var ee *EligibilityError
			if errors.As(err, &ee) {
				// The operator sees both versions and the way out.
				for _, s := range []string{tc.current, tc.target, "spec.force"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("message %q does not mention %q", err, s)
					}
				}
			} else if !errors.Is(tc.want, ErrInvalidVersion) {
				t.Errorf("%v is not an *EligibilityError", err)
			}
		})
	}
}

func TestEligibilityMessages(t *testing.T) {
	for _, tc := range []struct {
		current, target, minimum string
		want                     []string
	}{
		{current: "v1.8.0", target: "v1.7.1", want: []string{"downgrade", "ISO of v1.8.0 or of a newer release"}},
		{current: "v1.6.1", target: "v1.8.0", minimum: "v1.7.0", want: []string{"v1.7.0 or newer", "upgrade to v1.7.0 or newer first"}},
		{current: "v1.8.0-rc1", target: "v1.9.0", want: []string{"prerelease v1.8.0-rc1", "release of v1.8.0"}},
		{current: "v1.8-head", target: "v1.8.0", want: []string{"development build v1.8-head", "another development build"}},
	} {
		err := CheckEligibility(tc.current, tc.target, tc.minimum, true)
		if err == nil {
			t.Fatalf("CheckEligibility(%q, %q, %q) = nil", tc.current, tc.target, tc.minimum)
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("message %q does not say %q", err, s)
			}
		}
	}
}

package release

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// OldestUpgradableVersion is the oldest release the toolkit upgrades from.
// The steps of Harvester's own upgrade that only older paths need
// (OlderPathSteps) are not part of the toolkit, so CheckSupportedPath
// refuses a cluster that runs an older release.
const OldestUpgradableVersion = "v1.7.0"

// OlderPathStep is a step of Harvester's own upgrade (its
// package/upgrade scripts) that upgrades from releases older than Before
// need and the toolkit does not do.
type OlderPathStep struct {
	// Before: the step applies to upgrades from releases older than this.
	Before string
	// What the step does.
	What string
}

// OlderPathSteps lists them, newest path first (docs/cluster-upgrade.md
// has where each comes from).
var OlderPathSteps = []OlderPathStep{
	{"v1.7.0", "migrates Longhorn's v1beta1 custom resources to v1beta2 (migrate_longhorn_v1beta1_crds)"},
	{"v1.7.0", "generates NetworkManager's configuration and keeps the node's hostname (generate_networkmanager_config and its hostname override)"},
	{"v1.4.3", "fixes the units of Grafana's VM dashboards (migrations v1.4.0 and v1.4.2)"},
	{"v1.4.0", "updates the ClusterRole harvesterhci.io:csi-driver (upgrade_harvester_csi_rbac)"},
	{"v1.3.1", "adds Fleet comparePatches and values to the harvester, monitoring and logging charts (migrations/managed_charts v1.0.0 to v1.3.0)"},
	{"v1.2.0", "converts the local-rke-state Secret to the type Rancher v2.7 needs (update_local_rke_state_secret)"},
	{"v1.1.2", "applies the manifests of extra_manifests/untilv1.1.1 (Longhorn's default data path, whereabouts' CRDs)"},
	{"v1.0.4", "reuses the VLAN cluster network and removes the init-node label (reuse_vlan_cn, pre-hook v1.0.3)"},
	{"v1.0.1", "preloads the images a second time (pre-hook v1.0.0)"},
}

// ErrUnsupportedPath is matched by the error of CheckSupportedPath.
var ErrUnsupportedPath = errors.New("older than the toolkit upgrades from")

// UnsupportedPathError says why the toolkit cannot upgrade a cluster that
// runs Current.
type UnsupportedPathError struct {
	Current string
	// Missing are the steps Harvester's own upgrade would do from Current.
	Missing []string
}

func (e *UnsupportedPathError) Error() string {
	return fmt.Sprintf("the cluster runs %s, but this toolkit upgrades from %s or newer: from %s, Harvester's own upgrade also %s, which this toolkit does not do; "+
		"upgrade to %s or newer with Harvester's own upgrade first (spec.force does not skip this check)",
		e.Current, OldestUpgradableVersion, e.Current, strings.Join(e.Missing, "; "), OldestUpgradableVersion)
}

// Is makes errors.Is(err, ErrUnsupportedPath) true.
func (e *UnsupportedPathError) Is(target error) bool { return target == ErrUnsupportedPath }

// CheckSupportedPath refuses a running release older than
// OldestUpgradableVersion, naming what its upgrade would need. Development
// builds have no order and pass; an invalid version is an error.
func CheckSupportedPath(current string) error {
	cv, err := ParseVersion(current)
	if err != nil {
		return fmt.Errorf("current version: %w", err)
	}
	if cv.IsDev() {
		return nil
	}
	oldest, _ := ParseVersion(OldestUpgradableVersion)
	if order, _ := cv.Compare(oldest); order >= 0 {
		return nil
	}
	e := &UnsupportedPathError{Current: current}
	for _, s := range OlderPathSteps {
		before, _ := ParseVersion(s.Before)
		if order, _ := cv.Compare(before); order < 0 {
			e.Missing = append(e.Missing, s.What)
		}
	}
	return e
}

// Series is a release line, e.g. v1.7 for v1.7.0, v1.7.1-rc2 and the
// development builds v1.7-head and v1.7-ab12cd34.
type Series struct{ Major, Minor uint64 }

func (s Series) String() string { return fmt.Sprintf("v%d.%d", s.Major, s.Minor) }

// seriesPrefix reads the release line of a development build named after
// it (v1.7-head).
var seriesPrefix = regexp.MustCompile(`^v?(\d+)\.(\d+)(?:[.-]|$)`)

// ParseSeries reads "v1.7" (or a whole version); ok is false for strings
// that name no release line, such as "master-head".
func ParseSeries(s string) (Series, bool) {
	if v, err := ParseVersion(s); err == nil && !v.IsDev() {
		return Series{v.semver.Major(), v.semver.Minor()}, true
	}
	m := seriesPrefix.FindStringSubmatch(s)
	if m == nil {
		return Series{}, false
	}
	major, err1 := strconv.ParseUint(m[1], 10, 64)
	minor, err2 := strconv.ParseUint(m[2], 10, 64)
	return Series{major, minor}, err1 == nil && err2 == nil
}

// Compare orders two release lines.
func (s Series) Compare(o Series) int {
	switch {
	case s.Major != o.Major:
		return cmpUint(s.Major, o.Major)
	default:
		return cmpUint(s.Minor, o.Minor)
	}
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// VersionStep says for which upgrades a step of the cluster upgrade or a
// node job is needed: Harvester's upgrade scripts run some steps only from
// some releases, or only to some.
type VersionStep struct {
	// Step is the step's id (or an action's, within a step).
	Step string
	// From is the release line the cluster must run (v1.7: v1.7.0,
	// v1.7.1-rc1, v1.7-head); empty means any.
	From string
	// To is the oldest release line the upgrade may go to; a target that
	// names no line (master-head) counts as newer. Empty means any.
	To string
	// Why the step is needed on that path.
	Why string
}

// VersionSteps are a job's per-version steps, as data.
type VersionSteps []VersionStep

// AppliesTo says whether a step runs on the upgrade from previous to
// target, and when not, why. A step not listed runs on every path.
func (steps VersionSteps) AppliesTo(id, previous, target string) (bool, string) {
	for _, vs := range steps {
		if vs.Step != id {
			continue
		}
		if vs.From != "" && !inSeries(previous, vs.From) {
			return false, fmt.Sprintf("only upgrades from %s need it (%s); this one is from %s", vs.From, vs.Why, orUnknown(previous))
		}
		if vs.To != "" && !AtLeast(target, vs.To) {
			return false, fmt.Sprintf("only upgrades to %s or newer need it (%s); this one is to %s", vs.To, vs.Why, orUnknown(target))
		}
	}
	return true, ""
}

// inSeries reports whether version belongs to the release line series.
func inSeries(version, series string) bool {
	v, ok := ParseSeries(version)
	want, _ := ParseSeries(series)
	return ok && v == want
}

// AtLeast reports whether version is of the release line series or a newer
// one; a version that names no line (master-head) counts as newer.
func AtLeast(version, series string) bool {
	v, ok := ParseSeries(version)
	want, _ := ParseSeries(series)
	return !ok || v.Compare(want) >= 0
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown release"
	}
	return s
}

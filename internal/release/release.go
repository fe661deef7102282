package release

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/Masterminds/semver/v3"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// Release is the content of harvester-release.yaml at the root of the
// release ISO: the versions of everything the release installs.
//
// Every key is required except minUpgradableVersion. The manager only
// records the first seven in the plan's status, but it parses the whole
// file in MetadataPopulate so that an ISO the jobs could not use fails
// before any node or component has been touched. Who reads which key:
//
//	key                               read by
//	harvester                         status; eligibility check; toolkit image tag
//	harvesterChart                    status; cluster-upgrade (harvester, harvester-crd ManagedCharts)
//	os                                status; post-drain / single-node (skip the OS upgrade when equal); node reboot check
//	kubernetes                        status; NodeUpgrade (provisioning Cluster); post-drain (wait for the kubelet)
//	rancher                           status; cluster-upgrade (Rancher)
//	monitoringChart                   status; cluster-upgrade (rancher-monitoring addon and CRD chart)
//	minUpgradableVersion (optional)   status; eligibility check
//	kubevirt                          cluster-upgrade (wait for KubeVirt to report this version)
//	loggingChart                      cluster-upgrade (rancher-logging addon)
//	loggingChartHarvesterEventRouter  cluster-upgrade (eventrouter image tag in the logging addon)
//	rancherDependencies.*.{chart,app} cluster-upgrade (fleet, fleet-crd, rancher-webhook)
type Release struct {
	Harvester            string `yaml:"harvester"`
	HarvesterChart       string `yaml:"harvesterChart"`
	OS                   string `yaml:"os"`
	Kubernetes           string `yaml:"kubernetes"`
	Rancher              string `yaml:"rancher"`
	MonitoringChart      string `yaml:"monitoringChart"`
	MinUpgradableVersion string `yaml:"minUpgradableVersion,omitempty"`

	KubeVirt                         string              `yaml:"kubevirt"`
	LoggingChart                     string              `yaml:"loggingChart"`
	LoggingChartHarvesterEventRouter string              `yaml:"loggingChartHarvesterEventRouter"`
	RancherDependencies              RancherDependencies `yaml:"rancherDependencies"`
}

// RancherDependencies are the charts that come with the embedded Rancher.
type RancherDependencies struct {
	Fleet          ChartVersion `yaml:"fleet"`
	FleetCRD       ChartVersion `yaml:"fleet-crd"`
	RancherWebhook ChartVersion `yaml:"rancher-webhook"`
}

// ChartVersion is a Helm chart's version and the version of the application
// it installs.
type ChartVersion struct {
	Chart string `yaml:"chart"`
	App   string `yaml:"app"`
}

// ReleaseFile is the path of harvester-release.yaml in the repo.
const ReleaseFile = "harvester-release.yaml"

// RootfsFile is the path of the new OS image (a squashfs) in the repo.
const RootfsFile = "rootfs.squashfs"

// OSPrefix starts every Harvester OS name (/etc/os-release PRETTY_NAME and
// the node's status.nodeInfo.osImage), e.g. "Harvester v1.8.0".
const OSPrefix = "Harvester "

// ParseRelease parses and validates harvester-release.yaml. The error, a
// *ContentError matching ErrMalformed, lists every missing or malformed key.
func ParseRelease(data []byte) (*Release, error) {
	r := &Release{}
	if p := decodeYAML(data, r); len(p) > 0 {
		return nil, p.err(ReleaseFile)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// Validate checks every key; see ParseRelease.
func (r *Release) Validate() error {
	var p problems
	for _, f := range r.fields() {
		switch {
		case f.value == "" && f.optional:
		case f.value == "":
			p.addf("%s: missing, expected %s", f.key, f.expect)
		case !f.valid(f.value):
			p.addf("%s: got %q, expected %s", f.key, f.value, f.expect)
		}
	}
	return p.err(ReleaseFile)
}

type field struct {
	key      string
	value    string
	optional bool
	valid    func(string) bool
	expect   string
}

func (r *Release) fields() []field {
	chart := func(key, value, example string) field {
		return field{key: key, value: value, valid: isChartVersion,
			expect: "a Helm chart version (SemVer 2.0 without \"v\") such as " + example}
	}
	app := func(key, value, example string) field {
		return field{key: key, value: value, valid: isAppVersion,
			expect: "an application version (SemVer 2.0) such as " + example}
	}
	deps := r.RancherDependencies
	return []field{
		{key: "harvester", value: r.Harvester, valid: isHarvesterVersion,
			expect: "a Harvester version such as v1.8.0, v1.8.0-rc1 or a development build such as v1.8-head"},
		chart("harvesterChart", r.HarvesterChart, "1.8.0"),
		{key: "os", value: r.OS, valid: isOSName,
			expect: fmt.Sprintf("the OS name starting with %q, such as \"Harvester v1.8.0\"", OSPrefix)},
		{key: "kubernetes", value: r.Kubernetes, valid: isRKE2Version,
			expect: "an RKE2 version v<major>.<minor>.<patch>[-rc<n>]+rke2r<n> such as v1.35.2+rke2r1"},
		{key: "rancher", value: r.Rancher, valid: isRancherVersion,
			expect: "a Rancher version (\"v\" and SemVer 2.0) such as v2.14.0"},
		chart("monitoringChart", r.MonitoringChart, "108.0.2+up77.9.1-rancher.11"),
		{key: "minUpgradableVersion", value: r.MinUpgradableVersion, optional: true, valid: isReleaseVersion,
			expect: "nothing or a Harvester release such as v1.7.0 (not a development build)"},
		{key: "kubevirt", value: r.KubeVirt, valid: imageTag.MatchString,
			expect: "the KubeVirt version as an image tag such as 1.7.4-150700.3.24.2"},
		chart("loggingChart", r.LoggingChart, "108.0.1+up4.10.0"),
		{key: "loggingChartHarvesterEventRouter", value: r.LoggingChartHarvesterEventRouter, valid: imageTag.MatchString,
			expect: "the eventrouter image tag such as v1.8.0"},
		chart("rancherDependencies.fleet.chart", deps.Fleet.Chart, "108.0.0+up0.14.0"),
		app("rancherDependencies.fleet.app", deps.Fleet.App, "0.14.0"),
		chart("rancherDependencies.fleet-crd.chart", deps.FleetCRD.Chart, "108.0.0+up0.14.0"),
		app("rancherDependencies.fleet-crd.app", deps.FleetCRD.App, "0.14.0"),
		chart("rancherDependencies.rancher-webhook.chart", deps.RancherWebhook.Chart, "108.0.0+up0.9.0"),
		app("rancherDependencies.rancher-webhook.app", deps.RancherWebhook.App, "0.9.0"),
	}
}

// rke2Version is an RKE2 release: RKE2 tags its builds rke2r<n> and its
// release candidates -rc<n>.
var rke2Version = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-rc[1-9][0-9]*)?\+rke2r[1-9][0-9]*$`)

func isRKE2Version(s string) bool { return len(s) <= 128 && rke2Version.MatchString(s) }

func isHarvesterVersion(s string) bool {
	_, err := ParseVersion(s)
	return err == nil
}

func isReleaseVersion(s string) bool {
	v, err := ParseVersion(s)
	return err == nil && !v.IsDev()
}

func isChartVersion(s string) bool {
	_, err := semver.StrictNewVersion(s)
	return err == nil
}

func isAppVersion(s string) bool { return isChartVersion(strings.TrimPrefix(s, "v")) }

func isRancherVersion(s string) bool {
	return strings.HasPrefix(s, "v") && isChartVersion(s[1:])
}

func isOSName(s string) bool {
	return strings.HasPrefix(s, OSPrefix) && len(s) > len(OSPrefix) && len(s) <= 256 && printable(s)
}

// Metadata is the part of the release the plan records in
// status.releaseMetadata.
func (r *Release) Metadata() *v1beta1.ReleaseMetadata {
	return &v1beta1.ReleaseMetadata{
		Harvester:            r.Harvester,
		HarvesterChart:       r.HarvesterChart,
		OS:                   r.OS,
		Kubernetes:           r.Kubernetes,
		Rancher:              r.Rancher,
		MonitoringChart:      r.MonitoringChart,
		MinUpgradableVersion: r.MinUpgradableVersion,
	}
}

// OSVersion is the OS name without "Harvester ", e.g. "v1.8.0".
func (r *Release) OSVersion() string { return strings.TrimPrefix(r.OS, OSPrefix) }

// KubeletVersion is the version a node's kubelet reports
// (status.nodeInfo.kubeletVersion) once RKE2 is upgraded: RKE2 drops the
// release candidate suffix there, so v1.35.2-rc1+rke2r1 reports
// v1.35.2+rke2r1.
func (r *Release) KubeletVersion() string { return KubeletVersionOf(r.Kubernetes) }

// KubeletVersionOf is the kubelet version of an RKE2 version (see
// Release.KubeletVersion).
func KubeletVersionOf(kubernetes string) string {
	// Rancher also spells the build suffix with '-' (v1.35.2-rke2r1).
	kubernetes = strings.Replace(kubernetes, "-rke2", "+rke2", 1)
	m := rke2Version.FindStringSubmatch(kubernetes)
	if m == nil || m[4] == "" {
		return kubernetes
	}
	return strings.Replace(kubernetes, m[4], "", 1)
}

package release

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// validRelease is a harvester-release.yaml as the v1.8.0-rc1 ISO of the
// seed has it.
const validRelease = `harvester: v1.8.0-rc1
harvesterChart: 1.8.0-rc1
os: Harvester v1.8.0-rc1
kubernetes: v1.35.2+rke2r1
rancher: v2.14.0-alpha9
monitoringChart: 108.0.2+up77.9.1-rancher.11
kubevirt: 1.7.4-150700.3.24.2
minUpgradableVersion: 'v1.7.0'
loggingChart: 108.0.1+up4.10.0
loggingChartHarvesterEventRouter: v1.8.0-rc1
rancherDependencies:
  fleet:
    chart: 108.0.0+up0.14.0-rc.2
    app: 0.14.0-rc.2
  fleet-crd:
    chart: 108.0.0+up0.14.0-rc.2
    app: 0.14.0-rc.2
  rancher-webhook:
    chart: 108.0.0+up0.9.0-rc.3
    app: 0.9.0-rc.3
`

func TestParseRelease(t *testing.T) {
	r, err := ParseRelease([]byte(validRelease))
	if err != nil {
		t.Fatal(err)
	}
	want := &Release{
		Harvester: "v1.8.0-rc1", HarvesterChart: "1.8.0-rc1", OS: "Harvester v1.8.0-rc1",
		Kubernetes: "v1.35.2+rke2r1", Rancher: "v2.14.0-alpha9", MonitoringChart: "108.0.2+up77.9.1-rancher.11",
		MinUpgradableVersion: "v1.7.0", KubeVirt: "1.7.4-150700.3.24.2", LoggingChart: "108.0.1+up4.10.0",
		LoggingChartHarvesterEventRouter: "v1.8.0-rc1",
		RancherDependencies: RancherDependencies{
			Fleet:          ChartVersion{Chart: "108.0.0+up0.14.0-rc.2", App: "0.14.0-rc.2"},
			FleetCRD:       ChartVersion{Chart: "108.0.0+up0.14.0-rc.2", App: "0.14.0-rc.2"},
			RancherWebhook: ChartVersion{Chart: "108.0.0+up0.9.0-rc.3", App: "0.9.0-rc.3"},
		},
	}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("ParseRelease (-want +got):\n%s", diff)
	}
	// The status gets the seed's releaseMetadata.
	wantMeta := &v1beta1.ReleaseMetadata{
		Harvester: "v1.8.0-rc1", HarvesterChart: "1.8.0-rc1", OS: "Harvester v1.8.0-rc1",
		Kubernetes: "v1.35.2+rke2r1", Rancher: "v2.14.0-alpha9",
		MonitoringChart: "108.0.2+up77.9.1-rancher.11", MinUpgradableVersion: "v1.7.0",
	}
	if diff := cmp.Diff(wantMeta, r.Metadata()); diff != "" {
		t.Errorf("Metadata (-want +got):\n%s", diff)
	}
	if got := r.OSVersion(); got != "v1.8.0-rc1" {
		t.Errorf("OSVersion = %q", got)
	}
}

func TestParseReleaseOptionalMinimum(t *testing.T) {
	for _, line := range []string{"", "minUpgradableVersion:", "minUpgradableVersion: ''", "minUpgradableVersion: null"} {
		data := strings.Replace(validRelease, "minUpgradableVersion: 'v1.7.0'", line, 1)
		r, err := ParseRelease([]byte(data))
		if err != nil {
			t.Errorf("with %q: %v", line, err)
			continue
		}
		if r.MinUpgradableVersion != "" {
			t.Errorf("with %q: minUpgradableVersion = %q", line, r.MinUpgradableVersion)
		}
	}
}

func TestParseReleaseIgnoresUnknownKeys(t *testing.T) {
	if _, err := ParseRelease([]byte(validRelease + "longhorn: v1.10.1\nextra:\n  nested: [1, 2]\n")); err != nil {
		t.Fatal(err)
	}
}

// TestParseReleaseMissing removes each required key in turn: the error names
// the file and the key and says what was expected.
func TestParseReleaseMissing(t *testing.T) {
	required := []string{
		"harvester", "harvesterChart", "os", "kubernetes", "rancher", "monitoringChart", "kubevirt",
		"loggingChart", "loggingChartHarvesterEventRouter",
		"rancherDependencies.fleet.chart", "rancherDependencies.fleet.app",
		"rancherDependencies.fleet-crd.chart", "rancherDependencies.fleet-crd.app",
		"rancherDependencies.rancher-webhook.chart", "rancherDependencies.rancher-webhook.app",
	}
	for _, key := range required {
		for _, how := range []string{"absent", "empty", "null"} {
			data := withKey(t, validRelease, key, how)
			_, err := ParseRelease([]byte(data))
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s %s: err = %v, want ErrMalformed", key, how, err)
				continue
			}
			want := "harvester-release.yaml: " + key + ": missing, expected "
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("%s %s: %q does not start with %q", key, how, err, want)
			}
		}
	}
	// A whole group missing reports each of its keys.
	data := regexp.MustCompile(`(?s)rancherDependencies:.*`).ReplaceAllString(validRelease, "")
	_, err := ParseRelease([]byte(data))
	var ce *ContentError
	if !errors.As(err, &ce) || len(ce.Problems) != 6 {
		t.Errorf("without rancherDependencies: %v, want 6 problems", err)
	}
}

// withKey rewrites the line of key (a dotted path whose last element is
// unique in the file) to be absent, empty (”) or null.
func withKey(t *testing.T, doc, key, how string) string {
	t.Helper()
	last := key[strings.LastIndexByte(key, '.')+1:]
	re := regexp.MustCompile(`(?m)^(\s*)` + regexp.QuoteMeta(last) + `:.*$`)
	if strings.Contains(key, ".") {
		// chart/app appear three times: pick the group's.
		group := strings.Split(key, ".")[1]
		i := strings.Index(doc, "  "+group+":\n")
		loc := re.FindStringIndex(doc[i:])
		line := doc[i+loc[0] : i+loc[1]]
		return doc[:i+loc[0]] + rewrite(line, last, how) + doc[i+loc[1]:]
	}
	loc := re.FindStringIndex(doc)
	if loc == nil {
		t.Fatalf("no %s in the document", key)
	}
	return doc[:loc[0]] + rewrite(doc[loc[0]:loc[1]], last, how) + doc[loc[1]:]
}

func rewrite(line, key, how string) string {
	indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
	switch how {
	case "empty":
		return indent + key + ": ''"
	case "null":
		return indent + key + ": ~"
	default:
		return indent + "# " + key + " removed"
	}
}

func TestParseReleaseMalformed(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		want       string
	}{
		{"kubernetes", "v1.35.2", "kubernetes: got \"v1.35.2\", expected an RKE2 version"},
		{"kubernetes", "1.35.2+rke2r1", "expected an RKE2 version"},
		{"kubernetes", "v1.35.2+k3s1", "expected an RKE2 version"},
		{"kubernetes", "v1.35+rke2r1", "expected an RKE2 version"},
		{"kubernetes", "v1.35.2-beta1+rke2r1", "expected an RKE2 version"},
		{"harvester", "v1.8.0 rc1", "harvester: got \"v1.8.0 rc1\", expected a Harvester version"},
		{"harvester", "v1.8.0+build", "expected a Harvester version"},
		{"harvesterChart", "v1.8.0", "harvesterChart: got \"v1.8.0\", expected a Helm chart version"},
		{"harvesterChart", "1.8", "expected a Helm chart version"},
		{"os", "SLE Micro 6.1", "os: got \"SLE Micro 6.1\", expected the OS name starting with \"Harvester \""},
		{"os", "'Harvester '", "os: got \"Harvester \", expected the OS name"},
		{"os", "\"Harvester v1.8.0\\n\"", "expected the OS name"},
		{"rancher", "2.14.0", "rancher: got \"2.14.0\", expected a Rancher version"},
		{"monitoringChart", "108.0", "monitoringChart: got \"108.0\", expected a Helm chart version"},
		{"minUpgradableVersion", "v1.7-head", "minUpgradableVersion: got \"v1.7-head\", expected nothing or a Harvester release"},
		{"minUpgradableVersion", "v 1.7.0", "expected nothing or a Harvester release"},
		{"kubevirt", "1.7.4+build", "kubevirt: got \"1.7.4+build\", expected the KubeVirt version as an image tag"},
		{"loggingChartHarvesterEventRouter", "v1.8.0:x", "loggingChartHarvesterEventRouter: got \"v1.8.0:x\""},
	} {
		re := regexp.MustCompile(`(?m)^` + tc.key + `:.*$`)
		data := re.ReplaceAllLiteralString(validRelease, tc.key+": "+tc.value)
		_, err := ParseRelease([]byte(data))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %s: err = %v, want ErrMalformed", tc.key, tc.value, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "harvester-release.yaml: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %s: %q does not say %q", tc.key, tc.value, err, tc.want)
		}
	}
}

func TestParseReleaseNestedMalformed(t *testing.T) {
	data := strings.Replace(validRelease, "app: 0.9.0-rc.3", "app: 0.9", 1)
	_, err := ParseRelease([]byte(data))
	if err == nil || !strings.Contains(err.Error(), `rancherDependencies.rancher-webhook.app: got "0.9", expected an application version`) {
		t.Errorf("err = %v", err)
	}
}

func TestParseReleaseYAML(t *testing.T) {
	for _, tc := range []struct {
		name, data, want string
	}{
		{"empty", "", "the file is empty"},
		{"only a comment", "# nothing\n", "the file is empty"},
		{"a list", "- harvester\n", "line 1: expected a YAML mapping of keys to values, found a list"},
		{"a scalar", "v1.8.0\n", `found the value "v1.8.0"`},
		{"syntax", "harvester: [v1.8.0\n", "not valid YAML"},
		{"tab indent", "harvester: v1\n\tos: x\n", "not valid YAML"},
		{"two documents", validRelease + "---\nharvester: v1.9.0\n", "expected a single YAML document"},
		{"duplicate key", validRelease + "harvester: v1.9.0\n", `mapping key "harvester" already defined`},
		{"wrong kind", strings.Replace(validRelease, "kubernetes: v1.35.2+rke2r1", "kubernetes: {version: v1.35.2}", 1), "kubernetes: expected a text value, found a mapping (line 4)"},
		{"group not a mapping", strings.Replace(validRelease, "rancherDependencies:", "rancherDependencies: []\nx:", 1), "rancherDependencies: expected a mapping, found a list (line 11)"},
		{"nested wrong kind", strings.Replace(validRelease, "app: 0.14.0-rc.2", "app: [0.14.0]", 1), "rancherDependencies.fleet.app: expected a text value, found a list (line 14)"},
	} {
		_, err := ParseRelease([]byte(tc.data))
		if !errors.Is(err, ErrMalformed) || !strings.HasPrefix(err.Error(), "harvester-release.yaml: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a content error saying %q", tc.name, err, tc.want)
		}
	}
}

// Values YAML would read as numbers are taken as written.
func TestParseReleaseNumbersAsWritten(t *testing.T) {
	data := strings.Replace(validRelease, "harvesterChart: 1.8.0-rc1", "harvesterChart: 1.10", 1)
	_, err := ParseRelease([]byte(data))
	if err == nil || !strings.Contains(err.Error(), `harvesterChart: got "1.10"`) {
		t.Errorf("err = %v", err)
	}
}

func TestKubeletVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.35.2+rke2r1":      "v1.35.2+rke2r1",
		"v1.22.12-rc1+rke2r1": "v1.22.12+rke2r1",
		"v1.35.2-rc12+rke2r3": "v1.35.2+rke2r3",
		"v1.35.2-rke2r1":      "v1.35.2+rke2r1",
	} {
		r := &Release{Kubernetes: in}
		if got := r.KubeletVersion(); got != want {
			t.Errorf("KubeletVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// Command crdgen writes the real CustomResourceDefinitions of the foreign
// kinds the toolkit works with (and Prometheus Operator's, which its chart
// creates), at the versions Harvester v1.6.0 ships, into
// one directory, one file per CRD: the tests, the demo and the benchmarks
// install them into their API server (internal/testenv).
//
// Every definition comes from the upstream module through the Go module proxy
// (`go mod download -json`): the YAML a project publishes where it has one,
// rendered where it is a Helm template; generated from the module's own Go
// types or schemas where the component builds its CRDs at run time (Rancher's
// provisioning Cluster and ManagedChart through wrangler, KubeVirt's kinds
// through virt-operator's validation schemas).
//
// Usage: go run . -out DIR   (hack/upstream-crds.sh runs it and caches DIR)
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Module versions follow Harvester v1.6.0's go.mod where it pins them.
const (
	harvesterModule = "github.com/harvester/harvester@v1.6.0"
	longhornModule  = "github.com/longhorn/longhorn-manager@v1.9.0"
	capiModule      = "sigs.k8s.io/cluster-api@v1.10.7"
	sucModule       = "github.com/rancher/system-upgrade-controller@v0.20.1"
	kubevirtModule  = "kubevirt.io/kubevirt@v1.5.0"
	// Fleet at the version the Rancher types below build with; its chart's
	// CRDs are plain YAML.
	fleetModule = "github.com/rancher/fleet@v0.10.0"
	// RKE2's helm-controller (HelmChart, HelmChartConfig).
	helmControllerModule = "github.com/k3s-io/helm-controller@v0.16.27"
	// Rancher's CRDs are generated from the types of this module (see
	// rancher.go, which imports it at this version through go.mod).
	rancherAPIsModule = "github.com/rancher/rancher/pkg/apis@v0.0.0-20240919204204-3da2ae0cabd1"
	// Prometheus Operator's, which the chart's ServiceMonitor and
	// PrometheusRule are applied against (test/packaging).
	prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
)

// yamlSource is a YAML file of a module and the CRDs to take from it.
type yamlSource struct {
	module string
	path   string
	crds   []string
	// render turns a Helm-template fragment into YAML.
	render func([]byte) []byte
}

var yamlSources = []yamlSource{
	{module: harvesterModule, path: "deploy/charts/harvester-crd/templates/harvesterhci.io_versions.yaml", crds: []string{"versions.harvesterhci.io"}},
	{module: harvesterModule, path: "deploy/charts/harvester-crd/templates/harvesterhci.io_virtualmachineimages.yaml", crds: []string{"virtualmachineimages.harvesterhci.io"}},
	{module: harvesterModule, path: "deploy/charts/harvester-crd/templates/harvesterhci.io_settings.yaml", crds: []string{"settings.harvesterhci.io"}},
	{module: harvesterModule, path: "deploy/charts/harvester-crd/templates/harvesterhci.io_addons.yaml", crds: []string{"addons.harvesterhci.io"}},
	{module: harvesterModule, path: "deploy/charts/harvester-crd/templates/harvesterhci.io_virtualmachinebackups.yaml", crds: []string{"virtualmachinebackups.harvesterhci.io"}},
	{module: harvesterModule, path: "deploy/charts/harvester-crd/templates/harvesterhci.io_schedulevmbackups.yaml", crds: []string{"schedulevmbackups.harvesterhci.io"}},
	{module: harvesterModule, path: "deploy/charts/harvester-crd/templates/harvesterhci.io_upgrades.yaml", crds: []string{"upgrades.harvesterhci.io"}},
	// Rancher's own, as Harvester's integration tests install them.
	{module: harvesterModule, path: "tests/integration/controllers/manifest/ranchersettings-crd.yaml", crds: []string{"settings.management.cattle.io"}},
	{module: harvesterModule, path: "tests/integration/controllers/manifest/clusterrepos-crd.yaml", crds: []string{"clusterrepos.catalog.cattle.io"}},
	{module: longhornModule, path: "k8s/crds.yaml", crds: []string{"settings.longhorn.io", "volumes.longhorn.io", "engines.longhorn.io",
		"replicas.longhorn.io", "nodes.longhorn.io", "instancemanagers.longhorn.io"}, render: renderLonghorn},
	{module: capiModule, path: "config/crd/bases/cluster.x-k8s.io_machines.yaml", crds: []string{"machines.cluster.x-k8s.io"}},
	{module: capiModule, path: "config/crd/bases/cluster.x-k8s.io_clusters.yaml", crds: []string{"clusters.cluster.x-k8s.io"}},
	{module: fleetModule, path: "charts/fleet-crd/templates/crds.yaml", crds: []string{"bundles.fleet.cattle.io", "clusters.fleet.cattle.io"}},
	{module: helmControllerModule, path: "pkg/crds/yaml/generated/helm.cattle.io_helmchartconfigs.yaml", crds: []string{"helmchartconfigs.helm.cattle.io"}},
	{module: sucModule, path: "pkg/crds/yaml/generated/upgrade.cattle.io_plans.yaml", crds: []string{"plans.upgrade.cattle.io"}},
	{module: prometheusOperatorModule, path: "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml", crds: []string{"servicemonitors.monitoring.coreos.com"}},
	{module: prometheusOperatorModule, path: "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml", crds: []string{"prometheusrules.monitoring.coreos.com"}},
}

func main() {
	out := flag.String("out", "", "directory to write the CRDs into (created)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "crdgen: -out is required")
		os.Exit(2)
	}
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "crdgen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	var all []*apiextv1.CustomResourceDefinition
	for _, src := range yamlSources {
		crds, err := fromYAML(src)
		if err != nil {
			return err
		}
		all = append(all, crds...)
	}
	rancher, err := rancherCRDs()
	if err != nil {
		return fmt.Errorf("generating Rancher's CRDs from %s: %w", rancherAPIsModule, err)
	}
	all = append(all, rancher...)
	dir, err := moduleDir(kubevirtModule)
	if err != nil {
		return err
	}
	kubevirt, err := kubevirtCRDs(dir)
	if err != nil {
		return fmt.Errorf("generating KubeVirt's CRDs from %s: %w", kubevirtModule, err)
	}
	all = append(all, kubevirt...)

	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, c := range all {
		c.APIVersion, c.Kind = apiextv1.SchemeGroupVersion.String(), "CustomResourceDefinition"
		// No conversion webhook runs beside the test API server.
		c.Spec.Conversion = &apiextv1.CustomResourceConversion{Strategy: apiextv1.NoneConverter}
		b, err := yaml.Marshal(c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, c.Name+".yaml"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// moduleDir downloads module@version through the module proxy and returns
// its directory in the module cache.
func moduleDir(modVersion string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(raw, &info); jerr == nil && info.Error != "" {
		return "", fmt.Errorf("downloading %s: %s", modVersion, info.Error)
	}
	if err != nil || info.Dir == "" {
		return "", fmt.Errorf("downloading %s through the Go module proxy: %v %s", modVersion, err, strings.TrimSpace(stderr.String()))
	}
	return info.Dir, nil
}

func fromYAML(src yamlSource) ([]*apiextv1.CustomResourceDefinition, error) {
	dir, err := moduleDir(src.module)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, src.path))
	if err != nil {
		return nil, err
	}
	if src.render != nil {
		raw = src.render(raw)
	}
	want := map[string]bool{}
	for _, n := range src.crds {
		want[n] = true
	}
	var found []*apiextv1.CustomResourceDefinition
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		c := &apiextv1.CustomResourceDefinition{}
		if err := dec.Decode(c); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s %s: %w", src.module, src.path, err)
		}
		if want[c.Name] {
			found = append(found, c)
			delete(want, c.Name)
		}
	}
	if len(want) > 0 {
		var missing []string
		for n := range want {
			missing = append(missing, n)
		}
		sort.Strings(missing)
		return nil, fmt.Errorf("%s %s has no CRD %s", src.module, src.path, strings.Join(missing, ", "))
	}
	return found, nil
}

// renderLonghorn renders the two includes of longhorn-manager's k8s/crds.yaml,
// a fragment of Longhorn's Helm chart: the chart's labels and the release
// namespace.
func renderLonghorn(b []byte) []byte {
	s := string(b)
	s = strings.ReplaceAll(s, `{{- include "longhorn.labels" . | nindent 4 }}`,
		"\n    app.kubernetes.io/name: longhorn\n    app.kubernetes.io/instance: longhorn\n    app.kubernetes.io/version: v1.9.0")
	s = strings.ReplaceAll(s, `{{ include "release_namespace" . }}`, "longhorn-system")
	return []byte(s)
}

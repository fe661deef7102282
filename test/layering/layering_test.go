// Package layering_test keeps the package map of docs/architecture.md and
// the code in step: every package is on the map, in a layer, and imports
// only what its layer may.
package layering_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the module's path; the map names packages relative to it.
const module = "github.com/harvester/upgrade-toolkit/"

// layerMap is what docs/architecture.md says of the packages.
type layerMap struct {
	// apart: the packages of these layers import none of each other.
	apart map[int]bool
	// layers holds each package's layer, by the path the map gives (a
	// path ending in /... covers the packages below it).
	layers map[string]int
}

// layerOf returns a package's layer, and whether the map has it.
func (m layerMap) layerOf(pkg string) (int, bool) {
	if l, ok := m.layers[pkg]; ok {
		return l, true
	}
	for p, l := range m.layers {
		if tree, ok := strings.CutSuffix(p, "/..."); ok && strings.HasPrefix(pkg, tree+"/") {
			return l, true
		}
	}
	return 0, false
}

var (
	// layerRow is a row of the table of layers: | 4 | what | rule |.
	layerRow = regexp.MustCompile(`^\|\s*(\d+)\s*\|[^|]*\|([^|]*)\|\s*$`)
	// packageRow is a row of the table of packages: | 4 | `pkg`, `pkg` | role |.
	packageRow = regexp.MustCompile("^\\|\\s*(\\d+)\\s*\\|\\s*(`[^|]+)\\|")
	backticked = regexp.MustCompile("`([^`]+)`")
)

// readMap reads the section "Packages" of docs/architecture.md.
func readMap(t *testing.T, root string) layerMap {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := bytes.Cut(doc, []byte("\n## Packages\n"))
	if !ok {
		t.Fatal(`docs/architecture.md has no section "## Packages"`)
	}
	section, _, _ = bytes.Cut(section, []byte("\n## "))
	m := layerMap{apart: map[int]bool{}, layers: map[string]int{}}
	defined := map[int]bool{}
	sc := bufio.NewScanner(bytes.NewReader(section))
	for sc.Scan() {
		line := sc.Text()
		if r := packageRow.FindStringSubmatch(line); r != nil {
			layer, _ := strconv.Atoi(r[1])
			for _, p := range backticked.FindAllStringSubmatch(r[2], -1) {
				if _, dup := m.layers[p[1]]; dup {
					t.Errorf("the map names %s twice", p[1])
				}
				m.layers[p[1]] = layer
			}
			continue
		}
		if r := layerRow.FindStringSubmatch(line); r != nil {
			layer, _ := strconv.Atoi(r[1])
			defined[layer] = true
			m.apart[layer] = strings.Contains(r[2], "apart")
		}
	}
	if len(m.layers) == 0 || len(defined) == 0 {
		t.Fatalf("no table of layers or of packages in the section Packages of docs/architecture.md (%d layers, %d packages)", len(defined), len(m.layers))
	}
	for p, l := range m.layers {
		if !defined[l] {
			t.Errorf("%s is in layer %d, which the table of layers does not define", p, l)
		}
	}
	return m
}

// goPackage is a package as go list sees it, with the module's packages it
// imports (its tests' imports aside: a test may drive what it tests from
// above).
type goPackage struct {
	path    string
	imports []string
}

// listPackages lists the module's packages.
func listPackages(t *testing.T, root string) []goPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	} else if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p := goPackage{path: strings.TrimPrefix(f[0], module)}
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				p.imports = append(p.imports, rel)
			}
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// repoRoot is the module's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestThePackageMapIsTheCode: the map names every package and no other.
func TestThePackageMapIsTheCode(t *testing.T) {
	root := repoRoot(t)
	m := readMap(t, root)
	pkgs := listPackages(t, root)
	covered := map[string]bool{}
	for _, p := range pkgs {
		if _, ok := m.layerOf(p.path); !ok {
			t.Errorf("package %s is not on the map of docs/architecture.md (section Packages): give it a layer and say what it holds", p.path)
		}
		covered[p.path] = true
	}
	for entry := range m.layers {
		tree, isTree := strings.CutSuffix(entry, "/...")
		if !isTree && !covered[entry] || isTree && !slices.ContainsFunc(pkgs, func(p goPackage) bool { return strings.HasPrefix(p.path, tree+"/") }) {
			t.Errorf("docs/architecture.md names %s, which is no package", entry)
		}
	}
}

// TestImportsKeepToTheLayers: a package imports only from its own layer and
// the ones below; in a layer that is apart, from none of its own layer.
func TestImportsKeepToTheLayers(t *testing.T) {
	root := repoRoot(t)
	for _, v := range layerViolations(readMap(t, root), listPackages(t, root)) {
		t.Error(v)
	}
}

// layerViolations says which imports break the map's rules.
func layerViolations(m layerMap, pkgs []goPackage) []string {
	var out []string
	for _, p := range pkgs {
		from, ok := m.layerOf(p.path)
		if !ok {
			continue // TestThePackageMapIsTheCode reports it
		}
		for _, imp := range p.imports {
			to, ok := m.layerOf(imp)
			switch {
			case !ok:
			case to > from:
				out = append(out, fmt.Sprintf("%s (layer %d) imports %s from the layer above it, %d", p.path, from, imp, to))
			case to == from && m.apart[from]:
				out = append(out, fmt.Sprintf("%s imports %s, but the packages of layer %d are apart", p.path, imp, from))
			}
		}
	}
	return out
}

// TestLayerViolationsAreFound: the rules catch an import from above and one
// within a layer that is apart, and let the others be.
func TestLayerViolationsAreFound(t *testing.T) {
	m := layerMap{apart: map[int]bool{4: true}, layers: map[string]int{
		"internal/cluster/apis/...": 1, "internal/cluster": 2, "internal/jobspec": 3,
		"internal/phase": 4, "internal/clusterupgrade": 4, "internal/webhook": 5, "internal/manager": 6,
	}}
	got := layerViolations(m, []goPackage{
		{"internal/phase", []string{"internal/jobspec", "internal/cluster", "internal/clusterupgrade"}},
		{"internal/webhook", []string{"internal/manager"}},
		{"internal/cluster", []string{"internal/cluster/apis/common"}},
		{"internal/manager", []string{"internal/webhook", "internal/phase"}},
	})
	want := []string{
		"internal/phase imports internal/clusterupgrade, but the packages of layer 4 are apart",
		"internal/webhook (layer 5) imports internal/manager from the layer above it, 6",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

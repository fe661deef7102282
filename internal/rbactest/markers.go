package rbactest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// Covering makes the suite answer only for the permissions that the
// +kubebuilder:rbac markers of the given package directories (relative to
// the repository's root) grant: when the tests of the packages whose
// markers make up one role run as separate suites, each checks that the
// permissions of its own packages are used. Together the suites must cover
// every package of the role.
func (id *Identity) Covering(dirs ...string) error {
	covered := map[grant]bool{}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), dir, "*.go"))
		if err != nil {
			return err
		}
		markers := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			for _, m := range rbacMarker.FindAllStringSubmatch(string(src), -1) {
				markers++
				gs, err := markerGrants(m[1])
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
				for _, g := range gs {
					covered[g] = true
				}
			}
		}
		if markers == 0 {
			return fmt.Errorf("%s holds no +kubebuilder:rbac marker: a suite answering for it would check nothing", dir)
		}
	}
	id.covered = covered
	return nil
}

var rbacMarker = regexp.MustCompile(`(?m)^// \+kubebuilder:rbac:(\S+)$`)

// markerGrants expands a marker's arguments into the permissions it grants,
// as permission keys.
func markerGrants(args string) ([]grant, error) {
	fields := map[string][]string{}
	for _, kv := range strings.Split(args, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("marker argument %q is not key=value", kv)
		}
		fields[k] = strings.Split(strings.Trim(v, `"`), ";")
	}
	namespace := ""
	if ns := fields["namespace"]; len(ns) > 0 {
		namespace = ns[0]
	}
	names := fields["resourceNames"]
	if len(names) == 0 {
		names = []string{""}
	}
	var out []grant
	for _, verb := range fields["verbs"] {
		for _, url := range fields["urls"] {
			out = append(out, grant{verb: verb, url: url})
		}
		for _, group := range fields["groups"] {
			for _, res := range fields["resources"] {
				for _, name := range names {
					out = append(out, grant{namespace: namespace, verb: verb, group: group, resource: res, name: name})
				}
			}
		}
	}
	return out, nil
}

// permission is the grant without the role that grants it: what a marker
// says.
func (g grant) permission() grant {
	g.role = ""
	return g
}

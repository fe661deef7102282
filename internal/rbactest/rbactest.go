// Package rbactest runs code on a test API server as a ServiceAccount bound
// to the roles generated from its +kubebuilder:rbac markers (config/rbac),
// and checks that the roles fit the code exactly: no request of the code is
// refused, and every permission the roles grant is used by some request.
//
// Use it from TestMain around a package's whole test suite: Bind before the
// tests, run the code under test with Identity.Config, and end with
// Identity.Verdict. envtest's API server authorizes with RBAC, so a missing
// permission fails the request just as it would in a cluster.
package rbactest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/harvester/upgrade-toolkit/internal/apicount"
	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// The generated roles, relative to the repository's root; `make manifests`
// writes them from the markers of the packages the Makefile names.
const (
	// ManagerRole: the reconcilers, the phases, the pre-flight checks and
	// the manager itself (cache, leader election, events).
	ManagerRole = "config/rbac/manager_role.yaml"
	// WebhookRole: the admission webhook and its certificate rotation.
	WebhookRole = "config/rbac/webhook_role.yaml"
	// MetricsAuthRole: authenticating and authorizing metrics scrapers.
	MetricsAuthRole = "config/rbac/metrics_auth_role.yaml"
	// UpgradeLogRole: the capture of the upgrade's logs, bound to the
	// manager while it runs.
	UpgradeLogRole = "config/rbac/upgrade_log_role.yaml"
	// JobRole: the cluster-upgrade, node and restore-vm Jobs.
	JobRole = "config/rbac/job_role.yaml"
)

// Identity is a ServiceAccount bound to generated roles, and the record of
// what the code running as it asked for.
type Identity struct {
	user   string
	config *rest.Config
	mapper meta.RESTMapper
	grants []grant

	// covered, when set, are the permissions the suite answers for
	// (Covering); nil answers for all.
	covered map[grant]bool

	mu      sync.Mutex
	used    map[grant]bool
	refused []string
}

// grant is one permission of a role: a verb on a resource in a namespace
// ("" for a ClusterRole), or a verb on a non-resource URL.
type grant struct {
	role      string
	namespace string
	verb      string
	group     string
	resource  string
	name      string
	url       string
}

func (g grant) String() string {
	what := g.url
	if g.url == "" {
		what = g.resource
		if g.group != "" {
			what += "." + g.group
		}
		if g.name != "" {
			what += " named " + g.name
		}
	}
	return fmt.Sprintf("%s: %s %s", g.role, g.verb, what)
}

// Bind creates the ServiceAccount sa and the roles in the given generated
// files (paths relative to the repository's root), binds each role to sa
// and returns the identity. The roles' namespaces must exist.
func Bind(ctx context.Context, env *testenv.Env, sa types.NamespacedName, roleFiles ...string) (*Identity, error) {
	id := &Identity{
		user:   "system:serviceaccount:" + sa.Namespace + ":" + sa.Name,
		mapper: env.Client.RESTMapper(),
		used:   map[grant]bool{},
	}
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.Namespace, Name: sa.Name}}); err != nil {
		return nil, fmt.Errorf("creating ServiceAccount %s: %w", sa, err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}}
	for _, file := range roleFiles {
		roles, err := ReadRoles(file)
		if err != nil {
			return nil, err
		}
		for _, r := range roles {
			id.grants = append(id.grants, r.grants()...)
			if err := r.install(ctx, env.Client, subjects); err != nil {
				return nil, err
			}
		}
	}
	id.config = rest.CopyConfig(env.Config)
	id.config.Impersonate = rest.ImpersonationConfig{UserName: id.user}
	id.config.Wrap(func(next http.RoundTripper) http.RoundTripper { return recorder{next: next, id: id} })
	return id, nil
}

// Config returns a configuration that reaches the API server as the
// identity and records every request.
func (id *Identity) Config() *rest.Config { return rest.CopyConfig(id.config) }

// Role is a generated ClusterRole (Namespace "") or Role.
type Role struct {
	Name      string
	Namespace string
	Rules     []rbacv1.PolicyRule
}

// ReadRoles reads the ClusterRoles and Roles of a generated file, relative
// to the repository's root.
func ReadRoles(file string) ([]Role, error) {
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), file))
	if err != nil {
		return nil, fmt.Errorf("reading the generated roles: %w; run `make manifests`", err)
	}
	var roles []Role
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var doc struct {
			Kind     string              `json:"kind"`
			Metadata metav1.ObjectMeta   `json:"metadata"`
			Rules    []rbacv1.PolicyRule `json:"rules"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		switch doc.Kind {
		case "ClusterRole", "Role":
			roles = append(roles, Role{Name: doc.Metadata.Name, Namespace: doc.Metadata.Namespace, Rules: doc.Rules})
		case "":
		default:
			return nil, fmt.Errorf("%s: unexpected %s %s", file, doc.Kind, doc.Metadata.Name)
		}
	}
	return roles, nil
}

func (r Role) String() string {
	if r.Namespace == "" {
		return "ClusterRole " + r.Name
	}
	return "Role " + r.Namespace + "/" + r.Name
}

// grants expands the role's rules into single permissions.
func (r Role) grants() []grant {
	var out []grant
	for _, rule := range r.Rules {
		names := rule.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, verb := range rule.Verbs {
			for _, url := range rule.NonResourceURLs {
				out = append(out, grant{role: r.String(), verb: verb, url: url})
			}
			for _, group := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, name := range names {
						out = append(out, grant{role: r.String(), namespace: r.Namespace, verb: verb, group: group, resource: res, name: name})
					}
				}
			}
		}
	}
	return out
}

// install creates the role and binds it to the subjects.
func (r Role) install(ctx context.Context, c client.Client, subjects []rbacv1.Subject) error {
	om := metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace}
	var role, binding client.Object
	if r.Namespace == "" {
		role = &rbacv1.ClusterRole{ObjectMeta: om, Rules: r.Rules}
		binding = &rbacv1.ClusterRoleBinding{ObjectMeta: om, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.Name}}
	} else {
		role = &rbacv1.Role{ObjectMeta: om, Rules: r.Rules}
		binding = &rbacv1.RoleBinding{ObjectMeta: om, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: r.Name}}
	}
	for _, obj := range []client.Object{role, binding} {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("installing %s: %w", r, err)
		}
	}
	return nil
}

// recorder notes what each request of the identity asked for and whether
// RBAC refused it.
type recorder struct {
	next http.RoundTripper
	id   *Identity
}

func (rt recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	asked := []apicount.Request{apicount.Describe(req)}
	asked = append(asked, rt.id.ownerFinalizers(req, asked[0])...)
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if resp.StatusCode == http.StatusForbidden {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var status metav1.Status
		_ = json.Unmarshal(body, &status)
		// RBAC and the owner-reference admission plugin say "cannot";
		// admission webhooks that deny speak for themselves.
		if strings.Contains(status.Message, "cannot ") {
			rt.id.refuse(fmt.Sprintf("%s %s: %s", req.Method, req.URL.RequestURI(), status.Message))
			return resp, nil
		}
	}
	for _, r := range asked {
		rt.id.use(r)
	}
	return resp, nil
}

// ownerFinalizers returns the permissions a write needs beyond its own verb
// when it sets owner references that block the owner's deletion: where the
// OwnerReferencesPermissionEnforcement admission plugin runs, that takes
// "update" on the owner's finalizers subresource.
func (id *Identity) ownerFinalizers(req *http.Request, r apicount.Request) []apicount.Request {
	if r.NonResource || req.GetBody == nil || (r.Verb != "create" && r.Verb != "update" && r.Verb != "patch") {
		return nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil
	}
	defer func() { _ = body.Close() }()
	var obj struct {
		Metadata struct {
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if json.NewDecoder(body).Decode(&obj) != nil {
		return nil
	}
	var out []apicount.Request
	for _, ref := range obj.Metadata.OwnerReferences {
		if ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			continue
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			continue
		}
		m, err := id.mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
		if err != nil {
			continue
		}
		out = append(out, apicount.Request{Verb: "update", Group: gv.Group, Resource: m.Resource.Resource + "/finalizers",
			Namespace: r.Namespace, Name: ref.Name})
	}
	return out
}

func (id *Identity) refuse(msg string) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if !slices.Contains(id.refused, msg) {
		id.refused = append(id.refused, msg)
	}
}

// use marks every grant that allows the request as used.
func (id *Identity) use(r apicount.Request) {
	id.mu.Lock()
	defer id.mu.Unlock()
	for _, g := range id.grants {
		if g.allows(r) {
			id.used[g] = true
		}
	}
}

// allows reports whether the grant allows the request, as RBAC decides.
func (g grant) allows(r apicount.Request) bool {
	if g.verb != r.Verb && g.verb != rbacv1.VerbAll {
		return false
	}
	if r.NonResource {
		return g.url != "" && (g.url == r.Path || strings.HasSuffix(g.url, "*") && strings.HasPrefix(r.Path, strings.TrimSuffix(g.url, "*")))
	}
	return g.url == "" && g.group == r.Group && g.resource == r.Resource &&
		(g.namespace == "" || g.namespace == r.Namespace) && (g.name == "" || g.name == r.Name)
}

// Refused lists the requests RBAC refused, with the API server's message.
func (id *Identity) Refused() []string {
	id.mu.Lock()
	defer id.mu.Unlock()
	return slices.Clone(id.refused)
}

// Unused lists the permissions no request used, of those the suite answers
// for (Covering).
func (id *Identity) Unused() []string {
	id.mu.Lock()
	defer id.mu.Unlock()
	var out []string
	for _, g := range id.grants {
		if id.covered != nil && !id.covered[g.permission()] {
			continue
		}
		if !id.used[g] {
			out = append(out, g.String())
		}
	}
	return out
}

// Redundant lists the permissions of a Role that a ClusterRole of the same
// identity already grants everywhere.
func (id *Identity) Redundant() []string {
	var out []string
	for _, g := range id.grants {
		if g.namespace == "" {
			continue
		}
		for _, c := range id.grants {
			if c.namespace == "" && c.url == "" && c.verb == g.verb && c.group == g.group && c.resource == g.resource && (c.name == "" || c.name == g.name) {
				out = append(out, fmt.Sprintf("%s (also granted by %s)", g, c.role))
				break
			}
		}
	}
	return out
}

// Verdict ends a test run: it reports the refused requests, and, when the
// whole suite ran (no -run or -skip), the unused and redundant permissions,
// on stderr, and returns the exit code: code, or 1 if it found any.
func (id *Identity) Verdict(code int) int {
	report := func(what, fix string, items []string) {
		if len(items) == 0 {
			return
		}
		slices.Sort(items)
		fmt.Fprintf(os.Stderr, "rbactest: %s (%s):\n  %s\n", what, fix, strings.Join(items, "\n  "))
		code = 1
	}
	report("requests of "+id.user+" that RBAC refused", "add a +kubebuilder:rbac marker next to the code and run `make manifests`", id.Refused())
	if !wholeSuite() {
		return code
	}
	report("permissions no request used", "remove the marker that grants them, or test the code that needs them", id.Unused())
	report("permissions granted twice", "remove the namespaced marker", id.Redundant())
	return code
}

// wholeSuite reports whether every test of the package runs, so that every
// permission had its chance to be used.
func wholeSuite() bool {
	for _, name := range []string{"test.run", "test.skip"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return false
		}
	}
	return true
}

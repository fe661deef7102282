package packaging_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvester/upgrade-toolkit/internal/testenv"
)

// TestRBACMarkersReachTheRoles: controller-gen takes a +kubebuilder:rbac
// marker only from a comment block of its own at the top level of a file;
// in the doc comment of a declaration, or inside a function, it ignores it
// without a word, and the role silently lacks the permission.
func TestRBACMarkersReachTheRoles(t *testing.T) {
	root := testenv.RepoRoot()
	fset := token.NewFileSet()
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "dist" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		ignored := ignoredCommentGroups(f)
		for _, g := range f.Comments {
			for _, c := range g.List {
				if !strings.Contains(c.Text, "+kubebuilder:rbac:") {
					continue
				}
				found++
				if why, ok := ignored[g]; ok {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s:%d: controller-gen ignores this marker, %s: put it in a comment block of its own, followed by a blank line",
						rel, fset.Position(c.Pos()).Line, why)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no +kubebuilder:rbac marker found: the walk is broken")
	}
}

// ignoredCommentGroups returns the comment groups whose markers controller-gen
// does not take as package-level, with the reason: the doc comments of
// declarations, specs and fields, and the comments inside function bodies.
func ignoredCommentGroups(f *ast.File) map[*ast.CommentGroup]string {
	out := map[*ast.CommentGroup]string{}
	doc := func(g *ast.CommentGroup, what string) {
		if g != nil {
			out[g] = "in the doc comment of " + what
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			doc(n.Doc, n.Name.Name)
			if n.Body != nil {
				for _, g := range f.Comments {
					if g.Pos() > n.Body.Lbrace && g.End() < n.Body.Rbrace {
						out[g] = "inside the body of " + n.Name.Name
					}
				}
			}
		case *ast.GenDecl:
			doc(n.Doc, "a "+n.Tok.String()+" declaration")
		case *ast.TypeSpec:
			doc(n.Doc, n.Name.Name)
		case *ast.ValueSpec:
			doc(n.Doc, n.Names[0].Name)
		case *ast.Field:
			doc(n.Doc, "a field")
		}
		return true
	})
	return out
}

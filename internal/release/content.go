package release

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// ErrMalformed is matched (errors.Is) by every error about the content of a
// file in the release: such an error does not go away by retrying.
var ErrMalformed = errors.New("malformed release content")

// ContentError lists every problem found in one file of the release, so that
// one run shows all of them.
type ContentError struct {
	// File is the file's path in the repo, or its URL when it was fetched.
	File string
	// Problems each name the field (or line) and say what was expected.
	Problems []string
}

func (e *ContentError) Error() string {
	return e.File + ": " + strings.Join(e.Problems, "; ")
}

// Is makes errors.Is(err, ErrMalformed) true.
func (e *ContentError) Is(target error) bool { return target == ErrMalformed }

// problems collects the problems of one file.
type problems []string

func (p *problems) addf(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err(file string) error {
	if len(p) == 0 {
		return nil
	}
	return &ContentError{File: file, Problems: p}
}

// decodeYAML decodes exactly one YAML mapping into out. Keys out does not
// know are ignored: the files come from the release build, which may add
// keys, and a misspelt required key still fails as missing. Duplicate keys,
// values of the wrong kind, syntax errors, an empty file and more than one
// document are problems.
func decodeYAML(data []byte, out any) problems {
	var p problems
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.addf("the file is empty, expected a YAML mapping")
		} else {
			p.addf("not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
		return p
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		p.addf("expected a single YAML document, found more")
		return p
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		p.addf("line %d: expected a YAML mapping of keys to values, found %s", root.Line, kindName(root))
		return p
	}
	if err := root.Decode(out); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			fields := map[int][]valueAt{}
			fieldLines(root, "", fields)
			for _, e := range te.Errors {
				p.addf("%s", explainTypeError(e, fields))
			}
		} else {
			p.addf("%s", strings.TrimPrefix(err.Error(), "yaml: "))
		}
	}
	return p
}

// valueAt is a value in the tree: its key path, such as
// rancherDependencies.fleet.chart or images.common[0].list, and its kind.
type valueAt struct {
	path string
	kind yaml.Kind
}

// fieldLines lists, by line, the values in the tree, outermost first.
func fieldLines(n *yaml.Node, path string, lines map[int][]valueAt) {
	visit := func(v *yaml.Node, p string) {
		lines[v.Line] = append(lines[v.Line], valueAt{path: p, kind: v.Kind})
		fieldLines(v, p, lines)
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			visit(n.Content[i+1], p)
		}
	case yaml.SequenceNode:
		for i, v := range n.Content {
			visit(v, path+"["+strconv.Itoa(i)+"]")
		}
	}
}

// typeError is the text of a yaml.TypeError entry for a value of the wrong
// kind.
var typeError = regexp.MustCompile("^line ([0-9]+): cannot unmarshal !!([a-z]+)(?: `.*`)? into (.+)$")

// explainTypeError rewrites "line 3: cannot unmarshal !!map into string" as
// "kubernetes: expected a text value, found a mapping (line 3)". The value
// is the outermost one of that kind on that line.
func explainTypeError(msg string, lines map[int][]valueAt) string {
	m := typeError.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	line, _ := strconv.Atoi(m[1])
	kind, found := yaml.ScalarNode, "a value of type "+m[2]
	switch m[2] {
	case "map":
		kind, found = yaml.MappingNode, "a mapping"
	case "seq":
		kind, found = yaml.SequenceNode, "a list"
	case "str":
		found = "a text value"
	}
	i := slices.IndexFunc(lines[line], func(v valueAt) bool { return v.kind == kind })
	if i < 0 {
		return msg
	}
	expected := "a mapping"
	switch {
	case m[3] == "string":
		expected = "a text value"
	case strings.HasPrefix(m[3], "[]"):
		expected = "a list"
	}
	return fmt.Sprintf("%s: expected %s, found %s (line %d)", lines[line][i].path, expected, found, line)
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("the value %q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	default:
		return "something else"
	}
}

// printable reports whether s is valid UTF-8 with no control characters and
// no leading or trailing space.
func printable(s string) bool {
	if !utf8.ValidString(s) || strings.TrimSpace(s) != s {
		return false
	}
	return strings.IndexFunc(s, unicode.IsControl) < 0
}

package preflight

import (
	"os"
	"strings"
	"testing"
)

// TestTheCatalogueIsDocumented: docs/risks.md has a row for every risk, with
// its level, and no row for a risk that does not exist.
func TestTheCatalogueIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/risks.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 3 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[2])
		}
	}
	for _, r := range Catalogue {
		level, ok := rows[string(r.Name)]
		switch {
		case !ok:
			t.Errorf("docs/risks.md has no row for %s", r.Name)
		case !strings.HasPrefix(level, r.Level):
			t.Errorf("docs/risks.md gives %s the level %q; the catalogue says %s", r.Name, level, r.Level)
		}
		delete(rows, string(r.Name))
	}
	for name := range rows {
		t.Errorf("docs/risks.md documents %s, which is no risk of the catalogue", name)
	}
}

// TestRiskNamesAreUniqueAndAcceptable: every name can be written in
// spec.acceptRisks (the CRD's pattern) and names one risk.
func TestRiskNamesAreUniqueAndAcceptable(t *testing.T) {
	seen := map[Reason]bool{}
	for _, r := range Catalogue {
		if seen[r.Name] {
			t.Errorf("%s is in the catalogue twice", r.Name)
		}
		seen[r.Name] = true
		if n := string(r.Name); len(n) > 64 || n[0] < 'A' || n[0] > 'Z' || strings.ContainsAny(n, " -_./") {
			t.Errorf("%s does not match spec.acceptRisks' pattern ^[A-Z][A-Za-z0-9]*$", r.Name)
		}
		if r.Level != LevelError && r.Level != LevelWarning {
			t.Errorf("%s has level %q", r.Name, r.Level)
		}
	}
}

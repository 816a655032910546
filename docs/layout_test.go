package docs_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const modulePath = "github.com/heartbeatd/heartbeatd/"

// packageMap reads CONTRIBUTING.md's package table: each row's packages and the repository packages
// they may import ("any", "any below", "—", or a list where "internal/…" stands for every internal one).
func packageMap(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "CONTRIBUTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| (`[^|]+) \\| [^|]+ \\| ([^|]+) \\|$")
	code := regexp.MustCompile("`([^`]+)`")
	out := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		var allowed []string
		for _, c := range code.FindAllStringSubmatch(m[2], -1) {
			allowed = append(allowed, c[1])
		}
		if strings.HasPrefix(strings.TrimSpace(m[2]), "any") {
			allowed = []string{"any"}
		}
		for _, c := range code.FindAllStringSubmatch(m[1], -1) {
			out[c[1]] = allowed
		}
	}
	if len(out) < 10 {
		t.Fatalf("CONTRIBUTING.md's package table has %d rows; expected the whole map", len(out))
	}
	return out
}

// rowOf is the table row that describes pkg: its own, else the nearest parent's "…" row.
func rowOf(table map[string][]string, pkg string) ([]string, bool) {
	if allowed, ok := table[pkg]; ok {
		return allowed, true
	}
	if strings.HasPrefix(pkg, "internal/") {
		for _, name := range []string{"testenv", "benchrig"} {
			if strings.HasPrefix(pkg, "internal/"+name) {
				return []string{"any"}, true
			}
		}
		allowed, ok := table["internal/…"]
		return allowed, ok
	}
	return nil, false
}

// admits: imp is named in allowed, or allowed has "internal/…" and imp is one of the helper packages
// that row stands for (an internal package without a row of its own).
func admits(table map[string][]string, allowed []string, imp string) bool {
	_, ownRow := table[imp]
	for _, a := range allowed {
		if a == "any" || a == imp || (a == "internal/…" && strings.HasPrefix(imp, "internal/") && !ownRow) {
			return true
		}
	}
	return false
}

// TestPackageMapMatchesImports: every package of the repository has a row in CONTRIBUTING.md's map,
// and imports only what its row allows, so the documented layering is the one the code has.
func TestPackageMapMatchesImports(t *testing.T) {
	table := packageMap(t)
	imports := map[string][]string{}
	for _, top := range []string{"cmd", "pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, top), func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(repoRoot, filepath.Dir(p))
			rel = filepath.ToSlash(rel)
			for _, imp := range f.Imports {
				if path := strings.Trim(imp.Path.Value, `"`); strings.HasPrefix(path, modulePath) {
					imports[rel] = append(imports[rel], strings.TrimPrefix(path, modulePath))
				}
			}
			if _, ok := imports[rel]; !ok {
				imports[rel] = nil
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for pkg, imps := range imports {
		allowed, ok := rowOf(table, pkg)
		if !ok {
			t.Errorf("%s has no row in CONTRIBUTING.md's package map", pkg)
			continue
		}
		if slices.Contains(allowed, "any") {
			continue
		}
		for _, imp := range imps {
			if imp != pkg && !admits(table, allowed, imp) {
				t.Errorf("%s imports %s, which its row in CONTRIBUTING.md's package map does not allow", pkg, imp)
			}
		}
	}
}

// TestPublicPackagesAreTheIntendedOnes: everything under pkg/ is importable by anyone, so pkg/ holds
// only what outside code is meant to use; the rest lives under internal/.
func TestPublicPackagesAreTheIntendedOnes(t *testing.T) {
	want := []string{"pkg/client", "pkg/event", "pkg/schedule"}
	var got []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "pkg"), func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, filepath.Dir(p))
		if rel = filepath.ToSlash(rel); !slices.Contains(got, rel) {
			got = append(got, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("pkg/ holds %v; the public API is %v (move the rest under internal/, or name it here and in CONTRIBUTING.md)", got, want)
	}
}

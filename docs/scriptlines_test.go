package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxScriptLines is the longest Lua script CONTRIBUTING.md allows: one longer cannot be reviewed.
const maxScriptLines = 150

// TestLuaScriptsAreShort counts the lines of every Lua script the code hands Redis (the argument of
// redis.NewScript, or of internal/deadline's newScript), as Redis runs it: string constants joined in
// with + and Lua helpers filled in by name (${luaPieces}) count where they land.
func TestLuaScriptsAreShort(t *testing.T) {
	scripts := 0
	for _, files := range goPackages(t) {
		fset := token.NewFileSet()
		var parsed []*ast.File
		for _, f := range files {
			af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, af)
		}
		consts := stringConsts(parsed)
		for _, af := range parsed {
			for _, d := range af.Decls {
				for name, node := range declared(d) {
					_, inFunc := d.(*ast.FuncDecl)
					ast.Inspect(node, func(n ast.Node) bool {
						call, ok := n.(*ast.CallExpr)
						if !ok || !isScriptConstructor(call.Fun) || len(call.Args) != 1 {
							return true
						}
						pos := fset.Position(call.Pos())
						rel, _ := filepath.Rel(repoRoot, pos.Filename)
						src, ok := consts.eval(call.Args[0])
						if !ok {
							if _, ident := call.Args[0].(*ast.Ident); inFunc && ident {
								return true // a wrapper handing on its parameter, such as newScript itself
							}
							t.Errorf("%s:%d: a script whose source is not a string constant cannot be counted", rel, pos.Line)
							return true
						}
						scripts++
						lines := scriptLines(consts.fill(src))
						t.Logf("%s:%d: %s: %d lines", rel, pos.Line, name, lines)
						if lines > maxScriptLines {
							t.Errorf("%s:%d: %s has %d lines of Lua, more than %d: split it into steps, or move decisions into Go",
								rel, pos.Line, name, lines, maxScriptLines)
						}
						return true
					})
				}
			}
		}
	}
	if scripts < 10 {
		t.Fatalf("found %d Lua scripts; expected every script of the repository", scripts)
	}
}

// declared names the nodes of a declaration: a function by its name, each value of a var or const by
// the name it is given.
func declared(d ast.Decl) map[string]ast.Node {
	out := map[string]ast.Node{}
	switch d := d.(type) {
	case *ast.FuncDecl:
		out[d.Name.Name] = d
	case *ast.GenDecl:
		for _, spec := range d.Specs {
			if vs, ok := spec.(*ast.ValueSpec); ok {
				for i, v := range vs.Values {
					out[vs.Names[min(i, len(vs.Names)-1)].Name] = v
				}
			}
		}
	}
	return out
}

// goPackages lists the non-test Go files of the repository by directory.
func goPackages(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range goFiles(t) {
		if !strings.HasSuffix(p, "_test.go") {
			out[filepath.Dir(p)] = append(out[filepath.Dir(p)], p)
		}
	}
	return out
}

// goFiles is every .go file of the repository, tests included, outside hidden and testdata directories.
func goFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata") && p != repoRoot {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(p, ".go") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isScriptConstructor(fun ast.Expr) bool {
	switch f := fun.(type) {
	case *ast.Ident:
		return f.Name == "newScript"
	case *ast.SelectorExpr:
		return f.Sel.Name == "NewScript"
	}
	return false
}

// constExprs are a package's constant declarations, by name.
type constExprs map[string]ast.Expr

func stringConsts(files []*ast.File) constExprs {
	out := constExprs{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						out[name.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	return out
}

// eval is the value of a string constant expression: literals, constants of the package, and +.
func (c constExprs) eval(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.Ident:
		if v, ok := c[e.Name]; ok {
			return c.eval(v)
		}
	case *ast.ParenExpr:
		return c.eval(e.X)
	case *ast.CallExpr:
		return "(a value)", true // strconv.Itoa(…) joined in: one value, on its line
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			a, ok1 := c.eval(e.X)
			b, ok2 := c.eval(e.Y)
			return a + b, ok1 && ok2
		}
	}
	return "", false
}

var templateName = regexp.MustCompile(`\$\{(\w+)\}`)

// fill puts in each ${Name} that names a string constant of the package (a Lua helper) its text, as
// newScript does; the other names stand for one value, on the line they are on.
func (c constExprs) fill(src string) string {
	for range 8 { // helpers may name helpers
		src = templateName.ReplaceAllStringFunc(src, func(m string) string {
			if v, ok := c.eval(c[m[2:len(m)-1]]); ok {
				return v
			}
			return m
		})
	}
	return src
}

// scriptLines counts the lines between a script's backquotes: its source less the line breaks that
// open and close it.
func scriptLines(src string) int {
	src = strings.TrimPrefix(strings.TrimSuffix(src, "\n"), "\n")
	return strings.Count(src, "\n") + 1
}

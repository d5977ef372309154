package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/architecture.md matches the code: every package of the module (outside internal/,
// examples/ and test-only trees) is named in it, and every file and every function or method
// it names on the paths a newcomer follows exists where it says.
func TestArchitectureMatchesTheCode(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	require.NoError(t, err)
	doc := string(raw)

	// Every package is in the drawing (by its path, or its last element under its parent).
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		base := d.Name()
		if rel != "." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "node_modules" ||
			rel == "internal" || rel == "examples" || rel == "integration" || rel == "bin" || rel == "docs" || rel == "deploy") {
			return filepath.SkipDir
		}
		goFiles, _ := filepath.Glob(filepath.Join(path, "*.go"))
		nonTest := 0
		for _, f := range goFiles {
			if !strings.HasSuffix(f, "_test.go") {
				nonTest++
			}
		}
		if rel == "." || nonTest == 0 {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if !strings.Contains(doc, rel) && !regexp.MustCompile(`\b`+regexp.QuoteMeta(base)+`\b`).MatchString(doc) {
			t.Errorf("package %s is not in docs/architecture.md", rel)
		}
		return nil
	})
	require.NoError(t, err)

	// Every file named on the paths exists.
	files := regexp.MustCompile("`((?:[a-z]+/)+[a-z_]+\\.go)`").FindAllStringSubmatch(doc, -1)
	require.NotEmpty(t, files)
	for _, m := range files {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1]))); err != nil {
			t.Errorf("docs/architecture.md names %s, which does not exist", m[1])
		}
	}

	// Every pkg.(*Type).Method, pkg.Func, pkg.Type and pkg.Method (of some type) named exists in
	// that package.
	decls := map[string]map[string]bool{}
	declsOf := func(pkg string) map[string]bool {
		if d, ok := decls[pkg]; ok {
			return d
		}
		d := map[string]bool{}
		paths, _ := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		fset := token.NewFileSet()
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				continue
			}
			for _, decl := range f.Decls {
				if gd, ok := decl.(*ast.GenDecl); ok && gd.Tok == token.TYPE {
					for _, spec := range gd.Specs {
						d[spec.(*ast.TypeSpec).Name.Name] = true
					}
				}
				fn, ok := decl.(*ast.FuncDecl)
				if !ok {
					continue
				}
				name := fn.Name.Name
				if fn.Recv != nil && len(fn.Recv.List) == 1 {
					typ := fn.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						name = id.Name + "." + name
					}
				}
				d[name] = true
				d["."+fn.Name.Name] = true // pkg.Method: a method of some type of pkg
			}
		}
		decls[pkg] = d
		return d
	}
	named := regexp.MustCompile("`([a-z]+)\\.(?:\\(\\*([A-Z][A-Za-z]*)\\)\\.)?([A-Z][A-Za-z]*)`").FindAllStringSubmatch(doc, -1)
	require.NotEmpty(t, named)
	for _, m := range named {
		pkg, typ, fn := m[1], m[2], m[3]
		if _, err := os.Stat(filepath.Join(root, pkg)); err != nil {
			continue // not a package of ours (mq port names such as courier.Kinds are checked elsewhere)
		}
		d := declsOf(pkg)
		ok := d[fn] || d["."+fn]
		if typ != "" {
			ok = d[typ+"."+fn]
		}
		if !ok {
			t.Errorf("docs/architecture.md names %s, which package %s does not declare", m[0], pkg)
		}
	}
}

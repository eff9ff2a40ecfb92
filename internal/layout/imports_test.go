// Package layout holds tests of the repository's shape: which folders may import which.
package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "pistil"

// moduleRoot is the repository root, found from this file's location.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// folderImports maps each top-level folder of the module to the top-level folders its
// non-test Go files import (itself excluded).
func folderImports(t *testing.T) map[string][]string {
	t.Helper()
	root := moduleRoot()
	edges := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		from := strings.Split(filepath.ToSlash(rel), "/")[0]
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if !strings.HasPrefix(p, module+"/") {
				continue
			}
			to := strings.Split(strings.TrimPrefix(p, module+"/"), "/")[0]
			if to == from {
				continue
			}
			if edges[from] == nil {
				edges[from] = map[string]bool{}
			}
			edges[from][to] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for from, tos := range edges {
		for to := range tos {
			out[from] = append(out[from], to)
		}
		slices.Sort(out[from])
	}
	return out
}

// No folder imports a folder that imports it back, directly or around a longer cycle:
// the arrows of DESIGN.md run one way (tests may import more, to run the real backends).
func TestNoFolderLevelImportCycle(t *testing.T) {
	g := folderImports(t)
	const (
		unvisited = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(n string)
	visit = func(n string) {
		state[n] = active
		stack = append(stack, n)
		for _, m := range g[n] {
			switch state[m] {
			case active:
				i := slices.Index(stack, m)
				t.Errorf("folder import cycle: %s -> %s", strings.Join(stack[i:], " -> "), m)
			case unvisited:
				visit(m)
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = done
	}
	names := make([]string, 0, len(g))
	for n := range g {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if state[n] == unvisited {
			visit(n)
		}
	}
}

// The arrows DESIGN.md names: the runtime never imports a backend, the compiler never
// imports the runtime, the server never imports a backend or a pass.
func TestImportRules(t *testing.T) {
	g := folderImports(t)
	forbidden := map[string][]string{
		"graph":  {"ops", "passes", "plan", "exec", "cpu", "cuda", "metal", "models", "serve", "cmd"},
		"ops":    {"passes", "plan", "exec", "cpu", "cuda", "metal", "models", "serve", "cmd"},
		"plan":   {"passes", "exec", "cpu", "cuda", "metal", "models", "serve", "cmd"},
		"passes": {"exec", "cpu", "cuda", "metal", "serve", "cmd"},
		"gpu":    {"passes", "exec", "cpu", "cuda", "metal", "models", "serve", "cmd"},
		"exec":   {"cpu", "cuda", "metal", "serve", "cmd"},
		"serve":  {"cpu", "cuda", "metal", "passes", "cmd"},
		"models": {"exec", "passes", "cpu", "cuda", "metal", "serve", "cmd"},
	}
	for from, bad := range forbidden {
		for _, to := range g[from] {
			if slices.Contains(bad, to) {
				t.Errorf("%s imports %s", from, to)
			}
		}
	}
}

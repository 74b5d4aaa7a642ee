package importrules

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the import graph in docs/architecture.md")

// graph writes the module's import graph, one line per package with the
// packages it imports directly, less the imports another of its imports
// already implies (the transitive reduction); tests are left out.
func graph(pkgs []pkg) string {
	deps := map[string][]string{}
	for _, p := range pkgs {
		if strings.HasPrefix(p.ImportPath, module) {
			deps[rel(p.ImportPath)] = p.Deps
		}
	}
	var lines []string
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		var direct []string
		for _, d := range p.Imports {
			if strings.HasPrefix(d, module+"/") {
				direct = append(direct, rel(d))
			}
		}
		var kept []string
		for _, b := range direct {
			implied := false
			for _, c := range direct {
				if c != b && slices.Contains(deps[c], module+"/"+b) {
					implied = true
					break
				}
			}
			if !implied {
				kept = append(kept, b)
			}
		}
		slices.Sort(kept)
		line := rel(p.ImportPath)
		if len(kept) > 0 {
			line += " -> " + strings.Join(kept, ", ")
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

const (
	graphDoc   = "../../docs/architecture.md"
	graphBegin = "<!-- the import graph: go test ./internal/importrules -run Graph -update writes it -->\n```\n"
	graphEnd   = "```\n"
)

// The import graph in docs/architecture.md is the module's: a change of
// imports fails this test until -update redraws it.
func TestGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs, err := decode(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	got := graph(pkgs)
	doc, err := os.ReadFile(graphDoc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, graphBegin)
	if i < 0 {
		t.Fatalf("%s: no %q block", graphDoc, strings.TrimSpace(graphBegin))
	}
	j := strings.Index(s[i+len(graphBegin):], graphEnd)
	if j < 0 {
		t.Fatalf("%s: the import graph's block does not end", graphDoc)
	}
	at, end := i+len(graphBegin), i+len(graphBegin)+j
	if s[at:end] == got {
		return
	}
	if !*update {
		t.Fatalf("%s: the import graph differs from the module's (go test ./internal/importrules -run Graph -update redraws it):\n%s", graphDoc, got)
	}
	if err := os.WriteFile(graphDoc, []byte(s[:at]+got+s[end:]), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGraphReduces(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	pkgs := []pkg{
		{ImportPath: m("a"), Imports: []string{m("b"), m("c"), "fmt"}, Deps: []string{m("b"), m("c"), "fmt"}},
		{ImportPath: m("b"), Imports: []string{m("c")}, Deps: []string{m("c")}},
		{ImportPath: m("c")},
	}
	if got, want := graph(pkgs), "a -> b\nb -> c\nc\n"; got != want {
		t.Errorf("graph = %q, want %q", got, want)
	}
}

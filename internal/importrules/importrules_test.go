package importrules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/m2n-project/m2n"

// pkg is what the rules read of `go list -json`.
type pkg struct {
	ImportPath string
	Imports    []string // direct, without tests
	Deps       []string // transitive, without tests
	CgoFiles   []string
}

// pure lists the packages that must build without cgo and never reach
// native: a path, or a prefix ending in "/...".
var pure = []string{"model/...", "ir", "program", "hostexec", "plan", "plan/...", "sim", "evaluate", "reports", "calibrate"}

// reads lists, for the packages whose reach is bounded, every package of
// the module they may reach (transitively; a prefix ending in "/..."):
// the simulator reads the Schedule IR, the executor's program of it and
// the models, never the planner; the IR and the host executor read the
// models; the program reads the IR.
var reads = map[string][]string{
	"sim":      {"ir", "program", "model/..."},
	"ir":       {"model/..."},
	"program":  {"ir", "model/..."},
	"hostexec": {"ir", "model/..."},
}

// notImports lists packages a package must not import directly: reports
// prints records, it does not plan (it reaches the planner only through
// evaluate, which fills the records).
var notImports = map[string][]string{
	"reports": {"plan"},
}

func rel(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

// matches reports whether a module-relative path is one of the list's
// paths or under one of its "/..." prefixes.
func matches(r string, list []string) bool {
	for _, p := range list {
		if base, ok := strings.CutSuffix(p, "/..."); ok {
			if strings.HasPrefix(r, base+"/") {
				return true
			}
		} else if r == p {
			return true
		}
	}
	return false
}

func isPure(path string) bool { return matches(rel(path), pure) }

// violations lists every broken rule among the module's packages.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		r := rel(p.ImportPath)
		if len(p.CgoFiles) > 0 && r != "native" && !strings.HasPrefix(r, "native/") {
			out = append(out, fmt.Sprintf("%s uses cgo (%s): only native (and its C ABI, native/capi) may", r, strings.Join(p.CgoFiles, ", ")))
		}
		for _, d := range p.Deps {
			if !strings.HasPrefix(d, module) {
				continue
			}
			dr := rel(d)
			if isPure(p.ImportPath) && (dr == "native" || strings.HasPrefix(dr, "native/")) {
				out = append(out, fmt.Sprintf("%s reaches native: the pure core never touches a device", r))
			}
			if allowed, ok := reads[r]; ok && !matches(dr, allowed) {
				out = append(out, fmt.Sprintf("%s reaches %s: it may reach only %s", r, dr, strings.Join(allowed, ", ")))
			}
		}
		for _, d := range p.Imports {
			if dr := rel(d); strings.HasPrefix(d, module) && matches(dr, notImports[r]) {
				out = append(out, fmt.Sprintf("%s imports %s: it must not", r, dr))
			}
		}
	}
	return out
}

// decode reads the stream of JSON objects `go list -json` writes.
func decode(r io.Reader) ([]pkg, error) {
	dec := json.NewDecoder(r)
	var pkgs []pkg
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			return pkgs, nil
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
}

func TestImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps,CgoFiles", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs, err := decode(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[rel(p.ImportPath)] = true
	}
	for _, want := range []string{"native", "sim", "plan", "ir", "program", "hostexec", "evaluate", "reports", "model/topo"} {
		if !seen[want] {
			t.Fatalf("go list did not list %s: the check would check nothing", want)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// Each rule fails on a module that breaks it.
func TestViolations(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	for _, tc := range []struct {
		name string
		pkgs []pkg
		want string
	}{
		{"pure reaches native", []pkg{{ImportPath: m("reports"), Deps: []string{m("evaluate"), m("native")}}}, "reports reaches native"},
		{"model reaches native", []pkg{{ImportPath: m("model/topo"), Deps: []string{m("native")}}}, "model/topo reaches native"},
		{"sim imports the planner", []pkg{{ImportPath: m("sim"), Deps: []string{m("ir"), m("plan")}}}, "sim reaches plan"},
		{"sim imports the host executor", []pkg{{ImportPath: m("sim"), Deps: []string{m("hostexec")}}}, "sim reaches hostexec"},
		{"sim imports evaluate", []pkg{{ImportPath: m("sim"), Deps: []string{m("evaluate")}}}, "sim reaches evaluate"},
		{"the IR imports the planner", []pkg{{ImportPath: m("ir"), Deps: []string{m("plan")}}}, "ir reaches plan"},
		{"the IR imports the program", []pkg{{ImportPath: m("ir"), Deps: []string{m("program")}}}, "ir reaches program"},
		{"the program imports the planner", []pkg{{ImportPath: m("program"), Deps: []string{m("ir"), m("plan")}}}, "program reaches plan"},
		{"the host executor imports the program", []pkg{{ImportPath: m("hostexec"), Deps: []string{m("program")}}}, "hostexec reaches program"},
		{"reports imports the planner", []pkg{{ImportPath: m("reports"), Imports: []string{m("plan")}, Deps: []string{m("plan")}}}, "reports imports plan"},
		{"cgo outside native", []pkg{{ImportPath: m("sim"), CgoFiles: []string{"fast.go"}}}, "sim uses cgo (fast.go)"},
	} {
		got := violations(tc.pkgs)
		if len(got) != 1 || !strings.Contains(got[0], tc.want) {
			t.Errorf("%s: %q, want one violation containing %q", tc.name, got, tc.want)
		}
	}
	ok := []pkg{
		{ImportPath: m("sim"), Deps: []string{m("ir"), m("program"), m("model/topo")}},
		{ImportPath: m("native"), Deps: []string{m("ir")}, CgoFiles: []string{"cuda_cgo.go"}},
		{ImportPath: m("reports"), Imports: []string{m("evaluate")}, Deps: []string{m("evaluate"), m("plan")}},
		{ImportPath: m("cmd/m2n"), Deps: []string{m("native"), m("plan"), m("sim")}},
		{ImportPath: m("evaluate"), Deps: []string{m("plan"), m("sim")}},
	}
	if got := violations(ok); len(got) != 0 {
		t.Errorf("a module that keeps the rules: %q", got)
	}
}

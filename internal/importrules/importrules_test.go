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
var pure = []string{"model/...", "plan", "plan/...", "sim", "evaluate", "reports", "calibrate"}

func rel(path string) string { return strings.TrimPrefix(strings.TrimPrefix(path, module), "/") }

func isPure(path string) bool {
	r := rel(path)
	for _, p := range pure {
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

// violations lists every broken rule among the module's packages.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) {
			continue
		}
		r := rel(p.ImportPath)
		if len(p.CgoFiles) > 0 && r != "native" {
			out = append(out, fmt.Sprintf("%s uses cgo (%s): only native may", r, strings.Join(p.CgoFiles, ", ")))
		}
		for _, d := range p.Deps {
			dr := rel(d)
			switch {
			case isPure(p.ImportPath) && strings.HasPrefix(d, module) && (dr == "native" || strings.HasPrefix(dr, "native/")):
				out = append(out, fmt.Sprintf("%s reaches native: the pure core never touches a device", r))
			case (r == "sim" || r == "plan/ir" || r == "plan/program") && strings.HasPrefix(d, module) && (dr == "plan" || strings.HasPrefix(dr, "plan/") && dr != "plan/ir" && dr != "plan/program"):
				out = append(out, fmt.Sprintf("%s reaches the planner (%s): it reads the Schedule IR (plan/ir) and the executor's program of it (plan/program) only", r, dr))
			case r == "plan/ir" && dr == "plan/program":
				out = append(out, fmt.Sprintf("%s reaches %s: the program is computed from the IR, not the other way", r, dr))
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
	for _, want := range []string{"native", "sim", "plan", "plan/ir", "evaluate", "reports", "model/topo"} {
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
		{"sim imports the planner", []pkg{{ImportPath: m("sim"), Deps: []string{m("plan/ir"), m("plan")}}}, "sim reaches the planner (plan)"},
		{"sim imports the host executor", []pkg{{ImportPath: m("sim"), Deps: []string{m("plan/hostexec")}}}, "sim reaches the planner (plan/hostexec)"},
		{"the IR imports the planner", []pkg{{ImportPath: m("plan/ir"), Deps: []string{m("plan")}}}, "plan/ir reaches the planner"},
		{"the IR imports the program", []pkg{{ImportPath: m("plan/ir"), Deps: []string{m("plan/program")}}}, "plan/ir reaches plan/program"},
		{"the program imports the planner", []pkg{{ImportPath: m("plan/program"), Deps: []string{m("plan/ir"), m("plan")}}}, "plan/program reaches the planner (plan)"},
		{"cgo outside native", []pkg{{ImportPath: m("sim"), CgoFiles: []string{"fast.go"}}}, "sim uses cgo (fast.go)"},
	} {
		got := violations(tc.pkgs)
		if len(got) != 1 || !strings.Contains(got[0], tc.want) {
			t.Errorf("%s: %q, want one violation containing %q", tc.name, got, tc.want)
		}
	}
	ok := []pkg{
		{ImportPath: m("sim"), Deps: []string{m("plan/ir"), m("model/topo")}},
		{ImportPath: m("native"), Deps: []string{m("plan/ir")}, CgoFiles: []string{"cuda_cgo.go"}},
		{ImportPath: m("cmd/m2n"), Deps: []string{m("native"), m("plan"), m("sim")}},
		{ImportPath: m("evaluate"), Deps: []string{m("plan"), m("sim")}},
	}
	if got := violations(ok); len(got) != 0 {
		t.Errorf("a module that keeps the rules: %q", got)
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// golden compares a command's exit status, stdout and stderr with
// testdata/golden/NAME.golden, as TestGolden does; -update rewrites it.
func golden(t *testing.T, name string, args ...string) {
	t.Helper()
	stdout, stderr, code := run(t, args...)
	got := fmt.Sprintf("$ m2n %s\nexit %d\n-- stdout --\n%s-- stderr --\n%s", strings.Join(args, " "), code, stdout, stderr)
	path := filepath.Join("testdata", "golden", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it)\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// The small command-line rules of issue 13: empty --route values, the
// union of repeated --point values, version --json.
func TestGoldenCLI(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"route-empty", []string{"plan", "--route", "", "paper-ffn-moe"}},
		{"route-empty-name", []string{"plan", "--route", ",", "paper-ffn-moe"}},
		{"route-trailing-comma", []string{"sim", "--route", "flat,", "paper-ffn-moe"}},
		{"point-union", []string{"sim", "--route", "flat", "--point", "rho=2", "--point", "rho=8", "paper-ffn-moe"}},
		{"point-union-unmatched", []string{"plan", "--point", "rho=2", "--point", "rho=3", "paper-ffn-moe"}},
		{"version", []string{"version"}},
		{"version-json", []string{"version", "--json"}},
		{"version-args", []string{"version", "extra"}},
	} {
		t.Run(tc.name, func(t *testing.T) { golden(t, tc.name, tc.args...) })
	}
}

// A usage error's last stderr line is the message itself; the hint comes
// first. Other errors print the message alone.
func TestErrorLastLine(t *testing.T) {
	_, stderr, code := run(t, "plan", "--frob")
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if code != exitUsage || len(lines) != 2 || !strings.Contains(lines[1], "-frob") || !strings.Contains(lines[0], "m2n help") {
		t.Errorf("usage error: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = run(t, "plan", "testdata/scenarios/nope.toml")
	if code != exitError || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "m2n: ") {
		t.Errorf("error: exit %d, stderr %q", code, stderr)
	}
}

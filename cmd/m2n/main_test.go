package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// run invokes the CLI as a user would and returns what it printed.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = Main(context.Background(), args, &o, &e)
	return o.String(), e.String(), code
}

// TestGolden runs commands and compares exit status, stdout and stderr with
// testdata/golden/NAME.golden; `go test -update` rewrites them.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"help", []string{"help"}},
		{"plan-help", []string{"plan", "--help"}},
		{"plan-paper", []string{"plan", "paper-ffn-moe"}},
		{"plan-paper-json", []string{"plan", "--json", "paper-ffn-moe"}},
		{"plan-uneven", []string{"plan", "testdata/scenarios/uneven.toml"}},
		{"unknown-command", []string{"frobnicate"}},
		{"unknown-flag", []string{"plan", "--frob"}},
		{"missing-scenario", []string{"plan", "testdata/scenarios/nope.toml"}},
		{"bad-key", []string{"plan", "testdata/scenarios/bad-key.toml"}},
		{"bad-shard-dim", []string{"plan", "testdata/scenarios/bad-shard-dim.toml"}},
		{"two-scenarios", []string{"plan", "a.toml", "b.toml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, tc.args...)
			got := fmt.Sprintf("$ m2n %s\nexit %d\n-- stdout --\n%s-- stderr --\n%s", strings.Join(tc.args, " "), code, stdout, stderr)
			path := filepath.Join("testdata", "golden", tc.name+".golden")
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
		})
	}
}

package main

import (
	"bytes"
	"context"
	"flag"
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
		{"plan-uneven-check", []string{"plan", "--check", "testdata/scenarios/uneven.toml"}},
		{"plan-uneven-check-json", []string{"plan", "--check", "--json", "--route", "flat", "testdata/scenarios/uneven.toml"}},
		{"plan-check-skipped", []string{"plan", "--check", "--route", "flat,hierarchical", "--point", "rho=2", "paper-ffn-moe"}},
		{"plan-check-skipped-json", []string{"plan", "--check", "--json", "--route", "flat", "--point", "rho=2", "paper-ffn-moe"}},
		{"plan-ir-needs-one", []string{"plan", "--ir", "x.json", "paper-ffn-moe"}},
		{"plan-unknown-route", []string{"plan", "--route", "teleport", "paper-ffn-moe"}},
		{"plan-bad-chunk", []string{"plan", "--chunk", "0 B", "paper-ffn-moe"}},
		{"plan-bad-staging-cap", []string{"plan", "--staging-cap", "lots", "paper-ffn-moe"}},
		{"plan-staging-cap-check", []string{"plan", "--check", "--staging-cap", "64 KiB", "testdata/scenarios/workload-tiny.toml"}},
		{"sim-staging-cap", []string{"sim", "--staging-cap", "64 KiB", "testdata/scenarios/workload-tiny.toml"}},
		{"plan-bad-point", []string{"plan", "--point", "rho=3", "paper-ffn-moe"}},
		{"verify-missing", []string{"verify", "testdata/nope.json"}},
		{"sim-paper", []string{"sim", "paper-ffn-moe"}},
		{"sim-paper-ideal", []string{"sim", "--ideal", "paper-ffn-moe"}},
		{"sim-uneven-json", []string{"sim", "--json", "testdata/scenarios/uneven.toml"}},
		{"sim-trace-needs-one", []string{"sim", "--trace", "t.json", "paper-ffn-moe"}},
		{"sim-ir-needs-topology", []string{"sim", "--ir", "x.json"}},
		{"sim-paper-2gpu-references", []string{"sim", "paper-2gpu"}},
		// A route past the staging cap is skipped with its reason; the others run.
		{"sim-skip-over-cap", []string{"sim", "--staging-cap", "1KiB", "paper-2gpu"}},
		{"sim-recommend", []string{"sim", "--recommend", "--staging-cap", "1KiB", "paper-2gpu"}},
		{"sim-skip-over-cap-json", []string{"sim", "--json", "--staging-cap", "1KiB", "--route", "flat,agbcast", "paper-2gpu"}},
		{"run-nccl-graph-refused", []string{"run", "--backend", "nccl", "--transport", "nccl", "--graph", "paper-2gpu"}},
		{"run-bad-transport", []string{"run", "--backend", "nccl", "--transport", "bogus", "paper-2gpu"}},
		{"sim-workload-tiny", []string{"sim", "testdata/scenarios/workload-tiny.toml"}},
		{"plan-workload-check", []string{"plan", "--check", "--route", "nemo-legacy,hierarchical", "testdata/scenarios/workload-tiny.toml"}},
		// FP8 in flight: every fp8 byte and scale checked on the host, each site.
		{"plan-fp8-check", []string{"plan", "--check", "--scale", "0.0625", "fp8-2gpu"}},
		{"workload-bad-ep", []string{"plan", "testdata/scenarios/workload-bad-ep.toml"}},
		{"report-help", []string{"report", "--help"}},
		{"report-needs-out", []string{"report", "paper-ffn-moe"}},
		{"report-sweep-bad-key", []string{"report", "testdata/scenarios/sweep-bad-key.toml", "-o", "testdata/never-written"}},
		{"report-sweep-bad-type", []string{"report", "testdata/scenarios/sweep-bad-type.toml", "-o", "testdata/never-written"}},
		{"report-out-not-a-folder", []string{"report", "--route", "flat", "--point", "rho=2", "paper-ffn-moe", "-o", "testdata/scenarios/uneven.toml/out"}},
	} {
		t.Run(tc.name, func(t *testing.T) { golden(t, tc.name, tc.args...) })
	}
}

// plan --ir writes a schedule that verify reads back and executes exactly.
func TestIRRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	if _, stderr, code := run(t, "plan", "--route", "hierarchical", "--point", "rho=4", "--scale", "0.0078125", "--ir", path, "paper-ffn-moe"); code != 0 {
		t.Fatalf("plan --ir: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := run(t, "verify", "--exec", path)
	if code != 0 || !strings.Contains(stdout, "0 wrong") {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
	// A file from another version is refused with a clear message.
	data, _ := os.ReadFile(path)
	bad := filepath.Join(t.TempDir(), "v9.json")
	os.WriteFile(bad, []byte(strings.Replace(string(data), `"version":1`, `"version":9`, 1)), 0o644)
	if _, stderr, code := run(t, "verify", bad); code != 1 || !strings.Contains(stderr, "version 9, but this m2n reads versions 1 to 3") {
		t.Fatalf("verify of version 9: exit %d: %s", code, stderr)
	}
}

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/ir"
)

// plan --check prints each schedule's row when its check ends: when a
// check starts, the table's header and the rows of every check before it
// are on stdout already.
func TestPlanCheckStreams(t *testing.T) {
	var o, e bytes.Buffer
	checks := 0
	hostRun = func(s *ir.Schedule, opt hostexec.Options) (*hostexec.Result, error) {
		if got := strings.Count(o.String(), " exact\n"); got != checks || !strings.Contains(o.String(), "max staging  check\n") {
			t.Errorf("check %d starts with %d checked rows printed (want %d); stdout:\n%s", checks, got, checks, o.String())
		}
		checks++
		return hostexec.Run(s, opt)
	}
	t.Cleanup(func() { hostRun = hostexec.Run })
	if code := Main(context.Background(), []string{"plan", "--check", "testdata/scenarios/uneven.toml"}, &o, &e); code != 0 {
		t.Fatalf("exit %d: %s", code, e.String())
	}
	if checks != 4 || strings.Count(o.String(), " exact\n") != 4 {
		t.Errorf("%d checks; stdout:\n%s", checks, o.String())
	}
}

// verify --exec --json prints wrong_bytes when it is 0, as docs/cli.md says.
func TestVerifyJSONWrongBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	if _, stderr, code := run(t, "plan", "--ir", path, "--route", "agbcast", "testdata/scenarios/uneven.toml"); code != 0 {
		t.Fatalf("plan --ir: exit %d: %s", code, stderr)
	}
	stdout, stderr, code := run(t, "verify", "--exec", "--json", path)
	if code != 0 || !strings.Contains(stdout, `"checked_bytes": 840,`) || !strings.Contains(stdout, `"wrong_bytes": 0`) {
		t.Errorf("verify --exec --json: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
}

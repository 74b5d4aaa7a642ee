package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/plan/hostexec"
	"github.com/m2n-project/m2n/plan/ir"
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

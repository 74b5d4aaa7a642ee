package main

import (
	"io"
	"strings"
	"testing"
)

// pretendTerminal makes every stderr a terminal for the rest of the test.
func pretendTerminal(t *testing.T) {
	t.Helper()
	was := isTerminal
	isTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { isTerminal = was })
}

// Progress goes to stderr on a terminal only: never off one, never with
// --json, and it changes nothing on stdout.
func TestProgressOnTerminalOnly(t *testing.T) {
	for _, tc := range []struct {
		args []string
		what string
	}{
		{[]string{"sim", "--route", "flat,hierarchical", "--point", "rho=2", "paper-ffn-moe"}, "m2n sim"},
		{[]string{"plan", "--point", "rho=2", "paper-ffn-moe"}, "m2n plan"},
		{[]string{"report", "--route", "hierarchical", "--scale", "0.0625", "paper-ffn-moe", "-o", t.TempDir()}, "m2n report"},
	} {
		name := tc.args[0]
		plainOut, plainErr, plainCode := run(t, tc.args...)
		if plainErr != "" {
			t.Errorf("%s off a terminal wrote to stderr: %q", name, plainErr)
		}
		jsonArgs := append([]string{tc.args[0], "--json"}, tc.args[1:]...)
		t.Run(name, func(t *testing.T) {
			pretendTerminal(t)
			stdout, stderr, code := run(t, tc.args...)
			if code != plainCode || stdout != plainOut {
				t.Errorf("on a terminal: exit %d, stdout differs from the plain run's (exit %d)", code, plainCode)
			}
			if !strings.Contains(stderr, tc.what) || !strings.Contains(stderr, "100 %") {
				t.Errorf("on a terminal, stderr shows no progress: %q", stderr)
			}
			if _, stderr, _ := run(t, jsonArgs...); stderr != "" {
				t.Errorf("with --json on a terminal, stderr is %q", stderr)
			}
		})
	}
}

// A failure on a terminal clears the progress lines before the message,
// which stays the last line.
func TestProgressClearedBeforeError(t *testing.T) {
	pretendTerminal(t)
	_, stderr, code := run(t, "report", "--route", "flat", "--point", "rho=2", "paper-ffn-moe", "-o", "testdata/scenarios/uneven.toml/out")
	if code != exitError || !strings.HasSuffix(stderr, "\n") {
		t.Fatalf("exit %d: %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "m2n: -o ") {
		t.Errorf("last line %q, want the error", last)
	}
}

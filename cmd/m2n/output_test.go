package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/ir"
)

// "-" writes an output file to stdout, alone: no table after it, and not
// with --json or a second "-".
func TestOutputToStdout(t *testing.T) {
	stdout, stderr, code := run(t, "plan", "--ir", "-", "--route", "flat", "testdata/scenarios/uneven.toml")
	if code != 0 {
		t.Fatalf("plan --ir -: exit %d: %s", code, stderr)
	}
	if _, err := ir.Decode(strings.NewReader(stdout)); err != nil {
		t.Errorf("plan --ir -: stdout is not a schedule alone: %v\n%s", err, stdout)
	}
	if _, err := os.Lstat("-"); err == nil {
		t.Error("plan --ir -: a file named - was made")
	}
	stdout, stderr, code = run(t, "sim", "--flows", "-", "--route", "flat", "testdata/scenarios/uneven.toml")
	if code != 0 || !json.Valid([]byte(stdout)) {
		t.Errorf("sim --flows -: exit %d, stderr %s; stdout is not the flows alone: %.200q", code, stderr, stdout)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--ir", "-", "--json", "--route", "flat", "testdata/scenarios/uneven.toml"}, "--ir - and --json both write to the standard output"},
		{[]string{"sim", "--trace", "-", "--flows", "-", "--route", "flat", "testdata/scenarios/uneven.toml"}, "--trace and --flows are all - (the standard output)"},
		{[]string{"report", "-o", "-", "testdata/scenarios/uneven.toml"}, "-o -: a report is several files"},
	} {
		_, stderr, code := run(t, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("m2n %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stderr, exitUsage, tc.want)
		}
	}
}

// --ir and --trace write through a symbolic link to its target, and a
// path they cannot write is an error naming the flag and the path.
func TestOutputThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.json")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink("target.json", link); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"plan", "--ir", link, "--route", "flat", "testdata/scenarios/uneven.toml"},
		{"sim", "--trace", link, "--route", "flat", "testdata/scenarios/uneven.toml"},
	} {
		if _, stderr, code := run(t, args...); code != 0 {
			t.Fatalf("m2n %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("m2n %s replaced the link", strings.Join(args, " "))
		}
		if b, _ := os.ReadFile(target); !bytes.HasPrefix(b, []byte("{")) {
			t.Errorf("m2n %s: the link's target holds %.40q", strings.Join(args, " "), b)
		}
	}
	bad := filepath.Join(target, "sub.json")
	_, stderr, code := run(t, "sim", "--flows", bad, "--route", "flat", "testdata/scenarios/uneven.toml")
	if want := "m2n: --flows: cannot write " + bad + ": not a directory\n"; code != 1 || stderr != want {
		t.Errorf("sim --flows under a file: exit %d, stderr %q, want %q", code, stderr, want)
	}
}

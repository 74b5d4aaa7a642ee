package main

import (
	"os"
	"path/filepath"
	"testing"
)

// m2n sim and m2n report print the same bytes whatever -j is: the records
// come back in job order, however the simulations interleave.
func TestParallelSameAsSerial(t *testing.T) {
	// Every route at every point of a sweep (scaled down to stay fast).
	args := []string{"nvl72-domains", "--scale", "0.125"}
	for _, mode := range [][]string{nil, {"--json"}} {
		serial, stderr, code := run(t, append(append([]string{"sim", "-j", "1"}, mode...), args...)...)
		if code != 0 {
			t.Fatalf("sim -j 1: exit %d: %s", code, stderr)
		}
		for _, j := range []string{"0", "2", "5"} {
			par, stderr, code := run(t, append(append([]string{"sim", "-j", j}, mode...), args...)...)
			if code != 0 {
				t.Fatalf("sim -j %s: exit %d: %s", j, code, stderr)
			}
			if par != serial {
				t.Errorf("sim -j %s %v printed\n%s\nand -j 1\n%s", j, mode, par, serial)
			}
		}
	}
	dir := t.TempDir()
	for _, j := range []string{"1", "3"} {
		if _, stderr, code := run(t, append([]string{"report", "-j", j, "-o", filepath.Join(dir, j)}, args...)...); code != 0 {
			t.Fatalf("report -j %s: exit %d: %s", j, code, stderr)
		}
	}
	for _, name := range []string{"report.md", "results.csv", "latency.svg", "speedup.svg"} {
		a, errA := os.ReadFile(filepath.Join(dir, "1", name))
		b, errB := os.ReadFile(filepath.Join(dir, "3", name))
		if errA != nil || errB != nil {
			t.Fatalf("%v, %v", errA, errB)
		}
		if string(a) != string(b) {
			t.Errorf("report -j 3 wrote another %s than -j 1", name)
		}
	}
	if _, stderr, code := run(t, "sim", "-j", "-1", "paper-2gpu"); code != 2 {
		t.Errorf("sim -j -1: exit %d, want 2 (usage): %s", code, stderr)
	}
}

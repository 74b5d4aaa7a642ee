package main

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Bad inputs of every kind get a clear error fast: each case exits
// non-zero with an m2n: error on stderr's last line naming what is wrong,
// without allocating more than 200 MB, and writes nothing. Devices stand
// in for a file given by mistake: they must not be read whole. The time
// ceiling (5 s) tells a capped read from an unbounded one: the largest cap
// read here, --from-samples' 64 MiB of /dev/zero, took 0.95-1.12 s on the
// shared 2-core VM (2026-12-01), over the 1 s the ceiling was; the memory
// bound is the tight one.
func TestBadInputsFast(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	measured, err := os.ReadFile("../../model/scenario/presets/hgx-h200-measured.toml")
	if err != nil {
		t.Fatal(err)
	}
	// The embedded preset with one value broken, whatever its measured value.
	breakOne := func(re, with string) string {
		loc := regexp.MustCompile(re).FindStringIndex(string(measured))
		if loc == nil {
			t.Fatalf("the embedded preset has no %s", re)
		}
		return string(measured[:loc[0]]) + with + string(measured[loc[1]:])
	}
	nanPreset := write("nan.toml", breakOne(`(?m)^pack_long = [0-9.]+$`, "pack_long = nan"))
	infPreset := write("inf.toml", breakOne(`(?m)^nvlink = "[^"]*"$`, `nvlink = "1e308 GB/s"`))
	tensor := func(extra string) string {
		return write("t"+time.Now().Format("150405.000000000")+".toml", `name = "t"
[topology]
preset = "hgx-h200"
[[tensors]]
name = "w"
shape = [256, 256]
dtype = "bf16"
`+extra+`
src = { shape = [2], ranks = "0-1", placements = ["S(0)"] }
dst = { shape = [2], ranks = "2-3", placements = ["R"] }
`)
	}
	workload := write("w.toml", `name = "w"
[topology]
preset = "hgx-h200"
[workload]
model = "/dev/zero"
dtype = "bf16"
[workload.trainer]
tp = 2
dp = 1
first_rank = 0
[workload.generator]
tp = 1
dp = 2
first_rank = 0
`)
	out := filepath.Join(dir, "out.json")
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(out, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"scenario is a device", []string{"sim", "/dev/zero"}, "more than 4194304 bytes: a scenario may have at most"},
		{"preset is a device", []string{"sim", "--model", "/dev/zero", "paper-2gpu"}, "more than 4194304 bytes: a preset may have at most"},
		{"schedule is a device", []string{"sim", "--topology", "hgx-h200", "--ir", "/dev/zero"}, "not JSON: it starts with byte 0x00"},
		{"verify a device", []string{"verify", "/dev/urandom"}, "not JSON"},
		{"config is a device", []string{"plan", workload}, "more than 1048576 bytes: a model's config may have at most"},
		{"preset not a file", []string{"sim", "--model", "nosuch", "paper-2gpu"}, "a measured preset file"},
		{"preset of per-gpu costs alone", []string{"sim", "--model", "testdata/pergpu-only.toml", "paper-2gpu"}, "[executor.one_process] is missing"},
		{"preset with a NaN", []string{"sim", "--model", nanPreset, "paper-2gpu"}, "executor.pack_long = NaN"},
		{"preset with an infinite rate", []string{"sim", "--model", infPreset, "paper-2gpu"}, `bandwidth "1e308 GB/s": too large`},
		{"empty dst_dtype", []string{"plan", tensor(`dst_dtype = ""`)}, `dst_dtype = "": give the destination's dtype`},
		{"block overflow", []string{"plan", tensor("dst_dtype = \"fp8_e4m3\"\nblock = [9223372036854775807, 128]")}, "each extent may be at most 2147483648"},
		{"one file twice", []string{"sim", "--route", "flat", "--point", "rho=2", "--trace", out, "--flows", out, "paper-ffn-moe"}, "are one file"},
		{"one file through a link", []string{"sim", "--route", "flat", "--point", "rho=2", "--trace", out, "--flows", link, "paper-ffn-moe"}, "are one file"},
		{"ops past the machine's memory", []string{"plan", "--max-ops", "1000000000000", "--chunk", "1 B", "--route", "hierarchical", "--point", "rho=2", "paper-ffn-moe"}, "of memory: use a larger --chunk"},
		{"ops over the limit", []string{"plan", "--max-ops", "10000000", "--chunk", "2 KiB", "--route", "hierarchical", "--point", "rho=2", "paper-ffn-moe"}, "limit 1e7"},
		{"bad transport", []string{"run", "--backend", "nccl", "--transport", "bogus", "paper-2gpu"}, `--transport "bogus" with --backend nccl`},
		{"topo argument", []string{"topo", "FILE"}, "topo takes no arguments"},
		{"calibrate argument", []string{"calibrate", "FILE"}, "calibrate takes no arguments"},
		{"calibrate base", []string{"calibrate", "--base", "nope"}, `--base: unknown topology preset "nope"`},
		{"calibrate into a device", []string{"calibrate", "--into", "/dev/zero"}, "--into: /dev/zero: more than"},
		{"calibrate samples from a device", []string{"calibrate", "--from-samples", "/dev/zero"}, "--from-samples: /dev/zero: more than"},
		{"calibrate samples both ways", []string{"calibrate", "--samples", "a.json", "--from-samples", "b.json"}, "--samples and --from-samples"},
		{"calibrate samples over the preset read", []string{"calibrate", "--samples", "p.toml", "--into", "p.toml", "--out", "q.toml"}, "give the samples a file of their own"},
		{"calibrate samples bad", []string{"calibrate", "--from-samples", "testdata/scenarios/uneven.toml"}, "--from-samples testdata/scenarios/uneven.toml: samples:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, stderr, code := run(t, tc.args...)
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			last := lines[len(lines)-1]
			if code == 0 || !strings.HasPrefix(last, "m2n: ") || !strings.Contains(last, tc.want) {
				t.Errorf("exit %d, last line %q; want a non-zero exit and an m2n: error containing %q", code, last, tc.want)
			}
			if took > 5*time.Second {
				t.Errorf("took %v; want under 5 s", took)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 200<<20 {
				t.Errorf("allocated %d MB; want under 200 MB", alloc>>20)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s was written", out)
			}
		})
	}
}

package scenario

import (
	"slices"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/model/units"
)

// Every embedded measured preset parses, is listed, and has what a measured
// preset has: executor costs and a measurement for each of them.
func TestEmbeddedPresets(t *testing.T) {
	names := filePresetNames()
	if !slices.Contains(names, "hgx-h200-measured") || !slices.Contains(PresetNames(), "hgx-h200-measured") {
		t.Fatalf("measured presets %v, all %v", names, PresetNames())
	}
	for _, n := range names {
		data, _ := PresetFileData(n)
		doc, tp, err := ParsePreset(n+".toml", data)
		if err != nil {
			t.Fatal(err)
		}
		if tp.Preset != n || doc.Name != n {
			t.Errorf("%s: named %q / %q", n, tp.Preset, doc.Name)
		}
		if tp.Executor.IsZero() {
			t.Errorf("%s: no executor costs", n)
		}
		got := map[string]bool{}
		for _, m := range doc.Measurements {
			got[m.Constant] = true
			if m.Command == "" || m.Date == "" || m.Machine == "" || m.Fit == "" {
				t.Errorf("%s: %s lacks its command, date, machine or fit", n, m.Constant)
			}
		}
		for _, k := range []string{"memory", "nvlink", "executor.one_process.host_group", "executor.per_gpu.host_group", "executor.pack_long"} {
			if !got[k] {
				t.Errorf("%s: no measurement of %s", n, k)
			}
		}
	}
}

// A scenario sets executor costs over its preset; a ramp needs a time per
// size; a measured preset refuses what only a scenario sets.
func TestExecutorTable(t *testing.T) {
	base := `name = "x"
[topology]
preset = "hgx-h200"
[topology.executor]
pack_long = 0.9
[topology.executor.per_gpu]
host_group = "7 us"
ramp_bytes = ["8 MiB", "64 MiB"]
ramp_extra = ["0 us", "5 us"]
[meshes.a]
shape = [1]
ranks = "0"
[[tensors]]
name = "w"
shape = [4]
dtype = "bf16"
src = { mesh = "a", placements = ["R"] }
dst = { mesh = "a", placements = ["R"] }
`
	sc, err := Parse("x.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := sc.Points()
	x := ps[0].Topology.Executor
	if x.PackLong != 0.9 || x.Costs[1].HostGroup != 7*units.Microsecond || len(x.Costs[1].Ramp) != 2 || x.Costs[1].RampAt(64<<20) != 5*units.Microsecond {
		t.Errorf("read %+v", x)
	}
	bad := strings.Replace(base, `ramp_extra = ["0 us", "5 us"]`, `ramp_extra = ["0 us"]`, 1)
	if _, err := Parse("x.toml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "2 ramp_bytes but 1 ramp_extra") {
		t.Errorf("a ramp without its times: %v", err)
	}
	if _, _, err := ParsePreset("p.toml", []byte("name = \"p\"\n[topology]\npreset = \"hgx-h200\"\ndomains = 2\n")); err == nil || !strings.Contains(err.Error(), "no domains or placement") {
		t.Errorf("a preset with domains: %v", err)
	}
}

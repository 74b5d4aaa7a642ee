package scenario

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/model/units"
)

const minimal = `
name = "t"
[topology]
preset = "hgx-h200"
[meshes.a]
shape = [2]
ranks = "0-1"
[meshes.b]
shape = [2, 2]
first_rank = 8
[[tensors]]
name = "w"
shape = [8, 4]
dtype = "bf16"
src = { mesh = "a", placements = ["S(0)"] }
dst = { mesh = "b", placements = ["R", "S(1)"] }
`

func TestParseMinimal(t *testing.T) {
	s, err := Parse("t.toml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := s.Points()
	if err != nil || len(ps) != 1 {
		t.Fatalf("points %d, %v", len(ps), err)
	}
	p := ps[0]
	if p.Topology.Domains != 2 || p.Topology.GPUsPerDomain != 8 {
		t.Errorf("topology %d x %d, want 2 domains (rank 11 is in the second) x 8", p.Topology.Domains, p.Topology.GPUsPerDomain)
	}
	if got := p.Tensors[0].Dst.Mesh.Ranks; len(got) != 4 || got[0] != 8 || got[3] != 11 {
		t.Errorf("dst ranks %v", got)
	}
	if p.Label() != "-" {
		t.Errorf("label %q", p.Label())
	}
}

func TestShippedScenariosParse(t *testing.T) {
	files, _ := filepath.Glob("../../scenarios/*.toml")
	examples, _ := filepath.Glob("../../examples/*.toml") // the README's
	benches, _ := filepath.Glob("../../scripts/mechanisms/*.toml")
	if len(files) == 0 || len(examples) == 0 || len(benches) == 0 {
		t.Fatal("no scenarios found")
	}
	files = append(append(files, examples...), benches...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseWith(filepath.Base(f), data, builtinModels); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestPaperSweep(t *testing.T) {
	data, err := os.ReadFile("../../scenarios/paper-ffn-moe.toml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse("paper-ffn-moe.toml", data)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := s.Points()
	if len(ps) != 3 {
		t.Fatalf("%d points, want 3", len(ps))
	}
	for i, rho := range []int{2, 4, 8} {
		p := ps[i]
		if p.Label() != "rho="+strconv.Itoa(rho) {
			t.Errorf("point %d label %q", i, p.Label())
		}
		dst := p.Tensors[0].Dst
		if dst.Mesh.Shape[0] != rho || dst.Mesh.Shape[1] != 8 || dst.Mesh.Ranks[0] != 72 {
			t.Errorf("rho %d: dst mesh %v", rho, dst.Mesh)
		}
		if p.Topology.Domain(dst.Mesh.Ranks[0]) == p.Topology.Domain(p.Tensors[0].Src.Mesh.Ranks[0]) {
			t.Errorf("trainer and generator share a domain")
		}
		var refs int
		for _, r := range s.References {
			if r.Matches(p) {
				refs++
			}
		}
		if want := map[int]int{2: 3, 4: 3, 8: 2}[rho]; refs != want {
			t.Errorf("rho %d: %d references, want %d", rho, refs, want)
		}
	}
}

func TestSweepKinds(t *testing.T) {
	doc := minimal + `
[[sweep]]
key = "topology.nic"
values = ["50 GB/s", "100 GB/s"]
[[sweep]]
key = "tensors[0].shape"
values = [[8, 4], [16, 4], [32, 4]]
`
	s, err := Parse("t.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := s.Points()
	if len(ps) != 6 {
		t.Fatalf("%d points, want 6", len(ps))
	}
	if ps[5].Topology.NIC != units.GBps(100) || ps[5].Tensors[0].Src.Shape[0] != 32 {
		t.Errorf("last point: nic %v, shape %v", ps[5].Topology.NIC, ps[5].Tensors[0].Src.Shape)
	}
	if ps[0].Topology.NIC != units.GBps(50) || ps[0].Tensors[0].Src.Shape[0] != 8 {
		t.Errorf("first point: nic %v, shape %v", ps[0].Topology.NIC, ps[0].Tensors[0].Src.Shape)
	}
	if got := ps[4].Label(); got != "topology.nic=100 GB/s, tensors[0].shape=[16 4]" {
		t.Errorf("label %q", got)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		err  string
	}{
		{"unknown top key", minimal + "bogus = 1\n", `t.toml:17: unknown key "tensors.bogus"`},
		{"unknown inline key", strings.Replace(minimal, `placements = ["S(0)"]`, `placemnts = ["S(0)"]`, 1), `t.toml:15: unknown key "tensors.src.placemnts"`},
		{"unknown table key", strings.Replace(minimal, "preset = \"hgx-h200\"", "preset = \"hgx-h200\"\nnic_gbps = 5", 1), `t.toml:5: unknown key "topology.nic_gbps"`},
		{"shard dim", strings.Replace(minimal, `"S(0)"`, `"S(2)"`, 1), "tensors[0] (w).src: placements[0] = S(2): shard dim out of range"},
		{"bad placement", strings.Replace(minimal, `"S(0)"`, `"Sh(0)"`, 1), `placement "Sh(0)"`},
		{"mesh vs ranks", strings.Replace(minimal, `ranks = "0-1"`, `ranks = "0-2"`, 1), "meshes.a: mesh shape [2] has 2 positions but the rank list has 3 ranks"},
		{"rank twice", strings.Replace(minimal, `ranks = "0-1"`, `ranks = "1,1"`, 1), "rank 1 appears twice"},
		{"dtype", strings.Replace(minimal, `"bf16"`, `"bf17"`, 1), `tensors[0] (w).dtype: unknown dtype "bf17"`},
		{"zero size", strings.Replace(minimal, `[8, 4]`, `[8, 0]`, 1), "shape[1] = 0: must be positive"},
		{"negative size", strings.Replace(minimal, `[8, 4]`, `[-8, 4]`, 1), "shape[0] = -8: must be positive"},
		{"unknown mesh", strings.Replace(minimal, `mesh = "a"`, `mesh = "z"`, 1), `mesh = "z": no such mesh`},
		{"preset", strings.Replace(minimal, `"hgx-h200"`, `"dgx-z"`, 1), `unknown topology preset "dgx-z"`},
		{"bandwidth unit", strings.Replace(minimal, "preset = \"hgx-h200\"", "preset = \"hgx-h200\"\nnic = 50", 1), `t.toml:5: topology.nic: bandwidth "50"`},
		{"bandwidth zero", strings.Replace(minimal, "preset = \"hgx-h200\"", "preset = \"hgx-h200\"\nnic = \"0 GB/s\"", 1), "nic = 0 GB/s: must be positive"},
		{"too few domains", strings.Replace(minimal, "preset = \"hgx-h200\"", "preset = \"hgx-h200\"\ndomains = 1", 1), "rank 8 runs on GPU 8, but the topology has 8 GPUs"},
		{"sweep missing key", minimal + "[[sweep]]\nkey = \"topology.nick\"\nvalues = [1]\n", `key "topology.nick": no key "nick" here`},
		{"sweep wrong type", minimal + "[[sweep]]\nkey = \"tensors[0].shape\"\nvalues = [\"big\"]\n", `key "tensors[0].shape"`},
		{"sweep length", minimal + "[[sweep]]\nname = \"x\"\nvalues = [1, 2]\n[sweep.set]\n\"topology.domains\" = [2]\n", `has 1 values but values has 2`},
		{"syntax", minimal + "[[tensors]\n", "t.toml:"},
		{"no name", strings.Replace(minimal, `name = "t"`, "", 1), "name: missing"},
		{"bare chunk", strings.Replace(minimal, `name = "t"`, "name = \"t\"\nchunk = 4194304", 1), `t.toml:3: chunk: size 4194304: a bare number; give a unit, as in "4 MiB" or "0 B"`},
		{"chunk without unit", strings.Replace(minimal, `name = "t"`, "name = \"t\"\nchunk = \"4194304\"", 1), `t.toml:3: chunk: size 4194304: a bare number`},
		{"chunk zero", strings.Replace(minimal, `name = "t"`, "name = \"t\"\nchunk = \"0 B\"", 1), `chunk = 0 B: must be positive`},
		{"unknown route", strings.Replace(minimal, `name = "t"`, "name = \"t\"\n\nroutes = [\"flat\", \"falt\"]", 1), `t.toml:4: routes[1] = "falt": unknown route (known: flat, agbcast, hierarchical, nemo-legacy)`},
		{"zero-axis mesh", strings.Replace(minimal, "shape = [2]\n", "shape = []\n", 1), `meshes.a: shape = []: a mesh needs at least one axis (one rank is [1])`},
		{"mesh without shape", strings.Replace(minimal, "shape = [2]\n", "", 1), `meshes.a: shape: missing; give the mesh's axes, e.g. [2, 8]`},
		{"scalar tensor", strings.Replace(minimal, "shape = [8, 4]", "shape = []", 1), `shape is empty (a scalar has shape [1])`},
		{"reference point", minimal + "[[reference]]\nroute = \"flat\"\npoint = { rho = 2 }\ntime_ms = 1.0\n", `no sweep is named "rho"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.toml", []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse() = %v\nwant an error containing %q", err, tc.err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(minimal)
	files, _ := filepath.Glob("../../scenarios/*.toml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("name = 'x'\n[[sweep]]\nkey = 'a[0][1].b'\nvalues = [1]")
	f.Add("a = { b = { c = [1, {d = 2}] } }\n'''\nx = 1\n'''")
	f.Fuzz(func(t *testing.T, doc string) {
		s, err := Parse("fuzz.toml", []byte(doc))
		if err != nil {
			return
		}
		if _, err := s.Points(); err != nil {
			t.Fatalf("Parse accepted a scenario whose points fail: %v", err)
		}
	})
}

func FuzzLocateKeys(f *testing.F) {
	f.Add(minimal)
	f.Add(`a."b.c" = { d = 1, e = { f = [1, 2] } }`)
	f.Fuzz(func(t *testing.T, doc string) {
		locateKeys(doc)
	})
}

package scenario

import (
	"errors"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/workload"
	"github.com/m2n-project/m2n/scenarios"
)

// builtinModels loads the models shipped with m2n, as the command line does.
func builtinModels(name string) (string, []byte, error) {
	if b, ok := scenarios.Model(name); ok {
		return name + ".json", b, nil
	}
	return "", nil, errors.New("no such model")
}

const dsv3 = `
name = "w"
[topology]
preset = "gb200-nvl72"
[topology.placement]
ranks = "0-255"
gpus = "0-63,72-135,144-207,216-279"
[workload]
model = "deepseek-v3"
dtype = "bf16"
[workload.trainer]
framework = "megatron"
pp = 8
ep = 16
dp = 16
stages = [7, 8, 8, 8, 8, 8, 8, 6]
first_rank = 0
[workload.generator]
framework = "vllm"
tp = 8
dp = 16
first_rank = 128
`

// A [workload] resolves to the model's tensors: DeepSeek-V3's 671 B
// parameters in bf16, in the scenario's layouts and ranks.
func TestWorkload(t *testing.T) {
	s, err := ParseWith("w.toml", []byte(dsv3), builtinModels)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := s.Points()
	p := ps[0]
	var total int64
	classes := map[string]int{}
	for _, x := range p.Tensors {
		total += x.Src.Bytes()
		classes[x.Class]++
	}
	if total != 2*671_026_419_200 {
		t.Errorf("%d bytes, want 2 x 671,026,419,200", total)
	}
	if classes[workload.ClassExperts] != 58*3 || classes[workload.ClassBucket] == 0 {
		t.Errorf("classes %v: want 174 stacked expert tensors and some buckets", classes)
	}
	if p.Topology.Domains != 4 {
		t.Errorf("%d domains, want 4 (generator rank 255 is on GPU 279)", p.Topology.Domains)
	}
	// A sweep over a workload key, and a rank list instead of first_rank.
	doc := strings.Replace(strings.Replace(dsv3, "first_rank = 128", `ranks = "128-255"`, 1), `preset = "gb200-nvl72"`, "preset = \"gb200-nvl72\"\ndomains = 4", 1) + `
[[sweep]]
name = "gdp"
values = [8, 16]
[sweep.set]
"workload.generator.dp" = [8, 16]
"workload.generator.ranks" = ["128-191", "128-255"]
`
	s, err = ParseWith("w.toml", []byte(doc), builtinModels)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ = s.Points()
	for i, want := range []int{64, 128} {
		for _, x := range ps[i].Tensors {
			if len(x.Dst.Mesh.Ranks) != want {
				t.Fatalf("point %d: %s on %d generator ranks, want %d", i, x.Name, len(x.Dst.Mesh.Ranks), want)
			}
		}
	}
}

func TestWorkloadErrors(t *testing.T) {
	broken := func(name string) (string, []byte, error) {
		b, _ := scenarios.Model("deepseek-v3")
		return "broken.json", []byte(strings.Replace(string(b), `"n_routed_experts": 256,`, "", 1)), nil
	}
	for _, tc := range []struct {
		name string
		doc  string
		load ModelLoader
		err  string
	}{
		{"ep", strings.Replace(dsv3, "ep = 16", "ep = 3", 1), nil, "workload.trainer.ep x etp = 3 x 1: does not divide the 16 ranks of a stage"},
		{"ep experts", strings.Replace(strings.Replace(dsv3, "ep = 16", "ep = 12", 1), "dp = 16\nstages", "dp = 24\nstages", 1), nil, "workload.trainer.ep = 12: does not divide the 256 routed experts (n_routed_experts)"},
		{"pp > layers", strings.Replace(strings.Replace(dsv3, "pp = 8", "pp = 64", 1), "stages = [7, 8, 8, 8, 8, 8, 8, 6]\n", "", 1), nil, "workload.trainer.pp = 64: more pipeline stages than the model's 61 layers"},
		{"stages sum", strings.Replace(dsv3, "[7, 8, 8, 8, 8, 8, 8, 6]", "[8, 8, 8, 8, 8, 8, 8, 6]", 1), nil, "workload.trainer.stages [8 8 8 8 8 8 8 6]: sum to 62 layers, but the model has 61"},
		{"tp heads", strings.Replace(dsv3, "tp = 8\ndp = 16", "tp = 6\ndp = 16", 1), nil, "workload.generator.tp = 6: does not divide num_attention_heads = 128"},
		{"missing key", dsv3, broken, `workload.model = "deepseek-v3": broken.json: n_routed_experts: missing; the deepseek_v3 family needs it`},
		{"no loader", dsv3, nil, "no model loader"},
		{"unknown model", strings.Replace(dsv3, `"deepseek-v3"`, `"gpt-9"`, 1), nil, `workload.model = "gpt-9": no such model`},
		{"dtype", strings.Replace(dsv3, `dtype = "bf16"`, `dtype = "bf17"`, 1), nil, `workload.dtype: unknown dtype "bf17"`},
		{"no dtype", strings.Replace(dsv3, "dtype = \"bf16\"\n", "", 1), nil, "workload.dtype: missing"},
		{"framework", strings.Replace(dsv3, `"megatron"`, `"deepspeed"`, 1), nil, `workload.trainer.framework = "deepspeed": m2n models "megatron" trainers`},
		{"generator framework", strings.Replace(dsv3, `"vllm"`, `"sglang"`, 1), nil, `workload.generator.framework = "sglang": m2n models "vllm" generators`},
		{"dp needed", strings.Replace(dsv3, "dp = 16\nstages", "stages", 1), nil, "workload.trainer.dp: missing; with first_rank, give dp (or list the ranks)"},
		{"ranks vs dp", strings.Replace(dsv3, "first_rank = 128", `ranks = "128-200"`, 1), nil, "workload.generator.ranks: 73 ranks is not a positive multiple of 8"},
		{"no trainer", dsv3[:strings.Index(dsv3, "[workload.trainer]")], nil, "workload.trainer: missing"},
		{"zero size", strings.Replace(dsv3, "pp = 8", "pp = 0", 1), nil, "workload.trainer.pp = 0: must be in [1,"},
		{"negative bucket", strings.Replace(dsv3, "dtype = \"bf16\"", "dtype = \"bf16\"\nbucket = \"-1 MiB\"", 1), nil, "bucket"},
		{"unknown key", strings.Replace(dsv3, "pp = 8", "pp = 8\nvpp = 2", 1), nil, `w.toml:14: unknown key "workload.trainer.vpp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			load := tc.load
			if load == nil && tc.name != "no loader" {
				load = builtinModels
			}
			_, err := ParseWith("w.toml", []byte(tc.doc), load)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseWith() = %v\nwant an error containing %q", err, tc.err)
			}
		})
	}
}

// dst_dtype = "fp8_e4m3" quantizes the generator's linear weights (block
// scales by default), sweeps like any key, and is refused with the field
// named where it cannot apply; --scale keeps every quantized shard in
// whole blocks.
func TestWorkloadFP8(t *testing.T) {
	doc := dsv3 + "\n[[sweep]]\nname = \"dst\"\nkey = \"workload.dst_dtype\"\nvalues = [\"bf16\", \"fp8_e4m3\"]\n"
	s, err := ParseWith("w.toml", []byte(doc), builtinModels)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := s.Points()
	if err != nil {
		t.Fatal(err)
	}
	count := func(p *Point) (n int) {
		for _, x := range p.Tensors {
			if x.Quant.On() {
				n++
				if x.Dst.DType != layout.FP8E4M3 || x.Quant.Block != layout.DefaultBlock || x.Quant.Scheme != layout.QuantBlock {
					t.Errorf("%s: dst %v, %v", x.Name, x.Dst.DType, x.Quant)
				}
			}
		}
		return n
	}
	if a, b := count(ps[0]), count(ps[1]); a != 0 || b < 500 {
		t.Errorf("quantized tensors: %d at dst=bf16, %d at dst=fp8_e4m3", a, b)
	}
	// --scale: the 2-D quantized weights keep dim 0 a multiple of 128 x
	// their shards (TP 8 on the generator: 1024).
	p := ps[1]
	if err := p.Scale(0.01); err != nil {
		t.Fatal(err)
	}
	for _, x := range p.Tensors {
		if x.Quant.On() {
			if err := layout.CheckBlocks(x.Dst, x.Quant); err != nil {
				t.Errorf("scaled %s %v: %v", x.Name, x.Dst.Shape, err)
			}
		}
	}
	for _, bad := range []struct{ add, want string }{
		{"dst_dtype = \"fp8_e5m2\"", `dst_dtype = "fp8_e5m2": a destination dtype other than the source's is "fp8_e4m3"`},
		{"dst_dtype = \"fp8_e4m3\"\nscales = \"row\"", `scales: unknown quantization scheme "row"`},
		{"dst_dtype = \"fp8_e4m3\"\nblock = [128]", "block = [128]: want [rows, cols], both positive"},
		{"block = [64, 64]", "scales, block: only with dst_dtype"},
	} {
		d := strings.Replace(dsv3, "dtype = \"bf16\"\n", "dtype = \"bf16\"\n"+bad.add+"\n", 1)
		s, err := ParseWith("w.toml", []byte(d), builtinModels)
		if err == nil {
			_, err = s.Points()
		}
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.add, err, bad.want)
		}
	}
}

// --scale shrinks a per-tensor quantized weight too (its block is the
// matrix, whatever its rows), keeping dim 0 whole shards on both sides.
func TestScalePerTensor(t *testing.T) {
	mesh := func(ranks ...int) layout.Mesh { return layout.Mesh{Shape: []int{len(ranks)}, Ranks: ranks} }
	src := layout.Layout{Shape: []int64{8192, 8192}, DType: layout.BF16, Mesh: mesh(0, 1), Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: []int64{8192, 8192}, DType: layout.FP8E4M3, Mesh: mesh(0, 1), Placements: []layout.Placement{layout.S(1)}}
	for _, q := range []layout.Quant{{Scheme: layout.QuantTensor}, {Scheme: layout.QuantChannel}, {Scheme: layout.QuantBlock, Block: layout.DefaultBlock}} {
		p := &Point{Tensors: []Tensor{{Name: "w", Src: src, Dst: dst, Quant: q}}}
		if err := p.Scale(0.01); err != nil {
			t.Fatal(err)
		}
		got := p.Tensors[0].Src.Shape[0]
		br, _ := q.Blocks([]int64{8192, 8192})
		if q.Scheme == layout.QuantTensor {
			br = 1
		}
		if want := (int64(82) + 2*br - 1) / (2 * br) * 2 * br; got != want {
			t.Errorf("%v: dim 0 scaled to %d, want %d", q, got, want)
		}
		if _, err := layout.LandingLayout(p.Tensors[0].Dst, q); err != nil {
			t.Errorf("%v: %v", q, err)
		}
	}
}

// --scale keeps shard scales a scale a shard: the block follows the
// shards' new size (dim 0 rounded to whole shards on both sides).
func TestScaleShardScales(t *testing.T) {
	mesh := func(ranks ...int) layout.Mesh { return layout.Mesh{Shape: []int{len(ranks)}, Ranks: ranks} }
	src := layout.Layout{Shape: []int64{8192, 8192}, DType: layout.BF16, Mesh: mesh(0, 1), Placements: []layout.Placement{layout.S(1)}}
	dst := layout.Layout{Shape: []int64{8192, 8192}, DType: layout.FP8E4M3, Mesh: mesh(0, 1, 2, 3), Placements: []layout.Placement{layout.S(0)}}
	q, err := layout.Quant{Scheme: layout.QuantShard}.ForLayout(dst)
	if err != nil || q.Block != [2]int64{2048, 8192} {
		t.Fatalf("resolved to %v, %v", q, err)
	}
	p := &Point{Tensors: []Tensor{{Name: "w", Src: src, Dst: dst, Quant: q}}}
	if err := p.Scale(0.01); err != nil {
		t.Fatal(err)
	}
	got := p.Tensors[0]
	if got.Dst.Shape[0] != 84 || got.Quant.Block != [2]int64{21, 8192} {
		t.Errorf("scaled to %v with %v, want 84 rows in blocks of 21 x 8192", got.Dst.Shape, got.Quant)
	}
	if land, err := layout.LandingLayout(got.Dst, got.Quant); err != nil || land.Placements[0] != layout.S(0) {
		t.Errorf("scaled: lands on %v, %v; want its own layout", land.Placements, err)
	}
}

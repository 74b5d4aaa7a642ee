package workload

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/scenarios"
)

func builtin(t testing.TB, name string) *Config {
	t.Helper()
	b, ok := scenarios.Model(name)
	if !ok {
		t.Fatalf("no built-in model %s", name)
	}
	c, err := ParseConfig(name+".json", b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The shipped configs give the published parameter counts: DeepSeek-V3's
// 671,026,419,200 in 45,395 tensors plus an MTP layer of 788 tensors
// (13.46 B, 11.61 B without its embedding and head); Qwen3-235B-A22B's
// 235.09 B; Llama 3.1's 405.85 B and 70.55 B. The framework weights (experts
// stacked, fused parameters split into parts) hold exactly the same
// elements and stand for every Hugging Face tensor once.
func TestParamCounts(t *testing.T) {
	for _, tc := range []struct {
		model           string
		tensors         int
		params          int64
		mtpTensors      int
		mtpParams       int64
		weights         int
		firstMoE, layer int
	}{
		{"deepseek-v3", 45395, 671_026_419_200, 788, 13_463_426_304, 1025, 3, 61},
		{"qwen3-235b-a22b", 36945, 235_093_634_560, 0, 0, 1131, 0, 94},
		{"llama-3.1-405b", 1137, 405_853_388_800, 0, 0, 1137, -1, 126},
		{"llama-3.1-70b", 723, 70_553_706_496, 0, 0, 723, -1, 80},
		// Kimi-K2: the deepseek_v3 family with 384 experts, 64 heads, one
		// dense layer and no MTP layer: 1.03 T parameters.
		{"kimi-k2", 69975, 1_026_408_232_448, 0, 0, 1035, 1, 61},
		// Families beside them, each against its checkpoint's published
		// size (the safetensors index's total_size, bf16: 2 bytes a
		// parameter): Qwen3-8B 16,381,470,720 bytes; Qwen2.5-7B (q, k, v
		// biases) 15,231,233,024; Mistral-7B-v0.1 14,483,464,192;
		// Mixtral-8x7B (8 experts in every layer, w1/w3/w2)
		// 93,405,585,408; DeepSeek-V2-Lite (MLA without q_lora_rank, 64
		// experts and 2 shared, no router bias) 31,412,968,448.
		{"qwen3-8b", 399, 8_190_735_360, 0, 0, 399, -1, 36},
		{"qwen2.5-7b", 339, 7_615_616_512, 0, 0, 339, -1, 28},
		{"mistral-7b", 291, 7_241_732_096, 0, 0, 291, -1, 32},
		{"mixtral-8x7b", 995, 46_702_792_704, 0, 0, 323, 0, 32},
		{"deepseek-v2-lite", 5291, 15_706_484_224, 0, 0, 377, 1, 27},
		// Gemma-2-9B: four norms a layer, the head tied to the embedding
		// (Gemma2Config's default): its published 9.24 B.
		{"gemma-2-9b", 464, 9_241_705_984, 0, 0, 464, -1, 42},
	} {
		t.Run(tc.model, func(t *testing.T) {
			c := builtin(t, tc.model)
			n, p := Count(c.Params())
			if n != tc.tensors || p != tc.params {
				t.Errorf("main model: %d tensors, %d params; want %d, %d", n, p, tc.tensors, tc.params)
			}
			mn, mp := Count(c.MTPParams())
			if mn != tc.mtpTensors || mp != tc.mtpParams {
				t.Errorf("MTP: %d tensors, %d params; want %d, %d", mn, mp, tc.mtpTensors, tc.mtpParams)
			}
			if tc.model == "deepseek-v3" {
				// README_WEIGHTS: 11.5 B unique MTP parameters without the
				// embedding and head it shares.
				if got := mp - 2*c.Vocab*c.Hidden; got != 11_610_068_224 {
					t.Errorf("MTP without embedding and head: %d", got)
				}
			}
			var mtpElems int64
			for _, w := range c.MTPWeights() {
				mtpElems += w.Elems()
				if w.Layer < c.Layers {
					t.Errorf("MTP weight %s in layer %d", w.Name, w.Layer)
				}
			}
			if mtpElems != tc.mtpParams {
				t.Errorf("MTP weights hold %d elements, want %d", mtpElems, tc.mtpParams)
			}
			ws := c.Weights()
			var elems int64
			hf := 0
			names := map[string]bool{}
			for _, w := range ws {
				elems += w.Elems()
				hf += w.HF
				if names[w.Name] {
					t.Errorf("weight %s listed twice", w.Name)
				}
				names[w.Name] = true
			}
			if len(ws) != tc.weights || elems != tc.params || hf != tc.tensors {
				t.Errorf("weights: %d holding %d elements of %d HF tensors; want %d, %d, %d", len(ws), elems, hf, tc.weights, tc.params, tc.tensors)
			}
			if c.Layers != tc.layer {
				t.Errorf("%d layers, want %d", c.Layers, tc.layer)
			}
			first := -1
			for l := range c.Layers {
				if c.MoELayer(l) {
					first = l
					break
				}
			}
			if first != tc.firstMoE {
				t.Errorf("first MoE layer %d, want %d", first, tc.firstMoE)
			}
		})
	}
}

// A key the family needs and the file lacks is an error naming the key;
// unknown keys are ignored.
func TestConfigErrors(t *testing.T) {
	dsv3, _ := scenarios.Model("deepseek-v3")
	qwen, _ := scenarios.Model("qwen3-235b-a22b")
	llama, _ := scenarios.Model("llama-3.1-70b")
	mixtral, _ := scenarios.Model("mixtral-8x7b")
	v2, _ := scenarios.Model("deepseek-v2-lite")
	qwen2, _ := scenarios.Model("qwen2.5-7b")
	edit := func(doc []byte, f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	drop := func(doc []byte, key string) []byte { return edit(doc, func(m map[string]any) { delete(m, key) }) }
	set := func(doc []byte, key string, v any) []byte { return edit(doc, func(m map[string]any) { m[key] = v }) }
	for _, tc := range []struct {
		name string
		doc  []byte
		err  string
	}{
		{"dsv3 experts", drop(dsv3, "n_routed_experts"), "c.json: n_routed_experts: missing; the deepseek_v3 family needs it"},
		{"dsv3 kv_lora_rank", drop(dsv3, "kv_lora_rank"), "kv_lora_rank: missing; the deepseek_v3 family needs it"},
		{"dsv3 first dense", drop(dsv3, "first_k_dense_replace"), "first_k_dense_replace: missing"},
		{"qwen experts", drop(qwen, "num_experts"), "num_experts: missing; the qwen3_moe family needs it"},
		{"qwen moe width", drop(qwen, "moe_intermediate_size"), "moe_intermediate_size: missing; the qwen3_moe family needs it"},
		{"llama hidden", drop(llama, "hidden_size"), "hidden_size: missing; the llama family needs it"},
		{"llama width", drop(llama, "intermediate_size"), "intermediate_size: missing; the llama family needs it"},
		{"no model_type", drop(llama, "model_type"), "model_type: missing"},
		{"unknown family", set(llama, "model_type", "gpt9"), `model_type "gpt9": not a family m2n knows`},
		{"not an integer", set(llama, "hidden_size", 81.5), "hidden_size = 81.5: want an integer"},
		{"a string", set(llama, "num_hidden_layers", "80"), `num_hidden_layers = "80": want an integer`},
		{"zero", set(llama, "num_attention_heads", 0), "num_attention_heads = 0: want an integer in [1,"},
		{"huge", set(llama, "vocab_size", 1e12), "vocab_size = 1000000000000: want an integer in [1,"},
		{"heads vs kv", set(llama, "num_key_value_heads", 7), "num_attention_heads = 64: not a multiple of num_key_value_heads = 7"},
		{"bias", set(llama, "attention_bias", true), "attention_bias = true: attention biases are not modeled"},
		{"not json", []byte("{"), "c.json: not a JSON object"},
		{"mixtral experts", drop(mixtral, "num_local_experts"), "num_local_experts: missing; the mixtral family needs it"},
		{"mixtral expert width", drop(mixtral, "intermediate_size"), "intermediate_size: missing; the mixtral family needs it"},
		{"deepseek_v2 rank", drop(v2, "kv_lora_rank"), "kv_lora_rank: missing; the deepseek_v2 family needs it"},
		{"qwen2 kv", set(qwen2, "num_key_value_heads", 5), "num_attention_heads = 28: not a multiple of num_key_value_heads = 5"},
		{"the families listed", set(llama, "model_type", "gpt9"), "(known: deepseek_v2, deepseek_v3, gemma2, llama, mistral, mixtral, qwen2, qwen3, qwen3_moe)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("c.json", tc.doc)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseConfig() = %v\nwant an error containing %q", err, tc.err)
			}
		})
	}
	// Extra keys are fine.
	if _, err := ParseConfig("c.json", set(llama, "some_new_key", map[string]any{"x": 1})); err != nil {
		t.Errorf("an unknown key: %v", err)
	}
}

// dsv3Spec is the dsv3-256 scenario's refit.
func dsv3Spec(t testing.TB) Spec {
	return Spec{
		Config: builtin(t, "deepseek-v3"), DType: layout.BF16, BucketBytes: DefaultBucketBytes,
		Trainer:   Megatron{TP: 1, CP: 1, DP: 16, PP: 8, EP: 16, ETP: 1, Stages: []int{7, 8, 8, 8, 8, 8, 8, 6}, Ranks: layout.RankRange(0, 128)},
		Generator: VLLM{TP: 8, DP: 16, EP: 1, Ranks: layout.RankRange(128, 128)},
	}
}

// The DeepSeek-V3 refit of the paper: each weight on its stage, in the
// frameworks' layouts.
func TestDeepSeekV3Layouts(t *testing.T) {
	spec := dsv3Spec(t)
	ts, err := spec.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Tensor{}
	var total int64
	for _, x := range ts {
		by[x.Name] = x
		total += x.Bytes()
	}
	if total != 2*671_026_419_200 {
		t.Errorf("%d bytes in all, want 2 x 671,026,419,200", total)
	}
	for _, tc := range []struct {
		name     string
		stage    int
		src, dst string
	}{
		{"model.embed_tokens.weight", 0, "[129280 7168] bf16 on [16] ranks 0-15 [R]", "[129280 7168] bf16 on [16 8] ranks 128-255 [R, S(0)]"},
		{"model.layers.3.mlp.experts.w13_weight[gate]", 0, "[256 2048 7168] bf16 on [16] ranks 0-15 [S(0)]", "[256 2048 7168] bf16 on [16 8] ranks 128-255 [R, S(1)]"},
		{"model.layers.7.mlp.experts.w2_weight", 1, "[256 7168 2048] bf16 on [16] ranks 16-31 [S(0)]", "[256 7168 2048] bf16 on [16 8] ranks 128-255 [R, S(2)]"},
		{"model.layers.10.self_attn.q_b_proj.weight", 1, "[24576 1536] bf16 on [16] ranks 16-31 [R]", "[24576 1536] bf16 on [16 8] ranks 128-255 [R, S(0)]"},
		{"model.layers.54.self_attn.o_proj.weight", 6, "[7168 16384] bf16 on [16] ranks 96-111 [R]", "[7168 16384] bf16 on [16 8] ranks 128-255 [R, S(1)]"},
		{"model.layers.1.mlp.gate_up_proj.weight[up]", 0, "[18432 7168] bf16 on [16] ranks 0-15 [R]", "[18432 7168] bf16 on [16 8] ranks 128-255 [R, S(0)]"},
		{"model.layers.60.mlp.shared_experts.down_proj.weight", 7, "[7168 2048] bf16 on [16] ranks 112-127 [R]", "[7168 2048] bf16 on [16 8] ranks 128-255 [R, S(1)]"},
		{"lm_head.weight", 7, "[129280 7168] bf16 on [16] ranks 112-127 [R]", "[129280 7168] bf16 on [16 8] ranks 128-255 [R, S(0)]"},
	} {
		x, ok := by[tc.name]
		if !ok {
			t.Errorf("%s: missing", tc.name)
			continue
		}
		if x.Stage != tc.stage || x.Src.String() != tc.src || x.Dst.String() != tc.dst {
			t.Errorf("%s: stage %d\n src %s\n dst %s\nwant stage %d\n src %s\n dst %s", tc.name, x.Stage, x.Src, x.Dst, tc.stage, tc.src, tc.dst)
		}
	}
	// Replicated weights (norms, router, q_a/kv_a) travel in buckets, one
	// series per stage; each stage's layers are its own.
	for _, name := range []string{"model.layers.3.self_attn.fused_qkv_a_proj.weight[q_a_proj]", "model.layers.3.mlp.gate.weight", "model.norm.weight"} {
		if _, ok := by[name]; ok {
			t.Errorf("%s: moves on its own, want it in a bucket", name)
		}
	}
	stageLayers := map[int]map[int]bool{}
	for _, x := range ts {
		if x.Class != ClassBucket {
			continue
		}
		if x.Bytes() > DefaultBucketBytes {
			t.Errorf("%s: %d bytes, more than the bucket size", x.Name, x.Bytes())
		}
		for _, m := range x.Members {
			var l int
			if _, err := fmt.Sscanf(m.Name, "model.layers.%d.", &l); err == nil {
				if stageLayers[x.Stage] == nil {
					stageLayers[x.Stage] = map[int]bool{}
				}
				stageLayers[x.Stage][l] = true
			}
		}
	}
	first := 0
	for p, n := range spec.Trainer.Stages {
		if len(stageLayers[p]) != n {
			t.Errorf("stage %d buckets hold %d layers' weights, want %d", p, len(stageLayers[p]), n)
		}
		for l := first; l < first+n; l++ {
			if !stageLayers[p][l] {
				t.Errorf("stage %d buckets lack layer %d", p, l)
			}
		}
		first += n
	}
}

// A fused parameter's parts are laid out on their own: with vLLM TP8 over
// Qwen3's 4 KV heads, the k and v parts are replicated on pairs of
// consecutive ranks, the q part split 8 ways; Megatron's TP2 splits all
// three in two.
func TestFusedParts(t *testing.T) {
	spec := Spec{
		Config: builtin(t, "qwen3-235b-a22b"), DType: layout.BF16,
		Trainer:   Megatron{TP: 2, CP: 2, DP: 4, PP: 4, EP: 16, ETP: 1, Stages: []int{23, 24, 24, 23}, Ranks: layout.RankRange(0, 64)},
		Generator: VLLM{TP: 8, DP: 8, EP: 1, Ranks: layout.RankRange(72, 64)},
	}
	ts, err := spec.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Tensor{}
	for _, x := range ts {
		by[x.Name] = x
	}
	k := by["model.layers.30.self_attn.qkv_proj.weight[k]"]
	q := by["model.layers.30.self_attn.qkv_proj.weight[q]"]
	if k.Stage != 1 || k.Src.String() != "[512 4096] bf16 on [4 2 2] ranks 16-31 [R, R, S(0)]" || k.Dst.String() != "[512 4096] bf16 on [8 4 2] ranks 72-135 [R, S(0), R]" {
		t.Errorf("k part: stage %d, %s -> %s", k.Stage, k.Src, k.Dst)
	}
	for tp := range 8 {
		kb, qb := k.Dst.LocalBox(8+tp), q.Dst.LocalBox(8+tp) // replica 1, TP rank tp
		if kb.Start[0] != int64(tp/2)*128 || kb.Size[0] != 128 {
			t.Errorf("generator TP rank %d holds k rows %v, want KV head %d", tp, kb, tp/2)
		}
		if qb.Start[0] != int64(tp)*1024 || qb.Size[0] != 1024 {
			t.Errorf("generator TP rank %d holds q rows %v, want heads %d-%d", tp, qb, 8*tp, 8*tp+7)
		}
	}
	gate := by["model.layers.0.mlp.experts.w13_weight[gate]"]
	if gate.Src.String() != "[128 1536 4096] bf16 on [16] ranks 0-15 [S(0)]" || gate.Dst.String() != "[128 1536 4096] bf16 on [8 8] ranks 72-135 [R, S(1)]" {
		t.Errorf("w13 gate: %s -> %s", gate.Src, gate.Dst)
	}
}

// Layouts that do not divide the model are errors naming the field.
func TestLayoutErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(s *Spec)
		err  string
	}{
		{"ep", func(s *Spec) { s.Trainer.EP, s.Trainer.DP, s.Trainer.Ranks = 3, 3, layout.RankRange(0, 24) }, "trainer.ep = 3: does not divide the 256 routed experts (n_routed_experts)"},
		{"pp > layers", func(s *Spec) { s.Trainer.PP, s.Trainer.Stages, s.Trainer.Ranks = 64, nil, layout.RankRange(0, 1024) }, "trainer.pp = 64: more pipeline stages than the model's 61 layers"},
		{"uneven pp", func(s *Spec) { s.Trainer.Stages = nil }, "trainer.pp = 8: does not divide the 61 layers (num_hidden_layers); list the layers of each stage in stages"},
		{"stage sum", func(s *Spec) { s.Trainer.Stages = []int{8, 8, 8, 8, 8, 8, 8, 6} }, "trainer.stages [8 8 8 8 8 8 8 6]: sum to 62 layers, but the model has 61"},
		{"stage count", func(s *Spec) { s.Trainer.Stages = []int{30, 31} }, "trainer.stages: 2 stages listed, but pp = 8"},
		{"empty stage", func(s *Spec) { s.Trainer.Stages = []int{0, 8, 8, 8, 8, 8, 8, 13} }, "trainer.stages[0] = 0: every stage needs at least one layer"},
		{"trainer tp heads", func(s *Spec) { s.Trainer.TP, s.Trainer.DP = 3, 16 }, "trainer.ranks: 128 ranks, but tp x cp x dp x pp = 3 x 1 x 16 x 8 = 384"},
		{"trainer tp heads 2", func(s *Spec) {
			s.Trainer.TP, s.Trainer.DP, s.Trainer.EP, s.Trainer.Ranks = 3, 16, 16, layout.RankRange(0, 384)
		}, "trainer.tp = 3: does not divide num_attention_heads = 128"},
		{"ep x etp", func(s *Spec) { s.Trainer.ETP = 2 }, "trainer.ep x etp = 16 x 2: does not divide the 16 ranks of a stage"},
		{"generator tp heads", func(s *Spec) { s.Generator.TP, s.Generator.DP, s.Generator.Ranks = 6, 1, layout.RankRange(128, 6) }, "generator.tp = 6: does not divide num_attention_heads = 128"},
		{"generator ep", func(s *Spec) { s.Generator.EP = 8 }, "generator.ep = 8: vLLM's expert parallelism spans every rank; give ep = 1 (off) or tp x dp = 128"},
		{"generator ranks", func(s *Spec) { s.Generator.Ranks = layout.RankRange(128, 100) }, "generator.ranks: 100 ranks, but tp x dp = 8 x 16 = 128"},
		{"zero size", func(s *Spec) { s.Trainer.CP = 0 }, "trainer.cp = 0: must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := dsv3Spec(t)
			tc.edit(&spec)
			_, err := spec.Tensors()
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Tensors() = %v\nwant an error containing %q", err, tc.err)
			}
		})
	}
	// vLLM's vocabulary padding: a vocabulary not a multiple of 64 cannot
	// be expressed.
	spec := dsv3Spec(t)
	c := *spec.Config
	c.Vocab = 129281
	spec.Config = &c
	if _, err := spec.Tensors(); err == nil || !strings.Contains(err.Error(), "vLLM pads vocab_size = 129281 to a multiple of 64") {
		t.Errorf("odd vocabulary: %v", err)
	}
}

// Property: for random valid layouts of every model, each tensor's layouts
// validate and divide it evenly (the frameworks reject uneven splits), each
// rank of a stage holds only its stage's weights, and the tensors hold every
// element of the model once.
func TestLayoutsDivideModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	divisors := func(n int64, limit int) []int {
		var out []int
		for d := 1; d <= limit; d++ {
			if n%int64(d) == 0 {
				out = append(out, d)
			}
		}
		return out
	}
	pick := func(xs []int) int { return xs[rng.IntN(len(xs))] }
	for _, model := range scenarios.ModelNames() {
		c := builtin(t, model)
		_, params := Count(c.Params())
		for range 20 {
			heads := int64(c.Heads)
			if !c.MLA() {
				heads = int64(c.KVHeads)
			}
			tp := pick(divisors(heads, 8))
			for c.Vocab%int64(tp) != 0 || c.Intermediate%int64(tp) != 0 && c.Intermediate > 0 {
				tp = 1
			}
			pp := pick(divisors(int64(c.Layers), 8))
			cp := pick([]int{1, 2})
			dp := pick([]int{1, 2, 4})
			ep, etp := 1, 1
			if c.Experts > 0 {
				for _, e := range []int{8, 4, 2, 1} {
					if (tp*cp*dp)%e == 0 && c.Experts%e == 0 && rng.IntN(2) == 0 {
						ep = e
						break
					}
				}
			}
			gtp := pick(divisors(int64(c.Heads), 8))
			for c.Vocab%int64(gtp) != 0 || (c.MoEIntermediate > 0 && c.MoEIntermediate%int64(gtp) != 0) ||
				(!c.MLA() && gtp%c.KVHeads != 0 && c.KVHeads%gtp != 0) || (c.Intermediate > 0 && c.Intermediate%int64(gtp) != 0) {
				gtp /= 2
			}
			gdp := pick([]int{1, 2, 3})
			gep := 1
			if c.Experts > 0 && c.Experts%(gtp*gdp) == 0 && rng.IntN(2) == 0 {
				gep = gtp * gdp
			}
			m := Megatron{TP: tp, CP: cp, DP: dp, PP: pp, EP: ep, ETP: etp}
			m.Ranks = layout.RankRange(0, m.World())
			g := VLLM{TP: gtp, DP: gdp, EP: gep, Ranks: layout.RankRange(m.World(), gtp*gdp)}
			spec := Spec{Config: c, DType: layout.BF16, Trainer: m, Generator: g, BucketBytes: int64(rng.IntN(3)) << 24}
			ts, err := spec.Tensors()
			if err != nil {
				t.Fatalf("%s trainer %+v generator %+v: %v", model, m, g, err)
			}
			var elems int64
			for _, x := range ts {
				elems += x.Src.Elems()
				for _, l := range []layout.Layout{x.Src, x.Dst} {
					if err := l.Validate(); err != nil {
						t.Fatalf("%s %s: %v", model, x.Name, err)
					}
					split := make([]int64, len(l.Shape))
					for a, p := range l.Placements {
						if p.Shard {
							split[p.Dim] = max(split[p.Dim], 1) * int64(l.Mesh.Shape[a])
						}
					}
					for d, n := range split {
						if n > 0 && l.Shape[d]%n != 0 {
							t.Fatalf("%s %s: %s splits dim %d of %d in %d", model, x.Name, l, d, l.Shape[d], n)
						}
					}
				}
				stage := m.StageRanks(x.Stage)
				if x.Src.Mesh.Ranks[0] != stage[0] || len(x.Src.Mesh.Ranks) != len(stage) {
					t.Fatalf("%s %s: source ranks %v, not stage %d", model, x.Name, x.Src.Mesh, x.Stage)
				}
				if x.Class == ClassBucket {
					var at int64
					for _, mb := range x.Members {
						if mb.Offset != at {
							t.Fatalf("%s %s: member %s at %d, want %d", model, x.Name, mb.Name, mb.Offset, at)
						}
						at += mb.Elems
					}
					if at != x.Src.Elems() || (spec.BucketBytes > 0 && x.Bytes() > spec.BucketBytes) {
						t.Fatalf("%s %s: members hold %d elements of %d (bucket %d bytes)", model, x.Name, at, x.Src.Elems(), spec.BucketBytes)
					}
				}
			}
			if elems != params {
				t.Fatalf("%s: tensors hold %d elements, the model %d", model, elems, params)
			}
		}
	}
}

// ParseConfig never panics, and a config it accepts lists its weights.
func FuzzParseConfig(f *testing.F) {
	for _, m := range scenarios.ModelNames() {
		b, _ := scenarios.Model(m)
		f.Add(b)
	}
	f.Add([]byte(`{"model_type": "qwen3_moe", "vocab_size": 64, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "num_experts": 2, "moe_intermediate_size": 4, "decoder_sparse_step": 0}`))
	f.Add([]byte(`{"model_type": "deepseek_v3", "moe_layer_freq": 0}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := ParseConfig("fuzz.json", doc)
		if err != nil {
			return
		}
		ws := c.Weights()
		for _, w := range ws {
			if w.Elems() <= 0 {
				t.Fatalf("%s: %v elements", w.Name, w.Shape)
			}
		}
	})
}

// Tensors never panics: on any accepted config and any layout sizes it
// returns tensors whose layouts validate, or an error.
func FuzzTensors(f *testing.F) {
	llama, _ := scenarios.Model("llama-3.1-70b")
	f.Add(llama, 8, 1, 8, 4, 1, 1, 8, 2, 1)
	dsv3, _ := scenarios.Model("deepseek-v3")
	f.Add(dsv3, 1, 1, 16, 8, 16, 1, 8, 16, 1)
	f.Add([]byte(`{"model_type": "llama", "vocab_size": 64, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 16}`), 2, 1, 1, 2, 1, 1, 4, 1, 1)
	f.Fuzz(func(t *testing.T, doc []byte, tp, cp, dp, pp, ep, etp, gtp, gdp, gep int) {
		c, err := ParseConfig("fuzz.json", doc)
		if err != nil || c.Layers > 64 || c.Experts > 64 {
			return
		}
		clamp := func(v int) int { return min(max(v, -1), 64) }
		m := Megatron{TP: clamp(tp), CP: clamp(cp), DP: clamp(dp), PP: clamp(pp), EP: clamp(ep), ETP: clamp(etp)}
		if m.TP > 0 && m.CP > 0 && m.DP > 0 && m.PP > 0 {
			m.Ranks = layout.RankRange(0, m.World())
		}
		g := VLLM{TP: clamp(gtp), DP: clamp(gdp), EP: clamp(gep)}
		if g.TP > 0 && g.DP > 0 {
			g.Ranks = layout.RankRange(len(m.Ranks), g.World())
		}
		spec := Spec{Config: c, DType: layout.BF16, Trainer: m, Generator: g, BucketBytes: 1 << 20}
		ts, err := spec.Tensors()
		if err != nil {
			return
		}
		for _, x := range ts {
			if x.Src.Validate() != nil || x.Dst.Validate() != nil {
				t.Fatalf("%s: invalid layout", x.Name)
			}
		}
	})
}

// An FP8 generator holds the linear weights in fp8_e4m3 (block scales),
// not embeddings, the head, norms or routers; a TP that cuts a block is
// refused naming the weight and the numbers; the MTP layer moves when
// asked, on the last trainer stage.
func TestQuantizedWorkload(t *testing.T) {
	c := builtin(t, "deepseek-v3")
	q := layout.Quant{Scheme: layout.QuantBlock, Block: layout.DefaultBlock}
	spec := Spec{Config: c, DType: layout.BF16, Quant: q, MTP: true,
		Trainer: Megatron{TP: 1, CP: 1, PP: 16, EP: 16, ETP: 1, DP: 16, Ranks: layout.RankRange(0, 256),
			Stages: []int{3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2}},
		Generator: VLLM{TP: 16, DP: 8, EP: 128, Ranks: layout.RankRange(256, 128)}}
	ts, err := spec.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	fp8, mtp := 0, 0
	for _, x := range ts {
		want := x.Class == ClassAttention || x.Class == ClassDenseMLP || x.Class == ClassExperts || x.Class == ClassSharedExperts
		if got := x.Quant.On(); got != want || (got && x.Dst.DType != layout.FP8E4M3) || x.Src.DType != layout.BF16 {
			t.Errorf("%s (%s): quantized %v, dst %v", x.Name, x.Class, got, x.Dst.DType)
		}
		if x.Quant.On() {
			fp8++
			if err := layout.CheckBlocks(x.Dst, q); err != nil {
				t.Errorf("%s: %v", x.Name, err)
			}
		}
		if strings.HasPrefix(x.Name, "model.layers.61.") {
			mtp++
			if x.Stage != 15 {
				t.Errorf("%s on stage %d, want the last, 15", x.Name, x.Stage)
			}
		}
	}
	if fp8 < 500 || mtp == 0 {
		t.Errorf("%d fp8 tensors, %d MTP tensors", fp8, mtp)
	}
	// TP 32 without expert parallelism cuts the dense MLP's 18432 rows
	// (576 a rank, 4.5 blocks): refused, as vLLM refuses it.
	spec.Generator = VLLM{TP: 32, DP: 4, EP: 1, Ranks: layout.RankRange(256, 128)}
	_, err = spec.Tensors()
	if err == nil || !strings.Contains(err.Error(), "generator tp = 32, ep = 1: model.layers.0.mlp.gate_up_proj.weight[gate]") ||
		!strings.Contains(err.Error(), "dim 0 (18432) is split by mesh axis 1 (32 ranks, S(0)) into shards of 576") {
		t.Errorf("TP 32: %v", err)
	}
	// Kimi-K2 has no MTP layer to move.
	spec.Config, spec.Generator = builtin(t, "kimi-k2"), VLLM{TP: 16, DP: 8, EP: 128, Ranks: layout.RankRange(256, 128)}
	if _, err := spec.Tensors(); err == nil || !strings.Contains(err.Error(), "num_nextn_predict_layers = 0") {
		t.Errorf("Kimi-K2 with mtp: %v", err)
	}
}

// The families' own tensors: Qwen2's q, k and v biases sharded as their
// weights, Qwen3's head norms, Gemma 2's four norms and tied head,
// Mixtral's experts under block_sparse_moe, DeepSeek-V2 without a router
// bias.
func TestFamilyTensors(t *testing.T) {
	names := func(model string, g VLLM) map[string]Tensor {
		t.Helper()
		c := builtin(t, model)
		m := Megatron{TP: 2, CP: 1, DP: 1, PP: 1, EP: 1, ETP: 2, Ranks: layout.RankRange(0, 2)}
		if c.Experts > 0 {
			m.EP, m.ETP = 2, 1
		}
		g.Ranks = layout.RankRange(2, g.World())
		spec := Spec{Config: c, DType: layout.BF16, Trainer: m, Generator: g}
		ts, err := spec.Tensors()
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		out := map[string]Tensor{}
		for _, x := range ts {
			out[x.Name] = x
			for _, y := range x.Members {
				out[y.Name] = x
			}
		}
		return out
	}
	q2 := names("qwen2.5-7b", VLLM{TP: 4, DP: 2, EP: 1})
	if b := q2["model.layers.5.self_attn.qkv_proj.bias[k]"]; b.Dst.String() != "[512] bf16 on [2 4] ranks 2-9 [R, S(0)]" || b.Src.String() != "[512] bf16 on [2] ranks 0-1 [S(0)]" {
		t.Errorf("qwen2 k bias: %s -> %s", b.Src, b.Dst)
	}
	if b := q2["model.layers.5.self_attn.qkv_proj.bias[q]"]; b.Dst.String() != "[3584] bf16 on [2 4] ranks 2-9 [R, S(0)]" {
		t.Errorf("qwen2 q bias: -> %s", b.Dst)
	}
	if _, ok := q2["model.layers.5.self_attn.o_proj.bias"]; ok {
		t.Error("qwen2: o_proj has no bias")
	}
	if _, ok := names("qwen3-8b", VLLM{TP: 8, DP: 1, EP: 1})["model.layers.0.self_attn.k_norm.weight"]; !ok {
		t.Error("qwen3: no k_norm")
	}
	mx := names("mixtral-8x7b", VLLM{TP: 2, DP: 2, EP: 4})
	if w := mx["model.layers.31.block_sparse_moe.experts.w2_weight"]; w.Dst.String() != "[8 4096 14336] bf16 on [2 2] ranks 2-5 [S(0), S(0)]" {
		t.Errorf("mixtral w2: -> %s", w.Dst)
	}
	if _, ok := mx["model.layers.0.block_sparse_moe.gate.weight"]; !ok {
		t.Error("mixtral: no router under block_sparse_moe")
	}
	g2 := names("gemma-2-9b", VLLM{TP: 2, DP: 1, EP: 1})
	for _, n := range []string{"post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"} {
		if _, ok := g2["model.layers.41."+n+".weight"]; !ok {
			t.Errorf("gemma2: no %s", n)
		}
	}
	if _, ok := g2["lm_head.weight"]; ok {
		t.Error("gemma2: an lm_head (tied to the embedding)")
	}
	v2 := names("deepseek-v2-lite", VLLM{TP: 2, DP: 1, EP: 1})
	if _, ok := v2["model.layers.1.mlp.gate.e_score_correction_bias"]; ok {
		t.Error("deepseek_v2: a router bias")
	}
	if _, ok := v2["model.layers.1.self_attn.q_proj.weight"]; !ok {
		t.Error("deepseek_v2 lite: no q_proj (q_lora_rank is null)")
	}
}

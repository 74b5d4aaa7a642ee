package plan

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/workload"
)

// legacyRing: every destination rank but the root once, domain by domain;
// the rings of different roots share no ordered pair of ranks and enter
// and leave each domain through different ranks.
func TestLegacyRing(t *testing.T) {
	tp, _ := topo.Preset("gb200-nvl72")
	tp.Domains = 4
	dst := layout.RankRange(144, 128) // two domains of 64 (GPUs 144-215, 216-271)
	roots := []int{0, 16, 32, 48, 72, 88, 104, 120}
	pairs := map[[2]int]int{}
	entries := map[int]int{}
	for _, root := range roots {
		ring := legacyRing(root, roots, dst, tp)
		if len(ring) != len(dst) {
			t.Fatalf("root %d: ring of %d ranks, want %d", root, len(ring), len(dst))
		}
		seen := map[int]bool{}
		prev := root
		crossings := 0
		for _, d := range ring {
			if seen[d] || d == root {
				t.Fatalf("root %d: rank %d twice or the root itself", root, d)
			}
			seen[d] = true
			if o, dup := pairs[[2]int{prev, d}]; dup {
				t.Errorf("roots %d and %d both use the pair %d -> %d", o, root, prev, d)
			}
			pairs[[2]int{prev, d}] = root
			if tp.Domain(prev) != tp.Domain(d) {
				crossings++
				if o, dup := entries[d]; dup {
					t.Errorf("roots %d and %d both enter a domain at rank %d", o, root, d)
				}
				entries[d] = root
			}
			prev = d
		}
		if crossings != 2 {
			t.Errorf("root %d: the ring crosses the network %d times, want 2 (into each domain once)", root, crossings)
		}
	}
}

// smallConfig returns a tiny model of a family, with random sizes that the
// layouts below divide.
func smallConfig(rng *rand.Rand, family string) *workload.Config {
	m := map[string]any{
		"model_type": family, "vocab_size": 64 * (1 + rng.IntN(2)), "hidden_size": 8 * (1 + rng.IntN(2)),
		"num_hidden_layers": 2 + rng.IntN(4), "num_attention_heads": 4, "tie_word_embeddings": rng.IntN(4) == 0,
	}
	switch family {
	case workload.DeepSeekV3, workload.DeepSeekV2:
		m["intermediate_size"] = 16
		m["moe_intermediate_size"] = 8
		m["n_routed_experts"] = 8
		m["n_shared_experts"] = rng.IntN(2)
		m["first_k_dense_replace"] = rng.IntN(2)
		m["q_lora_rank"] = []any{nil, 8}[rng.IntN(2)]
		m["kv_lora_rank"] = 4
		m["qk_nope_head_dim"] = 4
		m["qk_rope_head_dim"] = 2
		m["v_head_dim"] = 4
	case workload.Qwen3MoE:
		m["num_key_value_heads"] = 2
		m["head_dim"] = 4
		m["num_experts"] = 8
		m["moe_intermediate_size"] = 8
		m["intermediate_size"] = 16
		m["mlp_only_layers"] = []int{rng.IntN(2)}
	case workload.Llama, workload.Mistral, workload.Qwen3, workload.Qwen2, workload.Gemma2:
		m["num_key_value_heads"] = 2
		m["intermediate_size"] = 16
	case workload.Mixtral:
		m["num_key_value_heads"] = 2
		m["num_local_experts"] = 4 * (1 + rng.IntN(2))
		m["intermediate_size"] = 8
	}
	b, _ := json.Marshal(m)
	c, err := workload.ParseConfig("small.json", b)
	if err != nil {
		panic(err)
	}
	return c
}

// Whole small models, every family, random Megatron and vLLM layouts
// (pipeline stages, expert parallelism, fused parts, buckets, overlapping
// trainer and generator ranks), one in four with the generator's linear
// weights in fp8 in shard scales: every route delivers every destination
// byte exactly (the host executor checks each one, fp8 bytes and scales
// against the reference quantizer).
func TestWorkloadRoutesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	n := 30
	if testing.Short() {
		n = 8
	}
	for i := range n {
		family := workload.Families()[i%len(workload.Families())]
		c := smallConfig(rng, family)
		tr := workload.Megatron{TP: 1 + rng.IntN(2), CP: 1 + rng.IntN(2), DP: 1 + rng.IntN(2), EP: 1, ETP: 1}
		tr.PP = 1 + rng.IntN(min(c.Layers, 3))
		tr.Stages = make([]int, tr.PP)
		for l := range c.Layers { // every stage one layer, the rest at random
			if l < tr.PP {
				tr.Stages[l]++
			} else {
				tr.Stages[rng.IntN(tr.PP)]++
			}
		}
		if c.Experts > 0 {
			for _, e := range []int{4, 2} {
				if tr.StageSize()%e == 0 && rng.IntN(2) == 0 {
					tr.EP = e
					break
				}
			}
		}
		tr.Ranks = layout.RankRange(0, tr.World())
		gen := workload.VLLM{TP: []int{1, 2, 4}[rng.IntN(3)], DP: 1 + rng.IntN(2), EP: 1}
		if c.Experts > 0 && rng.IntN(2) == 0 {
			gen.EP = gen.TP * gen.DP
		}
		first := tr.World()
		if rng.IntN(3) == 0 { // colocated: the generator overlaps the trainer
			first = rng.IntN(tr.World())
		}
		gen.Ranks = layout.RankRange(first, gen.World())
		spec := workload.Spec{Config: c, DType: layout.BF16, Trainer: tr, Generator: gen, BucketBytes: []int64{0, 64, 1 << 10}[rng.IntN(3)]}
		if i%4 == 1 { // the generator's linear weights in fp8, a scale a rank's shard
			spec.Quant = layout.Quant{Scheme: layout.QuantShard}
		}
		ws, err := spec.Tensors()
		if err != nil {
			t.Fatalf("case %d (%s): %v", i, family, err)
		}
		tensors := make([]ir.Tensor, len(ws))
		for k, w := range ws {
			tensors[k] = ir.Tensor{Name: w.Name, Src: w.Src, Dst: w.Dst, Quant: w.Quant}
		}
		tp, _ := topo.Preset("hgx-h200")
		tp.GPUsPerDomain = 2 + rng.IntN(7)
		tp.Domains = (first+gen.World()+tr.World())/tp.GPUsPerDomain + 1
		chunk := int64(16 << rng.IntN(5))
		desc := fmt.Sprintf("case %d: %s trainer %+v generator %+v bucket %d chunk %d %v", i, family, tr, gen, spec.BucketBytes, chunk, spec.Quant)
		for _, route := range Routes {
			s, err := Build(tensors, tp, Options{Route: route, ChunkBytes: chunk})
			if err != nil {
				t.Fatalf("%s %s: %v", desc, route, err)
			}
			runOnHost(t, s, uint64(i), desc+" "+route)
			if i%3 == 0 && !spec.Quant.On() { // and under a staging cap, reused across tensors (quantized copies stay outside the cap: TestQuantRoutesExact)
				checkCapped(t, desc+" "+route, rand.New(rand.NewPCG(uint64(i), 9)), tensors, tp, Options{Route: route, ChunkBytes: chunk}, s)
			}
		}
	}
}

func TestChunkCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for range 2000 {
		nd := 1 + rng.IntN(4)
		b := layout.NewBox(nd)
		for d := range nd {
			b.Start[d] = rng.Int64N(3)
			b.Size[d] = 1 + rng.Int64N(9)
		}
		elem := int64(1 << rng.IntN(4))
		chunk := 1 + rng.Int64N(300)
		if got, want := int(ChunkCount(b, elem, chunk)), len(Chunks(b, elem, chunk)); got != want {
			t.Fatalf("ChunkCount(%v, %d, %d) = %d, want %d", b, elem, chunk, got, want)
		}
	}
}

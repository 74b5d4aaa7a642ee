package workload

import (
	"fmt"

	"github.com/m2n-project/m2n/model/layout"
)

// VLLM is a generator's parallel layout in vLLM's conventions: DP engine
// replicas of TP ranks each (rank = dp x TP + tp), no pipeline parallelism.
// With expert parallelism on (EP = TP x DP, vLLM's enable_expert_parallel),
// the experts are split over all ranks by index and never inside an expert;
// with it off, every expert is split over TP like a dense MLP.
type VLLM struct {
	TP, DP int
	EP     int   // 1 (off) or TP x DP
	Ranks  []int // the global ranks, in vLLM rank order; len = TP x DP
}

// World is the number of generator ranks.
func (v *VLLM) World() int { return v.TP * v.DP }

// vocabPadding is vLLM's DEFAULT_VOCAB_PADDING_SIZE: VocabParallelEmbedding
// pads the vocabulary to a multiple of it before splitting over TP.
const vocabPadding = 64

// Check verifies that the layout is well formed and divides the model as
// vLLM requires. Errors name the field as a scenario writes it.
func (v *VLLM) Check(c *Config) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"tp", v.TP}, {"dp", v.DP}, {"ep", v.EP}} {
		if f.v < 1 {
			return fmt.Errorf("%s = %d: must be at least 1", f.name, f.v)
		}
		if f.v > layout.MaxRank {
			return fmt.Errorf("%s = %d: too large", f.name, f.v)
		}
	}
	if w := int64(v.TP) * int64(v.DP); w > layout.MaxRank {
		return fmt.Errorf("tp x dp = %d: more ranks than m2n allows (%d)", w, layout.MaxRank)
	}
	if len(v.Ranks) != v.World() {
		return fmt.Errorf("ranks: %d ranks, but tp x dp = %d x %d = %d", len(v.Ranks), v.TP, v.DP, v.World())
	}
	if c.Heads%v.TP != 0 {
		return fmt.Errorf("tp = %d: does not divide num_attention_heads = %d (vLLM splits heads over TP)", v.TP, c.Heads)
	}
	if !c.MLA() && v.TP%c.KVHeads != 0 && c.KVHeads%v.TP != 0 {
		return fmt.Errorf("tp = %d: neither divides nor is a multiple of num_key_value_heads = %d (vLLM's QKVParallelLinear)", v.TP, c.KVHeads)
	}
	if c.Vocab%vocabPadding != 0 || c.Vocab%int64(v.TP) != 0 {
		return fmt.Errorf("tp = %d: vLLM pads vocab_size = %d to a multiple of %d and splits the padded rows over TP; m2n models only a vocabulary that is a multiple of %d and of tp", v.TP, c.Vocab, vocabPadding, vocabPadding)
	}
	if err := divides("tp", v.TP, c.denseWidths()); err != nil {
		return err
	}
	if c.Experts == 0 {
		if v.EP != 1 {
			return fmt.Errorf("ep = %d: the model has no experts; leave ep at 1", v.EP)
		}
		return nil
	}
	switch v.EP {
	case 1:
		if c.MoEIntermediate%int64(v.TP) != 0 {
			return fmt.Errorf("tp = %d: does not divide moe_intermediate_size = %d (vLLM splits each expert over TP when ep = 1)", v.TP, c.MoEIntermediate)
		}
	case v.World():
		if c.Experts%v.EP != 0 {
			return fmt.Errorf("ep = %d: does not divide the %d routed experts (%s)", v.EP, c.Experts, c.expertsKey())
		}
	default:
		return fmt.Errorf("ep = %d: vLLM's expert parallelism spans every rank; give ep = 1 (off) or tp x dp = %d", v.EP, v.World())
	}
	return nil
}

// Layout returns the weight's layout on the generator.
func (v *VLLM) Layout(w *Weight, c *Config, dt layout.DType) layout.Layout {
	l := layout.Layout{Shape: w.Shape, DType: dt}
	switch w.Rule {
	case ExpertColumn, ExpertRow:
		if v.EP > 1 {
			l.Mesh, l.Placements = mesh(v.Ranks, []axis{{v.DP, layout.S(0)}, {v.TP, layout.S(0)}})
			break
		}
		d := 1
		if w.Rule == ExpertRow {
			d = 2
		}
		l.Mesh, l.Placements = mesh(v.Ranks, []axis{{v.DP, layout.R}, {v.TP, layout.S(d)}})
	case KV:
		if v.TP > c.KVHeads {
			// Each KV head on TP / KVHeads consecutive ranks.
			l.Mesh, l.Placements = mesh(v.Ranks, []axis{{v.DP, layout.R}, {c.KVHeads, layout.S(0)}, {v.TP / c.KVHeads, layout.R}})
			break
		}
		l.Mesh, l.Placements = mesh(v.Ranks, []axis{{v.DP, layout.R}, {v.TP, layout.S(0)}})
	default:
		tp := layout.R
		switch w.Rule {
		case Column, Vocab:
			tp = layout.S(0)
		case Row:
			tp = layout.S(1)
		}
		l.Mesh, l.Placements = mesh(v.Ranks, []axis{{v.DP, layout.R}, {v.TP, tp}})
	}
	return l
}

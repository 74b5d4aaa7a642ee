package workload

import "fmt"

// Rule says how the frameworks shard a weight. docs/workloads.md gives the
// source of each.
type Rule uint8

// Sharding rules. "TP" is the tensor-parallel axis of the side; Megatron's
// experts use its expert axes (EP, ETP) and vLLM's use EP when expert
// parallelism is on, else TP inside each expert.
const (
	// Replicated on every rank: norms, the router and its bias.
	Replicated Rule = iota
	// Column: a column-parallel linear, [out, in] sharded on dim 0 over TP.
	Column
	// Row: a row-parallel linear, [out, in] sharded on dim 1 over TP.
	Row
	// Vocab: a vocab-parallel embedding or LM head, [vocab, hidden] sharded
	// on dim 0 over TP.
	Vocab
	// Latent: MLA's down-projections (q_a_proj, kv_a_proj_with_mqa),
	// replicated on both sides (Megatron's TELinear "duplicated", vLLM's
	// disable_tp).
	Latent
	// KV: a key or value projection, column-parallel by KV head; vLLM
	// replicates each KV head over TP / num_key_value_heads ranks when TP
	// exceeds the KV heads.
	KV
	// ExpertColumn: stacked experts [E, out, in], experts over EP, out over
	// the expert TP.
	ExpertColumn
	// ExpertRow: stacked experts [E, out, in], experts over EP, in over the
	// expert TP.
	ExpertRow
)

var ruleNames = [...]string{"replicated", "column", "row", "vocab", "latent", "kv", "expert-column", "expert-row"}

func (r Rule) String() string {
	if int(r) < len(ruleNames) {
		return ruleNames[r]
	}
	return fmt.Sprintf("rule(%d)", int(r))
}

// Tensor classes, for byte breakdowns.
const (
	ClassEmbedding     = "embedding"
	ClassAttention     = "attention"
	ClassNorm          = "norm"
	ClassDenseMLP      = "dense-mlp"
	ClassRouter        = "router"
	ClassExperts       = "experts"
	ClassSharedExperts = "shared-experts"
	ClassHead          = "head"
	ClassBucket        = "bucket" // replicated tensors concatenated; see Tensor.Members
)

// Layer positions of weights outside the decoder layers.
const (
	LayerEmbedding = -1 // embed_tokens: the first pipeline stage
	LayerHead      = -2 // model.norm and lm_head: the last pipeline stage
)

// Weight is one parameter as the frameworks store it: experts stacked into
// one [E, out, in] tensor (Megatron's grouped GEMM weights on each rank,
// vLLM's FusedMoE w13/w2), and each part of a fused parameter (vLLM's
// qkv_proj, gate_up_proj, MoE w13; Megatron's linear_qkv and linear_fc1) a
// weight of its own. A fused parameter's parts are named "param[part]":
// each is sharded on its own, so each rank holds and receives exactly its
// slice of every part, and an engine maps the parts as views (possibly
// strided) of its fused parameter.
type Weight struct {
	Name    string  // the generator's (vLLM) parameter name, with "[part]" for a fused part
	Trainer string  // the trainer's (Megatron) parameter name, with "[part]"
	HF      int     // how many Hugging Face tensors it holds (stacked experts: E)
	Class   string  // one of the Class constants
	Shape   []int64 // global shape
	Layer   int     // decoder layer, or LayerEmbedding, LayerHead
	Rule    Rule
}

// Elems is the number of elements.
func (w *Weight) Elems() int64 {
	n := int64(1)
	for _, s := range w.Shape {
		n *= s
	}
	return n
}

// appender returns a function that appends a weight to *out, its HF
// factor 1 when unset.
func appender(out *[]Weight) func(Weight) {
	return func(w Weight) {
		if w.HF == 0 {
			w.HF = 1
		}
		*out = append(*out, w)
	}
}

// Weights lists the main model's weights as the frameworks store them, in
// checkpoint order. Together they hold exactly the elements of Params.
func (c *Config) Weights() []Weight {
	var out []Weight
	add := appender(&out)
	H := c.Hidden
	add(Weight{Name: "model.embed_tokens.weight", Trainer: "embedding.word_embeddings.weight", Class: ClassEmbedding,
		Shape: []int64{c.Vocab, H}, Layer: LayerEmbedding, Rule: Vocab})
	for l := range c.Layers {
		c.layerWeights(add, l, fmt.Sprintf("decoder.layers.%d.", l))
	}
	add(Weight{Name: "model.norm.weight", Trainer: "decoder.final_layernorm.weight", Class: ClassNorm,
		Shape: []int64{H}, Layer: LayerHead, Rule: Replicated})
	if !c.TieEmbeddings {
		add(Weight{Name: "lm_head.weight", Trainer: "output_layer.weight", Class: ClassHead,
			Shape: []int64{c.Vocab, H}, Layer: LayerHead, Rule: Vocab})
	}
	return out
}

// MTPWeights lists the weights of the multi-token-prediction layers
// (DeepSeek-V3's and Kimi-K2's layer 61, num_nextn_predict_layers), as
// vLLM's DeepSeekMTP names them ("model.layers.61. ..."): its own
// embedding and shared head (vocab-parallel, as the main model's), enorm,
// hnorm, eh_proj, and a full decoder layer; on the trainer they live on
// the last pipeline stage (Megatron's MTP block, decoder.mtp.layers.k).
// eh_proj ([H, 2H]) is replicated on both sides: vLLM builds it as a
// plain nn.Linear; m2n assumes Megatron does not split it either.
// Together they hold exactly the elements of MTPParams.
func (c *Config) MTPWeights() []Weight {
	var out []Weight
	add := appender(&out)
	H := c.Hidden
	for k := range c.MTPLayers {
		l := c.Layers + k
		v := fmt.Sprintf("model.layers.%d.", l)
		m := fmt.Sprintf("mtp.layers.%d.", k)
		w := func(name, trainer, class string, rule Rule, shape ...int64) Weight {
			return Weight{Name: v + name, Trainer: m + trainer, Class: class, Shape: shape, Layer: l, Rule: rule}
		}
		add(w("embed_tokens.weight", "embedding.word_embeddings.weight", ClassEmbedding, Vocab, c.Vocab, H))
		add(w("enorm.weight", "enorm.weight", ClassNorm, Replicated, H))
		add(w("hnorm.weight", "hnorm.weight", ClassNorm, Replicated, H))
		add(w("eh_proj.weight", "eh_proj.weight", ClassAttention, Latent, H, 2*H))
		c.layerWeights(add, l, m+"transformer_layer.")
		add(w("shared_head.norm.weight", "final_layernorm.weight", ClassNorm, Replicated, H))
		add(w("shared_head.head.weight", "output_layer.weight", ClassHead, Vocab, c.Vocab, H))
	}
	return out
}

// layerWeights adds the weights of decoder layer l, named "model.layers.l."
// for the generator and with the trainer prefix m.
func (c *Config) layerWeights(add func(Weight), l int, m string) {
	H := c.Hidden
	{
		v := fmt.Sprintf("model.layers.%d.", l)
		w := func(name, trainer, class string, rule Rule, shape ...int64) Weight {
			return Weight{Name: v + name, Trainer: m + trainer, Class: class, Shape: shape, Layer: l, Rule: rule}
		}
		add(w("input_layernorm.weight", "input_layernorm.weight", ClassNorm, Replicated, H))
		if c.MLA() {
			qk := c.QKNopeHeadDim + c.QKRopeHeadDim
			nh := int64(c.Heads)
			if c.QLoraRank > 0 {
				add(w("self_attn.fused_qkv_a_proj.weight[q_a_proj]", "self_attention.linear_q_down_proj.weight", ClassAttention, Latent, c.QLoraRank, H))
			}
			add(w("self_attn.fused_qkv_a_proj.weight[kv_a_proj_with_mqa]", "self_attention.linear_kv_down_proj.weight", ClassAttention, Latent, c.KVLoraRank+c.QKRopeHeadDim, H))
			if c.QLoraRank > 0 {
				add(w("self_attn.q_a_layernorm.weight", "self_attention.linear_q_up_proj.layer_norm_weight", ClassNorm, Replicated, c.QLoraRank))
				add(w("self_attn.q_b_proj.weight", "self_attention.linear_q_up_proj.weight", ClassAttention, Column, nh*qk, c.QLoraRank))
			} else {
				add(w("self_attn.q_proj.weight", "self_attention.linear_q_proj.weight", ClassAttention, Column, nh*qk, H))
			}
			add(w("self_attn.kv_a_layernorm.weight", "self_attention.linear_kv_up_proj.layer_norm_weight", ClassNorm, Replicated, c.KVLoraRank))
			add(w("self_attn.kv_b_proj.weight", "self_attention.linear_kv_up_proj.weight", ClassAttention, Column, nh*(c.QKNopeHeadDim+c.VHeadDim), c.KVLoraRank))
			add(w("self_attn.o_proj.weight", "self_attention.linear_proj.weight", ClassAttention, Row, H, nh*c.VHeadDim))
		} else {
			q, kv := int64(c.Heads)*c.HeadDim, int64(c.KVHeads)*c.HeadDim
			add(w("self_attn.qkv_proj.weight[q]", "self_attention.linear_qkv.weight[q]", ClassAttention, Column, q, H))
			add(w("self_attn.qkv_proj.weight[k]", "self_attention.linear_qkv.weight[k]", ClassAttention, KV, kv, H))
			add(w("self_attn.qkv_proj.weight[v]", "self_attention.linear_qkv.weight[v]", ClassAttention, KV, kv, H))
			if c.QKVBias {
				add(w("self_attn.qkv_proj.bias[q]", "self_attention.linear_qkv.bias[q]", ClassAttention, Column, q))
				add(w("self_attn.qkv_proj.bias[k]", "self_attention.linear_qkv.bias[k]", ClassAttention, KV, kv))
				add(w("self_attn.qkv_proj.bias[v]", "self_attention.linear_qkv.bias[v]", ClassAttention, KV, kv))
			}
			add(w("self_attn.o_proj.weight", "self_attention.linear_proj.weight", ClassAttention, Row, H, q))
			if c.QKNorm {
				add(w("self_attn.q_norm.weight", "self_attention.q_layernorm.weight", ClassNorm, Replicated, c.HeadDim))
				add(w("self_attn.k_norm.weight", "self_attention.k_layernorm.weight", ClassNorm, Replicated, c.HeadDim))
			}
		}
		if c.SandwichNorms {
			// Megatron-Bridge's Gemma 2 names (gemma2_bridge.py).
			add(w("post_attention_layernorm.weight", "self_attention.linear_proj.post_layernorm.weight", ClassNorm, Replicated, H))
			add(w("pre_feedforward_layernorm.weight", "pre_mlp_layernorm.weight", ClassNorm, Replicated, H))
		} else {
			add(w("post_attention_layernorm.weight", "pre_mlp_layernorm.weight", ClassNorm, Replicated, H))
		}
		if !c.MoELayer(l) {
			I := c.Intermediate
			add(w("mlp.gate_up_proj.weight[gate]", "mlp.linear_fc1.weight[gate]", ClassDenseMLP, Column, I, H))
			add(w("mlp.gate_up_proj.weight[up]", "mlp.linear_fc1.weight[up]", ClassDenseMLP, Column, I, H))
			add(w("mlp.down_proj.weight", "mlp.linear_fc2.weight", ClassDenseMLP, Row, H, I))
			if c.SandwichNorms {
				add(w("post_feedforward_layernorm.weight", "mlp.linear_fc2.post_layernorm.weight", ClassNorm, Replicated, H))
			}
			return
		}
		E, I := int64(c.Experts), c.MoEIntermediate
		b := c.moeBlock + "." // vLLM's module; Megatron's is mlp
		add(w(b+"gate.weight", "mlp.router.weight", ClassRouter, Replicated, E, H))
		if c.RouterBias {
			add(w(b+"gate.e_score_correction_bias", "mlp.router.expert_bias", ClassRouter, Replicated, E))
		}
		for _, x := range []Weight{
			w(b+"experts.w13_weight[gate]", "mlp.experts.linear_fc1.weight[gate]", ClassExperts, ExpertColumn, E, I, H),
			w(b+"experts.w13_weight[up]", "mlp.experts.linear_fc1.weight[up]", ClassExperts, ExpertColumn, E, I, H),
			w(b+"experts.w2_weight", "mlp.experts.linear_fc2.weight", ClassExperts, ExpertRow, E, H, I),
		} {
			x.HF = c.Experts
			add(x)
		}
		if c.SharedExperts > 0 {
			S := int64(c.SharedExperts) * I
			add(w("mlp.shared_experts.gate_up_proj.weight[gate]", "mlp.shared_experts.linear_fc1.weight[gate]", ClassSharedExperts, Column, S, H))
			add(w("mlp.shared_experts.gate_up_proj.weight[up]", "mlp.shared_experts.linear_fc1.weight[up]", ClassSharedExperts, Column, S, H))
			add(w("mlp.shared_experts.down_proj.weight", "mlp.shared_experts.linear_fc2.weight", ClassSharedExperts, Row, H, S))
		}
	}
}

package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"

	"github.com/m2n-project/m2n/model/layout"
)

// Model families, by the model_type of a Hugging Face config.json.
const (
	DeepSeekV3 = "deepseek_v3" // DeepSeek-V3 / R1: MLA attention, shared + routed experts, MTP
	// KimiK2 is Kimi-K2's model_type: the deepseek_v3 family (its
	// architectures: DeepseekV3ForCausalLM), read as DeepSeekV3.
	KimiK2     = "kimi_k2"
	DeepSeekV2 = "deepseek_v2" // DeepSeek-V2 / V2-Lite: MLA, shared + routed experts, no router bias, no MTP
	Qwen3MoE   = "qwen3_moe"   // Qwen3 MoE: GQA with q/k norms, routed experts
	Qwen3      = "qwen3"       // Qwen3 dense: GQA with q/k norms, dense gated MLP
	Qwen2      = "qwen2"       // Qwen2 / Qwen2.5 dense: GQA with q, k and v biases, dense gated MLP
	Llama      = "llama"       // Llama 3.x: GQA, dense gated MLP
	Mistral    = "mistral"     // Mistral: Llama's tensors (its sliding window changes none)
	Mixtral    = "mixtral"     // Mixtral: GQA, routed experts in every layer (block_sparse_moe)
	Gemma2     = "gemma2"      // Gemma 2: GQA, norms before and after attention and MLP, tied embeddings
)

// Families lists the model families m2n reads, sorted.
func Families() []string {
	return []string{DeepSeekV2, DeepSeekV3, Gemma2, Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3MoE}
}

// Config is the part of a Hugging Face config.json that fixes the model's
// parameter tensors. Sizes are in elements.
type Config struct {
	ModelType string // the family: DeepSeekV3, Qwen3MoE or Llama

	Vocab         int64 // vocab_size
	Hidden        int64 // hidden_size
	Layers        int   // num_hidden_layers (the main model, MTP layers excluded)
	Heads         int   // num_attention_heads
	KVHeads       int   // num_key_value_heads (GQA); equal to Heads for MLA
	HeadDim       int64 // head_dim (GQA)
	Intermediate  int64 // intermediate_size: the dense MLP's hidden width
	TieEmbeddings bool  // tie_word_embeddings: lm_head shares embed_tokens
	QKNorm        bool  // per-head q_norm and k_norm (Qwen3)
	QKVBias       bool  // q, k and v projection biases (Qwen2)
	// SandwichNorms: a norm after attention and one before and one
	// after the MLP (Gemma 2: post_attention_layernorm,
	// pre_feedforward_layernorm, post_feedforward_layernorm).
	SandwichNorms bool

	// Mixture of experts (Experts == 0: a dense model).
	Experts         int   // n_routed_experts / num_experts
	MoEIntermediate int64 // moe_intermediate_size: one expert's hidden width
	SharedExperts   int   // n_shared_experts (DeepSeek): one fused shared MLP of SharedExperts x MoEIntermediate
	RouterBias      bool  // the router's e_score_correction_bias (DeepSeek-V3)
	moeLayer        func(layer int) bool
	// moeBlock is the MoE block's module in both frameworks' names
	// ("mlp", Mixtral's "block_sparse_moe"), and expertProj a checkpoint
	// expert's gate, up and down projections (gate_proj, up_proj,
	// down_proj; Mixtral's w1, w3, w2).
	moeBlock   string
	expertProj [3]string

	// Multi-head latent attention (DeepSeek); KVLoraRank == 0 means GQA.
	QLoraRank     int64 // q_lora_rank; 0 when queries are not compressed
	KVLoraRank    int64 // kv_lora_rank
	QKNopeHeadDim int64 // qk_nope_head_dim
	QKRopeHeadDim int64 // qk_rope_head_dim
	VHeadDim      int64 // v_head_dim

	MTPLayers int // num_nextn_predict_layers: multi-token-prediction layers after the main model
}

// MLA reports whether attention is DeepSeek's multi-head latent attention.
func (c *Config) MLA() bool { return c.KVLoraRank > 0 }

// MoELayer reports whether decoder layer l has a mixture-of-experts MLP
// (else a dense gated MLP).
func (c *Config) MoELayer(l int) bool { return c.Experts > 0 && c.moeLayer != nil && c.moeLayer(l) }

// MaxDim bounds every size read from a config, so products of a few of them
// stay far inside int64.
const MaxDim = 1 << 24

// ParseConfig reads a Hugging Face style config.json. A key the model's
// family needs and the file lacks is an error naming the key; keys m2n does
// not use are ignored (real configs carry many). origin names the file in
// errors.
func ParseConfig(origin string, data []byte) (*Config, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", origin, err)
	}
	r := &reader{raw: raw}
	c := &Config{}
	c.ModelType = r.str("model_type")
	if r.err != nil {
		return nil, fmt.Errorf("%s: %w", origin, r.err)
	}
	if c.ModelType == KimiK2 { // Kimi-K2's config.json: DeepseekV3ForCausalLM
		c.ModelType = DeepSeekV3
	}
	r.family = c.ModelType
	c.moeBlock, c.expertProj = "mlp", [3]string{"gate_proj", "up_proj", "down_proj"}
	switch c.ModelType {
	case DeepSeekV3:
		r.deepseek(c)
	case DeepSeekV2:
		r.deepseek(c)
		c.RouterBias = false // its routers have no e_score_correction_bias
	case Qwen3MoE:
		r.qwen3MoE(c)
	case Qwen3:
		r.llama(c)
		c.QKNorm = true
	case Qwen2:
		r.llama(c)
		c.QKVBias = true // Qwen2Attention: q, k and v with bias, o without
	case Llama, Mistral:
		r.llama(c)
	case Mixtral:
		r.mixtral(c)
	case Gemma2:
		r.llama(c)
		c.SandwichNorms = true
		// Gemma2Config ties the LM head to the embedding unless told.
		c.TieEmbeddings = c.TieEmbeddings || !r.present("tie_word_embeddings")
	default:
		return nil, fmt.Errorf("%s: model_type %q: not a family m2n knows (known: %s)", origin, c.ModelType, strings.Join(Families(), ", "))
	}
	if r.err == nil {
		r.limits(c)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%s: %w", origin, r.err)
	}
	return c, nil
}

// Bounds on a model, far above today's largest, that keep its tensor list
// and every tensor's byte count small enough to plan.
const (
	MaxLayers  = 1024
	MaxExperts = 4096
)

// limits checks the bounds: layer and expert counts, and every weight's
// size in bytes (at 8 bytes an element) within layout.MaxBytes.
func (r *reader) limits(c *Config) {
	switch {
	case c.Layers > MaxLayers:
		r.fail("num_hidden_layers = %d: more than %d", c.Layers, MaxLayers)
		return
	case c.Experts > MaxExperts:
		r.fail("%s = %d: more than %d", c.expertsKey(), c.Experts, MaxExperts)
		return
	case c.MTPLayers > MaxLayers:
		r.fail("num_nextn_predict_layers = %d: more than %d", c.MTPLayers, MaxLayers)
		return
	}
	for _, w := range c.Weights() {
		n := uint64(8)
		for _, d := range w.Shape {
			hi, lo := bits.Mul64(n, uint64(d))
			if hi != 0 || lo > uint64(layout.MaxBytes) {
				r.fail("%s of shape %v: larger than m2n plans (%d bytes)", w.Name, w.Shape, layout.MaxBytes)
				return
			}
			n = lo
		}
	}
}

func (r *reader) common(c *Config) {
	c.Vocab = r.int("vocab_size")
	c.Hidden = r.int("hidden_size")
	c.Layers = int(r.int("num_hidden_layers"))
	c.Heads = int(r.int("num_attention_heads"))
	c.TieEmbeddings = r.optBool("tie_word_embeddings", false)
}

// gqa reads grouped-query attention: heads, KV heads, head size.
func (r *reader) gqa(c *Config) {
	c.KVHeads = int(r.optPos("num_key_value_heads", int64(c.Heads)))
	if c.Heads > 0 {
		c.HeadDim = r.optPos("head_dim", c.Hidden/int64(c.Heads))
		if r.err == nil && c.HeadDim < 1 {
			r.fail("head_dim: missing, and hidden_size = %d over num_attention_heads = %d leaves none", c.Hidden, c.Heads)
		}
	}
	if r.err == nil && c.KVHeads > 0 && c.Heads%c.KVHeads != 0 {
		r.fail("num_attention_heads = %d: not a multiple of num_key_value_heads = %d", c.Heads, c.KVHeads)
	}
	if r.optBool("attention_bias", false) {
		r.fail("attention_bias = true: attention biases are not modeled")
	}
	if r.optBool("mlp_bias", false) {
		r.fail("mlp_bias = true: MLP biases are not modeled")
	}
}

func (r *reader) deepseek(c *Config) {
	r.common(c)
	c.Intermediate = r.int("intermediate_size")
	c.Experts = int(r.int("n_routed_experts"))
	c.MoEIntermediate = r.int("moe_intermediate_size")
	c.SharedExperts = int(r.optInt("n_shared_experts", 0))
	c.RouterBias = true
	first := int(r.count("first_k_dense_replace"))
	freq := int(r.optPos("moe_layer_freq", 1))
	c.moeLayer = func(l int) bool { return l >= first && l%freq == 0 }
	c.QLoraRank = r.optInt("q_lora_rank", 0)
	c.KVLoraRank = r.int("kv_lora_rank")
	c.QKNopeHeadDim = r.int("qk_nope_head_dim")
	c.QKRopeHeadDim = r.int("qk_rope_head_dim")
	c.VHeadDim = r.int("v_head_dim")
	c.KVHeads = c.Heads
	c.MTPLayers = int(r.optInt("num_nextn_predict_layers", 0))
}

func (r *reader) qwen3MoE(c *Config) {
	r.common(c)
	r.gqa(c)
	c.QKNorm = true
	c.Experts = int(r.int("num_experts"))
	c.MoEIntermediate = r.int("moe_intermediate_size")
	step := int(r.optPos("decoder_sparse_step", 1))
	dense := map[int]bool{}
	for _, l := range r.optInts("mlp_only_layers") {
		dense[int(l)] = true
	}
	c.moeLayer = func(l int) bool { return !dense[l] && (l+1)%step == 0 }
	// A dense layer, if any, uses intermediate_size.
	anyDense := false
	for l := 0; l < c.Layers && r.err == nil; l++ {
		anyDense = anyDense || !c.moeLayer(l)
	}
	if anyDense {
		c.Intermediate = r.int("intermediate_size")
	} else {
		c.Intermediate = r.optInt("intermediate_size", 0)
	}
}

func (r *reader) llama(c *Config) {
	r.common(c)
	r.gqa(c)
	c.Intermediate = r.int("intermediate_size")
}

// mixtral reads Mixtral: every layer's MLP is num_local_experts routed
// experts of intermediate_size each, no shared expert.
func (r *reader) mixtral(c *Config) {
	r.common(c)
	r.gqa(c)
	c.Experts = int(r.int("num_local_experts"))
	c.MoEIntermediate = r.int("intermediate_size")
	c.moeLayer = func(int) bool { return true }
	c.moeBlock, c.expertProj = "block_sparse_moe", [3]string{"w1", "w3", "w2"}
}

// reader pulls typed values out of the raw JSON object, keeping the first
// error.
type reader struct {
	raw    map[string]json.RawMessage
	family string
	err    error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) missing(key string) {
	if r.family != "" {
		r.fail("%s: missing; the %s family needs it", key, r.family)
	} else {
		r.fail("%s: missing", key)
	}
}

// present reports whether key has a non-null value.
func (r *reader) present(key string) bool {
	v, ok := r.raw[key]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func (r *reader) str(key string) string {
	if !r.present(key) {
		r.missing(key)
		return ""
	}
	var s string
	if err := json.Unmarshal(r.raw[key], &s); err != nil {
		r.fail("%s = %s: want a string", key, r.raw[key])
	}
	return s
}

// int reads a required positive integer (at most MaxDim).
func (r *reader) int(key string) int64 {
	if !r.present(key) {
		r.missing(key)
		return 0
	}
	return r.parseInt(key, 1)
}

// count reads a required non-negative integer.
func (r *reader) count(key string) int64 {
	if !r.present(key) {
		r.missing(key)
		return 0
	}
	return r.parseInt(key, 0)
}

// optPos reads an optional positive integer.
func (r *reader) optPos(key string, def int64) int64 {
	if !r.present(key) {
		return def
	}
	return r.parseInt(key, 1)
}

// optInt reads an optional non-negative integer.
func (r *reader) optInt(key string, def int64) int64 {
	if !r.present(key) {
		return def
	}
	return r.parseInt(key, 0)
}

func (r *reader) parseInt(key string, lo int64) int64 {
	var n json.Number
	raw := bytes.TrimSpace(r.raw[key])
	if len(raw) > 0 && raw[0] == '"' { // json.Number would take a quoted number
		r.fail("%s = %s: want an integer", key, raw)
		return 0
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		r.fail("%s = %s: want an integer", key, r.raw[key])
		return 0
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
		r.fail("%s = %s: want an integer", key, n)
		return 0
	}
	if f < float64(lo) || f > MaxDim {
		r.fail("%s = %s: want an integer in [%d, %d]", key, n, lo, MaxDim)
		return 0
	}
	return int64(f)
}

func (r *reader) optBool(key string, def bool) bool {
	if !r.present(key) {
		return def
	}
	var b bool
	if err := json.Unmarshal(r.raw[key], &b); err != nil {
		r.fail("%s = %s: want true or false", key, r.raw[key])
	}
	return b
}

func (r *reader) optInts(key string) []int64 {
	if !r.present(key) {
		return nil
	}
	var ns []json.Number
	if err := json.Unmarshal(r.raw[key], &ns); err != nil {
		r.fail("%s = %s: want a list of integers", key, r.raw[key])
		return nil
	}
	out := make([]int64, 0, len(ns))
	for i, n := range ns {
		v, err := n.Int64()
		if err != nil || v < 0 || v > MaxDim {
			r.fail("%s[%d] = %s: want a non-negative integer", key, i, n)
			return nil
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

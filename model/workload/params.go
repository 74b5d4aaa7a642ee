package workload

import "fmt"

// Param is one tensor of a Hugging Face checkpoint: its name and shape
// ([out, in] for a linear weight), as the model's safetensors index lists it.
type Param struct {
	Name  string
	Shape []int64
	Layer int  // decoder layer, or -1 for embed_tokens, model.norm and lm_head
	MTP   bool // part of a multi-token-prediction layer
}

// Elems is the number of elements.
func (p Param) Elems() int64 {
	n := int64(1)
	for _, s := range p.Shape {
		n *= s
	}
	return n
}

// Count sums parameters: the number of tensors and of elements.
func Count(ps []Param) (tensors int, elems int64) {
	for _, p := range ps {
		elems += p.Elems()
	}
	return len(ps), elems
}

// Params lists the Hugging Face tensors of the main model, in checkpoint
// order: embed_tokens, the decoder layers, model.norm, lm_head (absent when
// tied). Experts are listed one by one, as checkpoints store them.
func (c *Config) Params() []Param {
	var out []Param
	add := func(layer int, mtp bool, name string, shape ...int64) {
		out = append(out, Param{Name: name, Shape: shape, Layer: layer, MTP: mtp})
	}
	add(-1, false, "model.embed_tokens.weight", c.Vocab, c.Hidden)
	for l := range c.Layers {
		out = c.layerParams(out, l, false)
	}
	add(-1, false, "model.norm.weight", c.Hidden)
	if !c.TieEmbeddings {
		add(-1, false, "lm_head.weight", c.Vocab, c.Hidden)
	}
	return out
}

// MTPParams lists the tensors of the multi-token-prediction layers
// (DeepSeek-V3's layer 61): a full decoder layer plus its own embedding,
// enorm, hnorm, eh_proj and shared head.
func (c *Config) MTPParams() []Param {
	var out []Param
	for k := range c.MTPLayers {
		l := c.Layers + k
		p := fmt.Sprintf("model.layers.%d.", l)
		out = append(out, Param{Name: p + "embed_tokens.weight", Shape: []int64{c.Vocab, c.Hidden}, Layer: l, MTP: true})
		out = append(out, Param{Name: p + "enorm.weight", Shape: []int64{c.Hidden}, Layer: l, MTP: true})
		out = append(out, Param{Name: p + "hnorm.weight", Shape: []int64{c.Hidden}, Layer: l, MTP: true})
		out = append(out, Param{Name: p + "eh_proj.weight", Shape: []int64{c.Hidden, 2 * c.Hidden}, Layer: l, MTP: true})
		out = c.layerParams(out, l, true)
		out = append(out, Param{Name: p + "shared_head.norm.weight", Shape: []int64{c.Hidden}, Layer: l, MTP: true})
		out = append(out, Param{Name: p + "shared_head.head.weight", Shape: []int64{c.Vocab, c.Hidden}, Layer: l, MTP: true})
	}
	return out
}

func (c *Config) layerParams(out []Param, l int, mtp bool) []Param {
	p := fmt.Sprintf("model.layers.%d.", l)
	add := func(name string, shape ...int64) {
		out = append(out, Param{Name: p + name, Shape: shape, Layer: l, MTP: mtp})
	}
	H := c.Hidden
	add("input_layernorm.weight", H)
	if c.MLA() {
		qk := c.QKNopeHeadDim + c.QKRopeHeadDim
		nh := int64(c.Heads)
		if c.QLoraRank > 0 {
			add("self_attn.q_a_proj.weight", c.QLoraRank, H)
			add("self_attn.q_a_layernorm.weight", c.QLoraRank)
			add("self_attn.q_b_proj.weight", nh*qk, c.QLoraRank)
		} else {
			add("self_attn.q_proj.weight", nh*qk, H)
		}
		add("self_attn.kv_a_proj_with_mqa.weight", c.KVLoraRank+c.QKRopeHeadDim, H)
		add("self_attn.kv_a_layernorm.weight", c.KVLoraRank)
		add("self_attn.kv_b_proj.weight", nh*(c.QKNopeHeadDim+c.VHeadDim), c.KVLoraRank)
		add("self_attn.o_proj.weight", H, nh*c.VHeadDim)
	} else {
		q, kv := int64(c.Heads)*c.HeadDim, int64(c.KVHeads)*c.HeadDim
		add("self_attn.q_proj.weight", q, H)
		add("self_attn.k_proj.weight", kv, H)
		add("self_attn.v_proj.weight", kv, H)
		if c.QKVBias {
			add("self_attn.q_proj.bias", q)
			add("self_attn.k_proj.bias", kv)
			add("self_attn.v_proj.bias", kv)
		}
		add("self_attn.o_proj.weight", H, q)
		if c.QKNorm {
			add("self_attn.q_norm.weight", c.HeadDim)
			add("self_attn.k_norm.weight", c.HeadDim)
		}
	}
	add("post_attention_layernorm.weight", H)
	if c.SandwichNorms {
		add("pre_feedforward_layernorm.weight", H)
		add("post_feedforward_layernorm.weight", H)
	}
	if !c.MoELayer(l) {
		add("mlp.gate_proj.weight", c.Intermediate, H)
		add("mlp.up_proj.weight", c.Intermediate, H)
		add("mlp.down_proj.weight", H, c.Intermediate)
		return out
	}
	E, I := int64(c.Experts), c.MoEIntermediate
	b := c.moeBlock + "."
	add(b+"gate.weight", E, H)
	if c.RouterBias {
		add(b+"gate.e_score_correction_bias", E)
	}
	g, u, d := c.expertProj[0], c.expertProj[1], c.expertProj[2]
	for e := range c.Experts {
		add(fmt.Sprintf("%sexperts.%d.%s.weight", b, e, g), I, H)
		add(fmt.Sprintf("%sexperts.%d.%s.weight", b, e, u), I, H)
		add(fmt.Sprintf("%sexperts.%d.%s.weight", b, e, d), H, I)
	}
	if c.SharedExperts > 0 {
		S := int64(c.SharedExperts) * I
		add("mlp.shared_experts.gate_proj.weight", S, H)
		add("mlp.shared_experts.up_proj.weight", S, H)
		add("mlp.shared_experts.down_proj.weight", H, S)
	}
	return out
}

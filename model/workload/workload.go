// Package workload turns a whole model into tensors to move: it reads a
// Hugging Face style config.json, lists the model's parameters, and lays
// each out as a Megatron-LM trainer and a vLLM generator store it — with
// pipeline stages, expert parallelism, fused parameters as separate parts,
// and small replicated tensors packed into buckets. docs/workloads.md gives
// every rule and its source.
//
// The package is pure: it never reads files. Callers pass a config's bytes.
package workload

import (
	"fmt"
	"slices"

	"github.com/m2n-project/m2n/model/layout"
)

// DefaultBucketBytes is the default bucket size for replicated tensors.
const DefaultBucketBytes = 64 << 20

// Spec is a refit: a model, its dtype, and both sides' layouts.
type Spec struct {
	Config    *Config
	DType     layout.DType
	Trainer   Megatron
	Generator VLLM
	// BucketBytes bounds the buckets that replicated tensors are packed
	// into; 0 turns bucketing off.
	BucketBytes int64
	// Quant, when on, quantizes the generator's linear weights (attention,
	// dense MLPs, experts, shared experts; two dims or more) to fp8_e4m3
	// with these scales, as vLLM's block-FP8 (and FP8) methods hold them;
	// embeddings, the LM head, norms and routers stay in DType.
	Quant layout.Quant
	// MTP moves the multi-token-prediction layers too ([Config.MTPWeights]).
	MTP bool
}

// Tensor is one tensor to move, with both layouts: a weight (or one part
// of a fused weight), or a bucket of replicated weights.
type Tensor struct {
	Name     string
	Class    string // a Class constant; ClassBucket for a bucket
	Stage    int    // the trainer pipeline stage that holds it
	Src, Dst layout.Layout
	Quant    layout.Quant // a quantized weight: Dst.DType is fp8_e4m3
	// Members lists a bucket's weights in the order they are concatenated
	// (flattened, row-major); empty for a single weight.
	Members []Member
}

// Member is one weight inside a bucket.
type Member struct {
	Name   string
	Class  string
	Offset int64 // first element in the bucket
	Elems  int64
}

// Bytes is the tensor's size in bytes.
func (t *Tensor) Bytes() int64 { return t.Src.Bytes() }

// Check verifies that both layouts divide the model.
func (s *Spec) Check() error {
	if s.Config == nil {
		return fmt.Errorf("model: missing")
	}
	if !s.DType.Valid() {
		return fmt.Errorf("dtype: missing")
	}
	if s.BucketBytes < 0 {
		return fmt.Errorf("bucket = %d bytes: must not be negative", s.BucketBytes)
	}
	if err := s.Trainer.Check(s.Config); err != nil {
		return fmt.Errorf("trainer.%w", err)
	}
	if err := s.Generator.Check(s.Config); err != nil {
		return fmt.Errorf("generator.%w", err)
	}
	return nil
}

// Tensors lays out every weight of the main model on both sides and packs
// the replicated ones into buckets. The order is the checkpoint's, a bucket
// standing where its first member was.
func (s *Spec) Tensors() ([]Tensor, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	c := s.Config
	tr := s.Trainer.Resolved(c)
	ws := c.Weights()
	if s.MTP {
		if c.MTPLayers == 0 {
			return nil, fmt.Errorf("mtp = true: the model has no multi-token-prediction layer (num_nextn_predict_layers = 0)")
		}
		ws = append(ws, c.MTPWeights()...)
	}
	out := make([]Tensor, 0, len(ws))
	for i := range ws {
		w := &ws[i]
		t := Tensor{Name: w.Name, Class: w.Class, Stage: tr.Stage(w.Layer),
			Src: tr.Layout(w, s.DType), Dst: s.Generator.Layout(w, c, s.DType)}
		for side, l := range []layout.Layout{t.Src, t.Dst} {
			if err := l.Validate(); err != nil {
				return nil, fmt.Errorf("%s (%s): %s layout: %w (a bug in m2n)", w.Name, w.Rule, [2]string{"trainer", "generator"}[side], err)
			}
		}
		if s.Quant.On() && quantized(w) {
			q, err := s.Quant.ForLayout(t.Dst)
			if err != nil {
				return nil, fmt.Errorf("dst_dtype = \"fp8_e4m3\" (%v scales): generator tp = %d, ep = %d: %s: %w", s.Quant.Scheme, s.Generator.TP, s.Generator.EP, w.Name, err)
			}
			t.Dst.DType, t.Quant = layout.FP8E4M3, q
			if err := layout.ValidateQuant(s.DType, t.Dst.DType, w.Shape, q); err != nil {
				return nil, fmt.Errorf("dst_dtype = \"fp8_e4m3\": %w", err)
			}
			if _, err := layout.LandingLayout(t.Dst, q); err != nil {
				return nil, fmt.Errorf("dst_dtype = \"fp8_e4m3\" (%v scales): generator tp = %d, ep = %d: %s: %w", s.Quant, s.Generator.TP, s.Generator.EP, w.Name, err)
			}
		}
		out = append(out, t)
	}
	if s.BucketBytes > 0 {
		out = Bucket(out, s.BucketBytes)
	}
	return out, nil
}

// quantized reports whether a quantized generator holds the weight in
// fp8: the linear layers (attention, dense MLPs, routed and shared
// experts), as DeepSeek-V3's and Kimi-K2's FP8 checkpoints and vLLM's
// block-FP8 methods do; not embeddings, the LM head, norms or routers.
func quantized(w *Weight) bool {
	switch w.Class {
	case ClassAttention, ClassDenseMLP, ClassExperts, ClassSharedExperts:
		return len(w.Shape) >= 2
	}
	return false
}

// Bucket packs tensors that are replicated on every rank of both sides and
// share both meshes into flat 1-D buckets of at most limit bytes, so one
// transfer carries many norms and routers instead of one each (per-op
// latency would otherwise dominate). A tensor of limit bytes or more moves
// on its own. A bucket takes the place of its first member; the others
// keep their order.
func Bucket(ts []Tensor, limit int64) []Tensor {
	type key struct {
		dt       layout.DType
		src, dst string
	}
	open := map[key]int{} // the bucket being filled, by index in out
	count := map[int]int{}
	var out []Tensor
	for _, t := range ts {
		if !replicated(t.Src) || !replicated(t.Dst) || t.Bytes() >= limit || len(t.Members) > 0 || t.Quant.On() {
			out = append(out, t)
			continue
		}
		k := key{t.Src.DType, fmt.Sprint(t.Src.Mesh.Ranks), fmt.Sprint(t.Dst.Mesh.Ranks)}
		i, ok := open[k]
		if ok && out[i].Bytes()+t.Bytes() > limit {
			ok = false
		}
		if !ok {
			n := count[t.Stage]
			count[t.Stage]++
			b := Tensor{
				Name: fmt.Sprintf("bucket.stage%d.%d", t.Stage, n), Class: ClassBucket, Stage: t.Stage,
				Src: flat(t.Src, 0), Dst: flat(t.Dst, 0),
			}
			out = append(out, b)
			i = len(out) - 1
			open[k] = i
		}
		b := &out[i]
		n := b.Src.Shape[0]
		if len(b.Members) == 0 {
			n = 0
		}
		e := t.Src.Elems()
		b.Members = append(b.Members, Member{Name: t.Name, Class: t.Class, Offset: n, Elems: e})
		b.Src, b.Dst = flat(b.Src, n+e), flat(b.Dst, n+e)
	}
	return out
}

// replicated reports whether every mesh axis replicates.
func replicated(l layout.Layout) bool {
	for _, p := range l.Placements {
		if p.Shard {
			return false
		}
	}
	return true
}

// flat is a 1-D tensor of n elements replicated over l's ranks (a 1-D mesh
// in l's rank order).
func flat(l layout.Layout, n int64) layout.Layout {
	return layout.Layout{
		Shape: []int64{max(n, 1)}, DType: l.DType,
		Mesh:       layout.Mesh{Shape: []int{len(l.Mesh.Ranks)}, Ranks: slices.Clone(l.Mesh.Ranks)},
		Placements: []layout.Placement{layout.R},
	}
}

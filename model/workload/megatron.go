package workload

import (
	"fmt"

	"github.com/m2n-project/m2n/model/layout"
)

// Megatron is a trainer's parallel layout in Megatron-LM's conventions.
//
// World = TP x CP x DP x PP ranks. Megatron orders ranks "tp-cp-ep-dp-pp"
// (TP fastest, PP slowest), so pipeline stage p holds ranks
// [p S, (p+1) S) of Ranks with S = TP x CP x DP. Within a stage, dense
// weights live on the mesh [DP, CP, TP] and expert weights on [EDP, EP,
// ETP], with EDP = S / (EP x ETP): the expert axes are carved out of the
// same ranks (Megatron's expert RankGenerator).
type Megatron struct {
	TP, CP, DP, PP int
	EP, ETP        int   // expert model and expert tensor parallel sizes
	Stages         []int // decoder layers per pipeline stage; nil: Layers / PP each
	Ranks          []int // the global ranks, in Megatron rank order; len = world
}

// StageSize is the number of ranks of one pipeline stage.
func (m *Megatron) StageSize() int { return m.TP * m.CP * m.DP }

// World is the number of trainer ranks.
func (m *Megatron) World() int { return m.StageSize() * m.PP }

// Check verifies that the layout is well formed and divides the model as
// Megatron requires. Errors name the field as a scenario writes it
// ("ep = 3: ...").
func (m *Megatron) Check(c *Config) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"tp", m.TP}, {"cp", m.CP}, {"dp", m.DP}, {"pp", m.PP}, {"ep", m.EP}, {"etp", m.ETP}} {
		if f.v < 1 {
			return fmt.Errorf("%s = %d: must be at least 1", f.name, f.v)
		}
		if f.v > layout.MaxRank {
			return fmt.Errorf("%s = %d: too large", f.name, f.v)
		}
	}
	if w := int64(m.TP) * int64(m.CP) * int64(m.DP) * int64(m.PP); w > layout.MaxRank {
		return fmt.Errorf("tp x cp x dp x pp = %d: more ranks than m2n allows (%d)", w, layout.MaxRank)
	}
	if len(m.Ranks) != m.World() {
		return fmt.Errorf("ranks: %d ranks, but tp x cp x dp x pp = %d x %d x %d x %d = %d", len(m.Ranks), m.TP, m.CP, m.DP, m.PP, m.World())
	}
	if m.PP > c.Layers {
		return fmt.Errorf("pp = %d: more pipeline stages than the model's %d layers (num_hidden_layers)", m.PP, c.Layers)
	}
	if m.Stages != nil {
		if len(m.Stages) != m.PP {
			return fmt.Errorf("stages: %d stages listed, but pp = %d", len(m.Stages), m.PP)
		}
		sum := 0
		for i, n := range m.Stages {
			if n < 1 {
				return fmt.Errorf("stages[%d] = %d: every stage needs at least one layer", i, n)
			}
			sum += n
		}
		if sum != c.Layers {
			return fmt.Errorf("stages %v: sum to %d layers, but the model has %d (num_hidden_layers)", m.Stages, sum, c.Layers)
		}
	} else if c.Layers%m.PP != 0 {
		return fmt.Errorf("pp = %d: does not divide the %d layers (num_hidden_layers); list the layers of each stage in stages", m.PP, c.Layers)
	}
	if c.Heads%m.TP != 0 {
		return fmt.Errorf("tp = %d: does not divide num_attention_heads = %d (Megatron splits heads over TP)", m.TP, c.Heads)
	}
	if !c.MLA() && c.KVHeads%m.TP != 0 {
		return fmt.Errorf("tp = %d: does not divide num_key_value_heads = %d (Megatron's query groups must split evenly over TP)", m.TP, c.KVHeads)
	}
	if c.Vocab%int64(m.TP) != 0 {
		return fmt.Errorf("tp = %d: does not divide vocab_size = %d (Megatron's vocab-parallel embedding, without padding)", m.TP, c.Vocab)
	}
	if err := divides("tp", m.TP, c.denseWidths()); err != nil {
		return err
	}
	if c.Experts > 0 {
		s := m.StageSize()
		if s%(m.EP*m.ETP) != 0 {
			return fmt.Errorf("ep x etp = %d x %d: does not divide the %d ranks of a stage (tp x cp x dp)", m.EP, m.ETP, s)
		}
		if c.Experts%m.EP != 0 {
			return fmt.Errorf("ep = %d: does not divide the %d routed experts (%s)", m.EP, c.Experts, c.expertsKey())
		}
		if c.MoEIntermediate%int64(m.ETP) != 0 {
			return fmt.Errorf("etp = %d: does not divide moe_intermediate_size = %d", m.ETP, c.MoEIntermediate)
		}
	} else if m.EP != 1 {
		return fmt.Errorf("ep = %d: the model has no experts; leave ep at 1", m.EP)
	}
	return nil
}

// Stage returns the pipeline stage holding a weight: embeddings on the
// first, model.norm and the LM head on the last, decoder layers by the
// stage sizes. The layout must have been checked, and Stages filled
// ([Megatron.Resolved]).
func (m *Megatron) Stage(layer int) int {
	switch layer {
	case LayerEmbedding:
		return 0
	case LayerHead:
		return m.PP - 1
	}
	first := 0
	for p, n := range m.Stages {
		if layer < first+n {
			return p
		}
		first += n
	}
	return m.PP - 1
}

// Resolved returns a copy with Stages filled: as given, or the layers split
// evenly. The layout must have passed Check.
func (m Megatron) Resolved(c *Config) Megatron {
	if m.Stages == nil {
		m.Stages = make([]int, m.PP)
		for p := range m.Stages {
			m.Stages[p] = c.Layers / m.PP
		}
	} else {
		m.Stages = append([]int(nil), m.Stages...)
	}
	return m
}

// StageRanks returns the ranks of pipeline stage p, in Megatron order.
func (m *Megatron) StageRanks(p int) []int {
	s := m.StageSize()
	return m.Ranks[p*s : (p+1)*s]
}

// Layout returns the weight's layout on its pipeline stage.
func (m *Megatron) Layout(w *Weight, dt layout.DType) layout.Layout {
	ranks := m.StageRanks(m.Stage(w.Layer))
	l := layout.Layout{Shape: w.Shape, DType: dt}
	switch w.Rule {
	case ExpertColumn, ExpertRow:
		edp := m.StageSize() / (m.EP * m.ETP)
		d := 1
		if w.Rule == ExpertRow {
			d = 2
		}
		l.Mesh, l.Placements = mesh(ranks, []axis{{edp, layout.R}, {m.EP, layout.S(0)}, {m.ETP, layout.S(d)}})
	default:
		tp := layout.R
		switch w.Rule {
		case Column, Vocab, KV:
			tp = layout.S(0)
		case Row:
			tp = layout.S(1)
		}
		l.Mesh, l.Placements = mesh(ranks, []axis{{m.DP, layout.R}, {m.CP, layout.R}, {m.TP, tp}})
	}
	return l
}

// axis is one mesh axis: its size and placement.
type axis struct {
	n int
	p layout.Placement
}

// mesh builds a mesh over ranks (row-major over the axes, last fastest),
// leaving out axes of size 1 (keeping one axis at least).
func mesh(ranks []int, axes []axis) (layout.Mesh, []layout.Placement) {
	var shape []int
	var ps []layout.Placement
	for _, a := range axes {
		if a.n > 1 {
			shape = append(shape, a.n)
			ps = append(ps, a.p)
		}
	}
	if len(shape) == 0 {
		shape, ps = []int{1}, []layout.Placement{layout.R}
	}
	return layout.Mesh{Shape: shape, Ranks: ranks}, ps
}

// divides checks that n divides each named width.
func divides(field string, n int, widths []namedWidth) error {
	for _, w := range widths {
		if w.v%int64(n) != 0 {
			return fmt.Errorf("%s = %d: does not divide %s = %d", field, n, w.key, w.v)
		}
	}
	return nil
}

type namedWidth struct {
	key string
	v   int64
}

// denseWidths are the dims a dense tensor-parallel split divides: the dense
// MLP width (when a layer uses it), the shared experts' width, and the
// attention projections' widths.
func (c *Config) denseWidths() []namedWidth {
	var out []namedWidth
	anyDense := false
	for l := range c.Layers {
		anyDense = anyDense || !c.MoELayer(l)
	}
	if anyDense {
		out = append(out, namedWidth{"intermediate_size", c.Intermediate})
	}
	if c.SharedExperts > 0 {
		out = append(out, namedWidth{"n_shared_experts x moe_intermediate_size", int64(c.SharedExperts) * c.MoEIntermediate})
	}
	return out
}

func (c *Config) expertsKey() string {
	switch c.ModelType {
	case DeepSeekV3, DeepSeekV2:
		return "n_routed_experts"
	case Mixtral:
		return "num_local_experts"
	}
	return "num_experts"
}

package scenario

import (
	"errors"
	"fmt"
	"sync"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/model/workload"
)

// ModelLoader returns the config.json of the model a [workload] names, a
// built-in name or a file path as the caller resolves it, with a name for it
// in messages. The scenario package never reads files itself.
type ModelLoader func(model string) (origin string, config []byte, err error)

// models loads and caches the workload's model configs: each sweep point
// resolves the document afresh, the config is read once.
type models struct {
	load  ModelLoader
	mu    sync.Mutex
	cache map[string]*workload.Config
}

func (m *models) get(name string) (*workload.Config, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.cache[name]; ok {
		return c, nil
	}
	if m.load == nil {
		return nil, fmt.Errorf("model = %q: no model loader (parse the scenario with ParseWith)", name)
	}
	origin, data, err := m.load(name)
	if err != nil {
		return nil, fmt.Errorf("model = %q: %w", name, err)
	}
	c, err := workload.ParseConfig(origin, data)
	if err != nil {
		return nil, fmt.Errorf("model = %q: %w", name, err)
	}
	if m.cache == nil {
		m.cache = map[string]*workload.Config{}
	}
	m.cache[name] = c
	return c, nil
}

// workload resolves a [workload] table to its tensors and the ranks they
// touch. Errors name the field below "workload." ("trainer.ep = 3: ...").
func (s *Scenario) workload(ws *WorkloadSpec) ([]Tensor, []int, error) {
	if ws.Model == "" {
		return nil, nil, errors.New("model: missing; name a built-in model or a config.json file")
	}
	if ws.DType == "" {
		return nil, nil, errors.New("dtype: missing, e.g. \"bf16\"")
	}
	dt, err := layout.ParseDType(ws.DType)
	if err != nil {
		return nil, nil, fmt.Errorf("dtype: %w", err)
	}
	spec := workload.Spec{DType: dt, BucketBytes: workload.DefaultBucketBytes, MTP: ws.MTP}
	if _, spec.Quant, err = ws.QuantSpec.resolve(dt); err != nil {
		return nil, nil, err
	}
	if ws.Bucket != nil {
		if *ws.Bucket < 0 {
			return nil, nil, fmt.Errorf("bucket = %v: must not be negative (\"0 B\" turns bucketing off)", units.Bytes(*ws.Bucket))
		}
		spec.BucketBytes = int64(*ws.Bucket)
	}
	if ws.Trainer == nil {
		return nil, nil, errors.New("trainer: missing; add a [workload.trainer] table")
	}
	if ws.Generator == nil {
		return nil, nil, errors.New("generator: missing; add a [workload.generator] table")
	}
	if spec.Trainer, err = trainerFrom(ws.Trainer); err != nil {
		return nil, nil, fmt.Errorf("trainer.%w", err)
	}
	if spec.Generator, err = generatorFrom(ws.Generator); err != nil {
		return nil, nil, fmt.Errorf("generator.%w", err)
	}
	if spec.Config, err = s.models.get(ws.Model); err != nil {
		return nil, nil, err
	}
	if ws.Layers != nil {
		if n := *ws.Layers; n < 1 || n > spec.Config.Layers {
			return nil, nil, fmt.Errorf("layers = %d: must be in [1, %d] (the model's num_hidden_layers)", n, spec.Config.Layers)
		}
		c := *spec.Config // the cached config is shared: change a copy
		c.Layers = *ws.Layers
		spec.Config = &c
	}
	ts, err := spec.Tensors()
	if err != nil {
		return nil, nil, err
	}
	out := make([]Tensor, len(ts))
	for i, t := range ts {
		out[i] = Tensor{Name: t.Name, Src: t.Src, Dst: t.Dst, Quant: t.Quant, Class: t.Class, Members: t.Members}
	}
	ranks := append(append([]int(nil), spec.Trainer.Ranks...), spec.Generator.Ranks...)
	return out, ranks, nil
}

// size reads an optional parallel size: default def, else at least 1.
func size(name string, v *int, def int) (int, error) {
	if v == nil {
		return def, nil
	}
	if *v < 1 || *v > layout.MaxRank {
		return 0, fmt.Errorf("%s = %d: must be in [1, %d]", name, *v, layout.MaxRank)
	}
	return *v, nil
}

// ranksOf resolves a side's ranks: listed, or first_rank onward. per is the
// rank count of one dp index; dp is derived from a rank list when not given.
func ranksOf(ranks RankList, first *int, dp *int, per int) ([]int, int, error) {
	switch {
	case ranks != nil && first != nil:
		return nil, 0, errors.New("ranks: give ranks or first_rank, not both")
	case ranks != nil:
		if len(ranks)%per != 0 || len(ranks) == 0 {
			return nil, 0, fmt.Errorf("ranks: %d ranks is not a positive multiple of %d (the ranks of one data-parallel replica)", len(ranks), per)
		}
		n := len(ranks) / per
		if dp != nil && *dp != n {
			return nil, 0, fmt.Errorf("dp = %d: but the %d ranks give dp = %d", *dp, len(ranks), n)
		}
		m := layout.Mesh{Shape: []int{len(ranks)}, Ranks: ranks}
		if err := m.Validate(); err != nil {
			return nil, 0, fmt.Errorf("ranks: %w", err)
		}
		return ranks, n, nil
	case first != nil:
		if dp == nil {
			return nil, 0, errors.New("dp: missing; with first_rank, give dp (or list the ranks)")
		}
		n, err := size("dp", dp, 1)
		if err != nil {
			return nil, 0, err
		}
		total := int64(n) * int64(per)
		if *first < 0 || total > layout.MaxRank || int64(*first) > layout.MaxRank-total {
			return nil, 0, fmt.Errorf("first_rank = %d with %d ranks: outside [0, %d)", *first, total, layout.MaxRank)
		}
		return layout.RankRange(*first, int(total)), n, nil
	}
	return nil, 0, errors.New("ranks: missing; give ranks (\"0-127\") or first_rank")
}

func trainerFrom(t *TrainerSpec) (workload.Megatron, error) {
	var m workload.Megatron
	if t.Framework != "" && t.Framework != "megatron" {
		return m, fmt.Errorf("framework = %q: m2n models \"megatron\" trainers", t.Framework)
	}
	var err error
	for _, f := range []struct {
		name string
		v    *int
		out  *int
	}{{"tp", t.TP, &m.TP}, {"pp", t.PP, &m.PP}, {"ep", t.EP, &m.EP}, {"cp", t.CP, &m.CP}} {
		if *f.out, err = size(f.name, f.v, 1); err != nil {
			return m, err
		}
	}
	if m.ETP, err = size("etp", t.ETP, m.TP); err != nil {
		return m, err
	}
	m.Stages = t.Stages
	if m.Ranks, m.DP, err = ranksOf(t.Ranks, t.FirstRank, t.DP, m.TP*m.CP*m.PP); err != nil {
		return m, err
	}
	return m, nil
}

func generatorFrom(g *GeneratorSpec) (workload.VLLM, error) {
	var v workload.VLLM
	if g.Framework != "" && g.Framework != "vllm" {
		return v, fmt.Errorf("framework = %q: m2n models \"vllm\" generators", g.Framework)
	}
	var err error
	if v.TP, err = size("tp", g.TP, 1); err != nil {
		return v, err
	}
	if v.EP, err = size("ep", g.EP, 1); err != nil {
		return v, err
	}
	if v.Ranks, v.DP, err = ranksOf(g.Ranks, g.FirstRank, g.DP, v.TP); err != nil {
		return v, err
	}
	return v, nil
}

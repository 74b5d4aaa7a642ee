package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/plan/ir"
)

// The nemo-legacy SOL is a lower bound: with line rates and no latency, no
// schedule of the route runs faster, on random pipeline-staged batches
// (each stage its own source ranks and root, one generator). It is also
// reached on the paper's single tensor, where the all-gather (over NVLink)
// precedes the broadcast (from the root's NIC): the bound adds the two.
func TestLegacySOL(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	for i := range 40 {
		tp, _ := topo.Preset("hgx-h200")
		tp.GPUsPerDomain = 2 + rng.IntN(7)
		stages := 1 + rng.IntN(3)
		per := 1 + rng.IntN(4)
		gen := 1 + rng.IntN(8)
		var tensors []ir.Tensor
		for k := range 1 + rng.IntN(6) {
			p := rng.IntN(stages)
			shape := []int64{int64(4 + rng.IntN(40)), int64(8 + rng.IntN(64))}
			src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{per}, Ranks: layout.RankRange(p*per, per)},
				Placements: []layout.Placement{[]layout.Placement{layout.R, layout.S(0), layout.S(1)}[rng.IntN(3)]}}
			dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{gen}, Ranks: layout.RankRange(stages*per, gen)},
				Placements: []layout.Placement{[]layout.Placement{layout.R, layout.S(0), layout.S(1)}[rng.IntN(3)]}}
			tensors = append(tensors, ir.Tensor{Name: string(rune('a' + k)), Src: src, Dst: dst})
		}
		tp.Domains = (stages*per+gen)/tp.GPUsPerDomain + 1
		s, err := plan.Build(tensors, tp, plan.Options{Route: plan.NemoLegacy, ChunkBytes: int64(64 << rng.IntN(4))})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(s, tp, Options{Ideal: true})
		if err != nil {
			t.Fatal(err)
		}
		sol, err := plan.Bound(plan.NemoLegacy, tensors, tp)
		if err != nil {
			t.Fatal(err)
		}
		if float64(res.Makespan) < float64(sol.Time)*(1-1e-9)-1 {
			t.Fatalf("case %d: ideal %v beats the SOL %v (%s)", i, res.Makespan, sol.Time, sol.Term)
		}
	}
	s, err := plan.Build(paper(2), nvl72(2), plan.Options{Route: plan.NemoLegacy})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := Run(s, nvl72(2), Options{Ideal: true})
	sol, _ := plan.Bound(plan.NemoLegacy, paper(2), nvl72(2))
	B := 7168.0 * (1 << 20)
	want := B/50e9 + 15*B/16/900e9
	if got := sol.Time.Seconds(); got < want*(1-1e-9) || got > want*(1+1e-9) {
		t.Errorf("paper SOL %v s, want B/B_N + (15/16) B/B_NVL = %v s", got, want)
	}
	if r := float64(res.Makespan) / float64(sol.Time); r < 1 || r > 1.01 {
		t.Errorf("paper: ideal %v vs SOL %v (ratio %.4f)", res.Makespan, sol.Time, r)
	}
}

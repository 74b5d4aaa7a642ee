package evaluate

import (
	"math/rand/v2"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/sim"
)

func paper(rho int) []ir.Tensor {
	shape := []int64{256, 2048, 7168}
	return []ir.Tensor{{
		Name: "gate_proj",
		Src:  layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{16}, Ranks: layout.RankRange(0, 16)}, Placements: []layout.Placement{layout.S(0)}},
		Dst:  layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{rho, 8}, Ranks: layout.RankRange(72, 8*rho)}, Placements: []layout.Placement{layout.R, layout.S(1)}},
	}}
}

func nvl72(domains int) *topo.Topology {
	t, _ := topo.Preset("gb200-nvl72")
	t.Domains = domains
	return t
}

// With line rates and no latency, the simulated time of the paper's case
// equals the SOL within 1% for every route.
func TestIdealMatchesSOL(t *testing.T) {
	for _, rho := range []int{2, 4, 8} {
		for _, route := range plan.Routes {
			s, err := plan.Build(paper(rho), nvl72(2), plan.Options{Route: route})
			if err != nil {
				t.Fatal(err)
			}
			res, err := sim.Run(s, nvl72(2), sim.Options{Ideal: true})
			if err != nil {
				t.Fatal(err)
			}
			sol, err := plan.Bound(route, paper(rho), nvl72(2))
			if err != nil {
				t.Fatal(err)
			}
			ratio := float64(res.Makespan) / float64(sol.Time)
			t.Logf("rho %d %-12s SOL %v modeled %v ratio %.4f bottleneck %s", rho, route, sol.Time, res.Makespan, ratio, res.Bottleneck.Name)
			if ratio < 1-1e-9 || ratio > 1.01 {
				t.Errorf("rho %d %s: ideal %v vs SOL %v (ratio %.4f)", rho, route, res.Makespan, sol.Time, ratio)
			}
		}
	}
}

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
		res, err := sim.Run(s, tp, sim.Options{Ideal: true})
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
	res, err := sim.Run(s, nvl72(2), sim.Options{Ideal: true})
	if err != nil {
		t.Fatal(err)
	}
	sol, err := plan.Bound(plan.NemoLegacy, paper(2), nvl72(2))
	if err != nil {
		t.Fatal(err)
	}
	B := 7168.0 * (1 << 20)
	want := B/50e9 + 15*B/16/900e9
	if got := sol.Time.Seconds(); got < want*(1-1e-9) || got > want*(1+1e-9) {
		t.Errorf("paper SOL %v s, want B/B_N + (15/16) B/B_NVL = %v s", got, want)
	}
	if r := float64(res.Makespan) / float64(sol.Time); r < 1 || r > 1.01 {
		t.Errorf("paper: ideal %v vs SOL %v (ratio %.4f)", res.Makespan, sol.Time, r)
	}
}

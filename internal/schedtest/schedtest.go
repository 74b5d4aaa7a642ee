// Package schedtest builds schedules for the tests of the executors and
// of the executor's program: random ones over twelve ranks, and the paper
// layer on two GPUs. Tests only.
package schedtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
)

// Layout draws a layout of shape over some of ranks: a mesh of one or two
// axes, each replicated or sharded on a random dim, a random dtype.
func Layout(rng *rand.Rand, shape []int64, ranks []int) layout.Layout {
	na := 1 + rng.IntN(2)
	ms := make([]int, na)
	size := 1
	for a := range ms {
		ms[a] = 1 + rng.IntN(3)
		size *= ms[a]
	}
	perm := rng.Perm(len(ranks))
	rs := make([]int, size)
	for i := range rs {
		rs[i] = ranks[perm[i%len(perm)]] // may repeat when size > len: retried below
	}
	ps := make([]layout.Placement, na)
	for a := range ps {
		if rng.IntN(3) > 0 {
			ps[a] = layout.S(rng.IntN(len(shape)))
		}
	}
	return layout.Layout{Shape: shape, DType: []layout.DType{layout.BF16, layout.FP32, layout.Int8}[rng.IntN(3)], Mesh: layout.Mesh{Shape: ms, Ranks: rs}, Placements: ps}
}

// Random builds a verified schedule over ranks 0..11 in domains of 4:
// random layouts, route, chunk, staging cap and one to three tensors.
func Random(t testing.TB, rng *rand.Rand) *ir.Schedule {
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 4, 3
	for {
		nd := 1 + rng.IntN(3)
		shape := make([]int64, nd)
		for d := range shape {
			shape[d] = 1 + rng.Int64N(9)
		}
		src := Layout(rng, shape, []int{0, 1, 2, 3, 4, 5})
		dst := Layout(rng, shape, []int{4, 5, 6, 7, 8, 9, 10, 11})
		dst.DType = src.DType
		if src.Mesh.Validate() != nil || dst.Mesh.Validate() != nil {
			continue
		}
		route := plan.Routes[rng.IntN(len(plan.Routes))]
		opt := plan.Options{Route: route, ChunkBytes: 1 + rng.Int64N(48)}
		if rng.IntN(2) == 0 {
			// Coalesced: transfers under a few chunks go through slabs.
			below := 1 + rng.Int64N(96)
			slab := below + rng.Int64N(256)
			opt.Coalesce = plan.Coalesce{BelowBytes: below, SlabBytes: slab, BudgetBytes: 2*slab + rng.Int64N(1024)}
		}
		if rng.IntN(2) == 0 {
			// A staging cap: buffers share each rank's arena, reused once
			// consumed; one to three times the least cap that works when
			// the draw is below it, so that several buffers live at once.
			opt.StagingCapBytes = 1 + rng.Int64N(512)
		}
		// One to three tensors of the same layouts: a capped schedule then
		// places several tensors' staging in one arena.
		ts := []ir.Tensor{{Name: "t", Src: src, Dst: dst}}
		for k := range rng.IntN(3) {
			ts = append(ts, ir.Tensor{Name: fmt.Sprintf("t%d", k+1), Src: src, Dst: dst})
		}
		s, err := plan.Build(ts, tp, opt)
		var ce *plan.StagingCapError
		if errors.As(err, &ce) {
			opt.StagingCapBytes = ce.Need * (1 + rng.Int64N(3))
			s, err = plan.Build(ts, tp, opt)
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// TwoGPU is the paper layer's shape, experts x 256 x 1024 bf16, S(0) over
// GPUs 0 and 1 (each its own domain), wanted whole on both, on a route.
func TwoGPU(t testing.TB, route string, experts int64) *ir.Schedule {
	t.Helper()
	tp, err := topo.Preset("hgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	tp.GPUsPerDomain, tp.Domains = 1, 2
	shape := []int64{experts, 256, 1024}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{{}}}
	s, err := plan.Build([]ir.Tensor{{Name: "w", Src: src, Dst: dst}}, tp, plan.Options{Route: route, ChunkBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

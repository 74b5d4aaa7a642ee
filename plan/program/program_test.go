package program

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/plan/ir"
)

// Every transfer is in a later group than what it waits for, except the
// previous transfer of its own ordered pair, which NCCL runs first within a
// group; every local op is issued after the groups it waits for.
func TestGroupsRespectDependencies(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for i := range 200 {
		s := randomSchedule(t, rng)
		order, err := issueOrder(s)
		if err != nil {
			t.Fatal(err)
		}
		capBytes := []int64{0, -1, 1 + rng.Int64N(64)}[i%3]
		g := assignGroups(s, order, capBytes)
		for x := range int32(len(s.Ops)) {
			op := &s.Ops[x]
			xfer := op.Kind == ir.Send || op.Kind == ir.Recv
			gx := g.of[x]
			if xfer {
				gx = g.of[rep(s, x)]
			}
			for _, d := range s.Deps(x) {
				dop := &s.Ops[d]
				switch {
				case dop.Kind == ir.Send || dop.Kind == ir.Recv:
					gd := g.of[rep(s, d)]
					if xfer && dop.Kind == op.Kind && dop.Rank == op.Rank && dop.Peer == op.Peer {
						if gd > gx {
							t.Fatalf("case %d: op %d (group %d) after its pair's previous transfer %d (group %d)", i, x, gx, d, gd)
						}
					} else if gd >= gx {
						t.Fatalf("case %d (%s): op %d (group %d) waits for transfer %d in group %d", i, s.Route, x, gx, d, gd)
					}
				case g.of[d] > gx:
					t.Fatalf("case %d: op %d (group %d) waits for local op %d issued before group %d", i, x, gx, d, g.of[d])
				}
			}
		}
	}
}

func twoGPUSchedule(t *testing.T, route string, experts int64) *ir.Schedule {
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

// The paper's layer on two GPUs is one chain of chunks per ordered pair:
// one NCCL group for every route that sends each chunk once.
func TestGroupsOnePerPairChain(t *testing.T) {
	for _, route := range []string{plan.Flat, plan.Hierarchical} {
		s := twoGPUSchedule(t, route, 8)
		p, err := Compile(s, Options{Dev: func(r int32) int { return int(r) }, Lanes: 4, Mode: Waves})
		if err != nil {
			t.Fatal(err)
		}
		if p.Groups != 1 {
			t.Errorf("%s: %d groups, want 1", route, p.Groups)
		}
		// Each direction's chunks are one contiguous region on both sides:
		// one NCCL send/recv each way.
		xfers := 0
		for _, st := range p.Steps {
			if st.Kind == Xfer {
				xfers++
				if st.Bytes != 4*256*1024*2 {
					t.Errorf("%s: a transfer of %d bytes, want the whole half (%d)", route, st.Bytes, 4*256*1024*2)
				}
			}
		}
		if xfers != 2 {
			t.Errorf("%s: %d NCCL transfers, want 2 (one each way)", route, xfers)
		}
	}
}

// Transfers that forward what others received pipeline through several
// groups, each holding at most the cap per ordered pair.
func TestGroupsPipelineForwarding(t *testing.T) {
	tp, err := topo.Preset("hgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	tp.GPUsPerDomain, tp.Domains = 1, 3
	shape := []int64{8, 256, 1024} // 4 MiB
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{1}, Ranks: []int{0}}, Placements: []layout.Placement{{}}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{1, 2}}, Placements: []layout.Placement{{}}}
	s, err := plan.Build([]ir.Tensor{{Name: "w", Src: src, Dst: dst}}, tp, plan.Options{Route: plan.Hierarchical, ChunkBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	order, err := issueOrder(s)
	if err != nil {
		t.Fatal(err)
	}
	if g := assignGroups(s, order, -1); g.count != 2 {
		t.Errorf("uncut: %d groups, want 2 (receive, then forward)", g.count)
	}
	g := assignGroups(s, order, 512<<10)
	if g.count != 9 { // 4 MiB in 512 KiB groups, plus the forward's last
		t.Errorf("cut at 512 KiB: %d groups, want 9", g.count)
	}
	load := map[[3]int32]int64{}
	for _, i := range order {
		if op := &s.Ops[i]; op.Kind == ir.Send {
			k := [3]int32{op.Rank, op.Peer, g.of[i]}
			if load[k] += op.Src.Bytes; load[k] > 512<<10 {
				t.Fatalf("pair %d->%d carries %d bytes in group %d", op.Rank, op.Peer, load[k], g.of[i])
			}
		}
	}
	auto := assignGroups(s, order, 0)
	if auto.count < 2 || auto.count > 4 {
		t.Errorf("auto: %d groups (cap %d bytes), want 2-4 for 4 MiB through two stages", auto.count, auto.capBytes)
	}
}

// randomLayout draws a layout of shape over some of ranks.
func randomLayout(rng *rand.Rand, shape []int64, ranks []int) layout.Layout {
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

// randomSchedule builds a verified schedule over ranks 0..11 in domains of 4.
func randomSchedule(t *testing.T, rng *rand.Rand) *ir.Schedule {
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 4, 3
	for {
		nd := 1 + rng.IntN(3)
		shape := make([]int64, nd)
		for d := range shape {
			shape[d] = 1 + rng.Int64N(9)
		}
		src := randomLayout(rng, shape, []int{0, 1, 2, 3, 4, 5})
		dst := randomLayout(rng, shape, []int{4, 5, 6, 7, 8, 9, 10, 11})
		dst.DType = src.DType
		if src.Mesh.Validate() != nil || dst.Mesh.Validate() != nil {
			continue
		}
		route := plan.Routes[rng.IntN(len(plan.Routes))]
		opt := plan.Options{Route: route, ChunkBytes: 1 + rng.Int64N(48)}
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

package program

import (
	"github.com/m2n-project/m2n/internal/schedtest"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
)

// Every transfer is in a later group than what it waits for, except the
// previous transfer of its own ordered pair, which NCCL runs first within a
// group; every local op is issued after the groups it waits for.
func TestGroupsRespectDependencies(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for i := range 200 {
		s := schedtest.Random(t, rng)
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

// The paper's layer on two GPUs is one chain of chunks per ordered pair:
// one NCCL group for every route that sends each chunk once.
func TestGroupsOnePerPairChain(t *testing.T) {
	for _, route := range []string{plan.Flat, plan.Hierarchical} {
		s := schedtest.TwoGPU(t, route, 8)
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

// Receivers pull flat and hierarchical BF16 (sends read inputs, waiting
// only for earlier sends to the same peer); agbcast and nemo-legacy
// forward from staging, so they are pushed.
func TestPullable(t *testing.T) {
	for route, want := range map[string]bool{plan.Flat: true, plan.Hierarchical: true, plan.AGBcast: false, plan.NemoLegacy: false} {
		if err := Pullable(schedtest.TwoGPU(t, route, 4)); (err == nil) != want {
			t.Errorf("%s: Pullable says %v, want pullable %v", route, err, want)
		}
	}
}

// A batch of quantizes splits by kernel: a kernel's ops, two or more and
// within the block limit, share a launch in the order the kernels first
// appear; the others, and every op of a kernel without a batch form (the
// split kernels), run alone, in order.
func TestSplitQuantBatch(t *testing.T) {
	for _, c := range []struct {
		kernels []string
		blocks  []int64
		groups  [][]int
		alone   []int
	}{
		{[]string{"a", "b", "a", "c", "b"}, []int64{1, 2, 3, 4, 5}, [][]int{{0, 2}, {1, 4}}, []int{3}},
		{[]string{"a"}, []int64{7}, nil, []int{0}},
		{[]string{"a", "a", "b", "b"}, []int64{MaxQuantBatchBlocks, 1, 1, 0}, [][]int{{2, 3}}, []int{0, 1}},
		{[]string{"a", "a"}, []int64{MaxQuantBatchBlocks - 1, 1}, [][]int{{0, 1}}, nil},
		// the split kernels have no batch form: alone however many
		{[]string{"quantize_e4m3_split_bf16", "a", "quantize_e4m3_split_bf16", "a"}, []int64{1, 1, 1, 1}, [][]int{{1, 3}}, []int{0, 2}},
	} {
		groups, alone := SplitQuantBatch(c.kernels, c.blocks)
		if !reflect.DeepEqual(groups, c.groups) || !reflect.DeepEqual(alone, c.alone) {
			t.Errorf("SplitQuantBatch(%v, %v) = %v, %v; want %v, %v", c.kernels, c.blocks, groups, alone, c.groups, c.alone)
		}
	}
}

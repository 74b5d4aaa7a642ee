package sim

import (
	"fmt"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
)

// chains builds a synthetic schedule of n transfers: pairs of ranks (2p,
// 2p+1) in different domains, each pair a chain of transfers one after the
// other, so each connected component holds one flow at a time.
func chains(n, pairs int) (*ir.Schedule, *topo.Topology) {
	tp, _ := topo.Preset("gb200-nvl72")
	tp.Domains = 2
	s := &ir.Schedule{Route: "synthetic", ChunkBytes: 1 << 20}
	for p := range pairs {
		s.World = append(s.World, ir.Rank{Rank: p, GPU: p, Domain: 0})
	}
	for p := range pairs {
		s.World = append(s.World, ir.Rank{Rank: 72 + p, GPU: 72 + p, Domain: 1})
	}
	last := make([]int32, pairs)
	for p := range last {
		last[p] = -1
	}
	for i := range n {
		p := i % pairs
		var deps []int32
		if last[p] >= 0 {
			deps = []int32{last[p]}
		}
		id := int32(len(s.Ops))
		s.AddOp(ir.Op{Kind: ir.Send, Rank: int32(p), Peer: int32(72 + p), Match: id + 1, Src: ir.Region{Bytes: 1 << 20}}, deps...)
		s.AddOp(ir.Op{Kind: ir.Recv, Rank: int32(72 + p), Peer: int32(p), Match: id, Dst: ir.Region{Bytes: 1 << 20}})
		last[p] = id
	}
	return s, tp
}

// BenchmarkEvents measures flow start/finish events per second on small
// components, and how time grows with the flow count.
func BenchmarkEvents(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			s, tp := chains(n, 64)
			var events int64
			for b.Loop() {
				res, err := Run(s, tp, Options{})
				if err != nil {
					b.Fatal(err)
				}
				events = res.Events
			}
			b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkAllToAllNVL72 simulates a 72 x 71 all-to-all inside one NVL72
// domain: [S(0)] -> [S(1)] over the same 72 ranks, one 16 MiB block per pair.
func BenchmarkAllToAllNVL72(b *testing.B) {
	n := int64(72 * 64)
	shape := []int64{n, n * 32}
	ranks := layout.RankRange(0, 72)
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{72}, Ranks: ranks}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{72}, Ranks: ranks}, Placements: []layout.Placement{layout.S(1)}}
	tp := nvl72(1)
	s, err := plan.Build([]ir.Tensor{{Name: "a2a", Src: src, Dst: dst}}, tp, plan.Options{Route: plan.Flat, ChunkBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	if st := s.Stats(); st.Transfers != 72*71 {
		b.Fatalf("%d transfers, want %d", st.Transfers, 72*71)
	}
	for b.Loop() {
		if _, err := Run(s, tp, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPaper simulates the paper's case, rho = 8, every route.
func BenchmarkPaper(b *testing.B) {
	for _, route := range plan.Routes {
		s, err := plan.Build(paper(8), nvl72(2), plan.Options{Route: route})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(route, func(b *testing.B) {
			for b.Loop() {
				if _, err := Run(s, nvl72(2), Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

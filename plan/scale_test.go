package plan

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/scenario"
)

// oneToOne is a tensor of n int8 elements sharded S(0) over n ranks on both
// sides: rank i's element moves to rank i+shift mod n (shift 0: every rank
// copies its own element locally).
func oneToOne(n, shift int) []ir.Tensor {
	src := layout.RankRange(0, n)
	dst := make([]int, n)
	for i := range dst {
		dst[i] = (i + shift) % n
	}
	l := func(ranks []int) layout.Layout {
		return layout.Layout{Shape: []int64{int64(n)}, DType: layout.Int8, Mesh: layout.Mesh{Shape: []int{n}, Ranks: ranks}, Placements: []layout.Placement{layout.S(0)}}
	}
	return []ir.Tensor{{Name: "t", Src: l(src), Dst: l(dst)}}
}

// BenchmarkOneToOne100k plans and validates a one-to-one S(0) -> S(0)
// reshard over 100,000 ranks (flat), each rank sending its one byte to the
// next rank (shifted) or copying it locally (local); validate times
// ir.Schedule.Validate alone on the shifted schedule.
func BenchmarkOneToOne100k(b *testing.B) {
	const n = 100_000
	tp := nvl72((n + 71) / 72)
	for _, tc := range []struct {
		name  string
		shift int
	}{{"local", 0}, {"shifted", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			tensors := oneToOne(n, tc.shift)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(tensors, tp, Options{Route: Flat}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("validate", func(b *testing.B) {
		s, err := Build(oneToOne(n, 1), tp, Options{Route: Flat})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Inputs whose schedules would be too large are refused from their chunk
// counts, at once, with the numbers and the flags that change them.
func TestOpsLimit(t *testing.T) {
	l := func(shape []int64, dt layout.DType, mesh []int, first int, pl ...layout.Placement) layout.Layout {
		n := 1
		for _, m := range mesh {
			n *= m
		}
		return layout.Layout{Shape: shape, DType: dt, Mesh: layout.Mesh{Shape: mesh, Ranks: layout.RankRange(first, n)}, Placements: pl}
	}
	paper := paperTensors(2)
	for _, tc := range []struct {
		name    string
		tensors []ir.Tensor
		opt     Options
		err     string // "" when it builds
	}{
		{"1 B chunk", paper, Options{Route: Flat, ChunkBytes: 1}, "at least 1.5e10 ops at a 1 B chunk (limit 1e7): use a larger --chunk, or raise the limit with --max-ops"},
		{"1e5 x 1e6 bf16 legacy", []ir.Tensor{{Name: "w",
			Src: l([]int64{1e5, 1e6}, layout.BF16, []int{16}, 0, layout.S(0)),
			Dst: l([]int64{1e5, 1e6}, layout.BF16, []int{2, 8}, 72, layout.R, layout.S(1))}},
			Options{Route: NemoLegacy, ChunkBytes: 1 << 18}, "at least 4.8e7 ops at a 256 KiB chunk (limit 1e7)"},
		{"regions", []ir.Tensor{{Name: "w",
			Src: l([]int64{4096, 4096}, layout.Int8, []int{4096}, 0, layout.S(0)),
			Dst: l([]int64{4096, 4096}, layout.Int8, []int{4096}, 0, layout.S(1))}},
			Options{Route: Flat}, "layouts meet in 1.6e7 regions, each at least one op (limit 1e7 ops)"},
		{"limit raised", paper, Options{Route: Flat, ChunkBytes: 1 << 20, MaxOps: 1 << 20}, ""},
		{"limit lowered", paper, Options{Route: Flat, ChunkBytes: 1 << 20, MaxOps: 1000}, "at least 32768 ops at a 1 MiB chunk (limit 1000)"},
		{"local copies count once", []ir.Tensor{{Name: "w",
			Src: l([]int64{1 << 20}, layout.Int8, []int{8}, 0, layout.R),
			Dst: l([]int64{1 << 20}, layout.Int8, []int{8}, 0, layout.R)}},
			Options{Route: Flat, ChunkBytes: 1, MaxOps: 8}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Now()
			s, err := Build(tc.tensors, nvl72(2), tc.opt)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if limit := tc.opt.MaxOps; limit > 0 && int64(len(s.Ops)) > 2*limit {
					t.Errorf("%d ops, limit %d", len(s.Ops), limit)
				}
				return
			}
			var le *OpsLimitError
			if !errors.As(err, &le) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want an OpsLimitError containing %q", err, tc.err)
			}
			if d := time.Since(t0); d > time.Second {
				t.Errorf("refused after %v, want within 1 s", d)
			}
		})
	}
}

func TestChunkCountComputed(t *testing.T) {
	for _, tc := range []struct {
		size       []int64
		elem, cb   int64
		want       int64
		enumerable bool
	}{
		{[]int64{256, 2048, 7168}, 2, 4 << 20, 2048, true},
		{[]int64{16, 256, 7168}, 2, 4 << 20, 16, true},
		{[]int64{10, 3}, 4, 8, 20, true},
		{[]int64{7}, 1, 3, 3, true},
		{[]int64{1 << 30, 1 << 26}, 1, 1, 1 << 56, false},
		{[]int64{1 << 40, 1 << 40}, 8, 1, math.MaxInt64, false}, // saturates
	} {
		g := layout.Box{Start: make([]int64, len(tc.size)), Size: tc.size}
		if got := ChunkCount(g, tc.elem, tc.cb); got != tc.want {
			t.Errorf("ChunkCount(%v, %d, %d) = %d, want %d", tc.size, tc.elem, tc.cb, got, tc.want)
		}
		if tc.enumerable {
			if n := len(Chunks(g, tc.elem, tc.cb)); int64(n) != tc.want {
				t.Errorf("len(Chunks(%v)) = %d, ChunkCount %d", tc.size, n, tc.want)
			}
		}
	}
}

// The scenario reader knows the routes by name without importing the
// planner; the two lists must agree.
func TestScenarioRouteNames(t *testing.T) {
	if !slices.Equal(scenario.RouteNames, Routes) {
		t.Errorf("scenario.RouteNames = %v, plan.Routes = %v", scenario.RouteNames, Routes)
	}
}

// nemo-legacy's broadcast is a chain of sends after the root's gather: the
// validator finds each chunk's writers through the chain's first send once,
// and still refuses the chain when that send no longer waits for them.
func TestLegacyChainValidates(t *testing.T) {
	shape := []int64{64, 1024}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{4}, Ranks: layout.RankRange(0, 4)}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2, 2}, Ranks: layout.RankRange(8, 4)}, Placements: []layout.Placement{layout.R, layout.S(1)}}
	s, err := Build([]ir.Tensor{{Name: "w", Src: src, Dst: dst}}, nvl72(1), Options{Route: NemoLegacy, ChunkBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	// The op with the most dependencies: the broadcast's first send.
	first := int32(0)
	for i := range s.Ops {
		if s.Ops[i].DepLen > s.Ops[first].DepLen {
			first = int32(i)
		}
	}
	if op := s.Ops[first]; op.Kind != ir.Send || op.Rank != 0 || op.DepLen < 4 {
		t.Fatalf("op %d: %+v, want the root's first broadcast send", first, op)
	}
	s.Ops[first].DepLen = 0
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "which does not happen before it") {
		t.Errorf("Validate() = %v, want a read that does not follow its writer", err)
	}
}

// BenchmarkLegacyChain plans and validates nemo-legacy for a [25000,
// 1000000] bf16 tensor from 16 to 16 ranks: 11,000 chunks broadcast after
// the gather, 775,000 ops.
func BenchmarkLegacyChain(b *testing.B) {
	shape := []int64{25000, 1000000}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{16}, Ranks: layout.RankRange(0, 16)}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2, 8}, Ranks: layout.RankRange(72, 16)}, Placements: []layout.Placement{layout.R, layout.S(1)}}
	tensors := []ir.Tensor{{Name: "w", Src: src, Dst: dst}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(tensors, nvl72(2), Options{Route: NemoLegacy}); err != nil {
			b.Fatal(err)
		}
	}
}

// A buffer no GPU holds is refused before the schedule is built.
func TestBufferCeiling(t *testing.T) {
	shape := []int64{1e6, 1e6}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{16}, Ranks: layout.RankRange(0, 16)}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2, 8}, Ranks: layout.RankRange(72, 16)}, Placements: []layout.Placement{layout.R, layout.S(1)}}
	huge, hugeDst := src, dst
	huge.Shape, huge.DType = []int64{1 << 30, 1 << 26}, layout.Int8
	hugeDst.Shape, hugeDst.DType = huge.Shape, layout.Int8
	one := src
	one.Mesh = layout.Mesh{Shape: []int{1}, Ranks: []int{0}}
	one.Placements = []layout.Placement{layout.R}
	for _, tc := range []struct {
		name     string
		src, dst layout.Layout
		route    string
		err      string
	}{
		{"gathered", src, dst, NemoLegacy, "tensor w: route nemo-legacy gathers the whole tensor on one rank, 2000000000000 bytes: more than any GPU holds (at most 1099511627776 bytes, 1 TiB, per buffer)"},
		{"shard", one, dst, Flat, "tensor w: a rank's shard is 2000000000000 bytes: more than any GPU holds"},
		{"2^56 bytes", huge, hugeDst, AGBcast, "tensor w: route agbcast gathers the whole tensor on one rank, 72057594037927936 bytes"},
		{"2^56 bytes, flat", huge, hugeDst, Flat, "tensor w: a rank's shard is 9007199254740992 bytes"},
		{"fits", src, dst, Flat, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build([]ir.Tensor{{Name: "w", Src: tc.src, Dst: tc.dst}}, nvl72(2), Options{Route: tc.route, ChunkBytes: 1 << 30})
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ir.ErrTooLarge) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err = %v, want ErrTooLarge containing %q", err, tc.err)
			}
		})
	}
}

func TestDeriveLimit(t *testing.T) {
	l := func(p layout.Placement) layout.Layout {
		return layout.Layout{Shape: []int64{4096, 4096}, DType: layout.Int8, Mesh: layout.Mesh{Shape: []int{4096}, Ranks: layout.RankRange(0, 4096)}, Placements: []layout.Placement{p}}
	}
	var le *OpsLimitError
	if _, err := Derive(l(layout.S(0)), l(layout.S(1))); !errors.As(err, &le) || le.Ops != 4096*4096 {
		t.Errorf("Derive: %v, want 16777216 regions over the limit", err)
	}
	// Another limit, on a smaller mesh (building 2^24 regions takes 1.7 GB):
	// refused below the count, built at it.
	m := func(p layout.Placement) layout.Layout {
		return layout.Layout{Shape: []int64{512, 512}, DType: layout.Int8, Mesh: layout.Mesh{Shape: []int{512}, Ranks: layout.RankRange(0, 512)}, Placements: []layout.Placement{p}}
	}
	if _, err := DeriveLimit(m(layout.S(0)), m(layout.S(1)), 512*512-1); !errors.As(err, &le) || le.Ops != 512*512 {
		t.Errorf("DeriveLimit below the count: %v, want 262144 regions over the limit", err)
	}
	if r, err := DeriveLimit(m(layout.S(0)), m(layout.S(1)), 512*512); err != nil || len(r.Contribs) != 512*512 {
		t.Errorf("DeriveLimit at the count: %v", err)
	}
}

package plan

import (
	"testing"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/plan/ir"
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

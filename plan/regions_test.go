package plan

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/model/layout"
)

// oracleIndices lists the indices of one tensor dim held at a mesh
// coordinate, by slicing an explicit index list the way torch.chunk slices a
// tensor: an implementation independent of layout.Chunk's arithmetic.
func oracleIndices(l layout.Layout, c []int, d int) []int64 {
	idx := make([]int64, l.Shape[d])
	for i := range idx {
		idx[i] = int64(i)
	}
	for a, p := range l.Placements {
		if !p.Shard || p.Dim != d {
			continue
		}
		m := l.Mesh.Shape[a]
		n := len(idx)
		chunk := (n + m - 1) / m
		var pieces [][]int64
		for lo := 0; lo < n; lo += chunk {
			pieces = append(pieces, idx[lo:min(lo+chunk, n)])
		}
		if c[a] < len(pieces) {
			idx = pieces[c[a]]
		} else {
			idx = nil
		}
	}
	return idx
}

// oracleBox is the box at mesh position pos, or ok=false when it is empty.
func oracleBox(l layout.Layout, pos int) (layout.Box, bool) {
	c := make([]int, len(l.Mesh.Shape))
	l.Mesh.Coord(pos, c)
	b := layout.NewBox(len(l.Shape))
	for d := range l.Shape {
		idx := oracleIndices(l, c, d)
		if len(idx) == 0 {
			return b, false
		}
		for i := 1; i < len(idx); i++ {
			if idx[i] != idx[i-1]+1 {
				panic("oracle: non-contiguous indices")
			}
		}
		b.Start[d], b.Size[d] = idx[0], int64(len(idx))
	}
	return b, true
}

func meshPos(m layout.Mesh, rank int) int {
	for i, r := range m.Ranks {
		if r == rank {
			return i
		}
	}
	return -1
}

// checkAgainstOracle verifies, element by element, that every destination
// element is covered exactly once, by a supplier that holds it, and that a
// rank holding what it needs copies it locally.
func checkAgainstOracle(t testing.TB, src, dst layout.Layout, r *Regions) {
	t.Helper()
	for pos, rank := range dst.Mesh.Ranks {
		want, nonEmpty := oracleBox(dst, pos)
		needs := r.Needs(rank)
		if !nonEmpty {
			if len(needs) != 0 {
				t.Fatalf("rank %d holds an empty shard but needs %d regions", rank, len(needs))
			}
			continue
		}
		if k, _ := r.DstSlotOf(rank); k < 0 || !r.DstSlots[k].Box.Equal(want) {
			t.Fatalf("rank %d: destination slot box differs from oracle %v", rank, want)
		}
		count := make([]int, want.Elems())
		for _, n := range needs {
			if n.Box.Empty() {
				t.Fatalf("rank %d: empty region %v", rank, n.Box)
			}
			if !want.Contains(n.Box) {
				t.Fatalf("rank %d: region %v outside its box %v", rank, n.Box, want)
			}
			spos := meshPos(src.Mesh, n.Supplier)
			if spos < 0 {
				t.Fatalf("rank %d: supplier %d is not in the source mesh", rank, n.Supplier)
			}
			held, ok := oracleBox(src, spos)
			if !ok || !held.Contains(n.Box) {
				t.Fatalf("rank %d: supplier %d (box %v) does not hold region %v", rank, n.Supplier, held, n.Box)
			}
			if n.Local != (n.Supplier == rank) {
				t.Fatalf("rank %d: Local=%v but supplier %d", rank, n.Local, n.Supplier)
			}
			forEach(want.Sub(n.Box), want.Size, func(off int64) { count[off]++ })
		}
		for off, c := range count {
			if c != 1 {
				t.Fatalf("rank %d: element at offset %d of its box covered %d times", rank, off, c)
			}
		}
		// A rank that holds a region in the source must copy it locally.
		if spos := meshPos(src.Mesh, rank); spos >= 0 {
			held, ok := oracleBox(src, spos)
			for _, n := range needs {
				if ok && held.Contains(n.Box) && !n.Local {
					t.Fatalf("rank %d holds %v but receives it from %d", rank, n.Box, n.Supplier)
				}
			}
		}
	}
}

// forEach calls f with the row-major offset of every element of box b
// inside an array of shape full.
func forEach(b layout.Box, full []int64, f func(int64)) {
	n := len(full)
	idx := make([]int64, n)
	copy(idx, b.Start)
	for {
		off := int64(0)
		for d := range n {
			off = off*full[d] + idx[d]
		}
		f(off)
		d := n - 1
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < b.Start[d]+b.Size[d] {
				break
			}
			idx[d] = b.Start[d]
		}
		if d < 0 {
			return
		}
	}
}

// randomLayouts draws a source and destination layout for one tensor:
// 1-5 dims, 1-4 mesh axes, any placements (nested and uneven included),
// rank lists drawn from a shared pool so meshes may be disjoint or overlap.
func randomLayouts(rng *rand.Rand) (layout.Layout, layout.Layout) {
	nd := 1 + rng.IntN(5)
	shape := make([]int64, nd)
	for d := range shape {
		shape[d] = 1 + rng.Int64N(int64(9-nd))
	}
	dt := []layout.DType{layout.BF16, layout.FP32, layout.Int8, layout.FP64}[rng.IntN(4)]
	pool := 1 + rng.IntN(48)
	mk := func() layout.Layout {
		na := 1 + rng.IntN(4)
		ms := make([]int, na)
		size := 1
		for a := range ms {
			ms[a] = 1 + rng.IntN(4)
			for size*ms[a] > 32 {
				ms[a]--
			}
			size *= ms[a]
		}
		perm := rng.Perm(max(pool, size))
		ps := make([]layout.Placement, na)
		for a := range ps {
			if rng.IntN(3) > 0 {
				ps[a] = layout.S(rng.IntN(nd))
			}
		}
		return layout.Layout{Shape: shape, DType: dt, Mesh: layout.Mesh{Shape: ms, Ranks: perm[:size]}, Placements: ps}
	}
	return mk(), mk()
}

func TestDeriveMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		src, dst := randomLayouts(rng)
		r, err := Derive(src, dst)
		if err != nil {
			t.Fatalf("case %d: %v\nsrc %v\ndst %v", i, err, src, dst)
		}
		t.Run("", func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("case %d\nsrc %v\ndst %v", i, src, dst)
				}
			}()
			checkAgainstOracle(t, src, dst, r)
		})
	}
}

func TestDeriveFixed(t *testing.T) {
	ranks := func(a, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = a + i
		}
		return out
	}
	shape := []int64{256, 2048, 7168}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{16}, Ranks: ranks(0, 16)}, Placements: []layout.Placement{layout.S(0)}}
	for _, rho := range []int{2, 4, 8} {
		dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{rho, 8}, Ranks: ranks(72, 8*rho)}, Placements: []layout.Placement{layout.R, layout.S(1)}}
		r, err := Derive(src, dst)
		if err != nil {
			t.Fatal(err)
		}
		// docs/layouts.md's worked example: 16 x 8 = 128 contributions of
		// [16, 256, 7168] (56 MiB), B = 7168 MiB.
		if len(r.Contribs) != 128 || len(r.DstSlots) != 8 || len(r.SrcSlots) != 16 {
			t.Fatalf("rho %d: %d contributions, %d dst slots, %d src slots", rho, len(r.Contribs), len(r.DstSlots), len(r.SrcSlots))
		}
		for j := range r.Contribs {
			if b := r.Bytes(j); b != 56<<20 {
				t.Fatalf("contribution %d is %d bytes, want 56 MiB", j, b)
			}
		}
		st := r.Stats()
		if st.UniqueBytes != 7168<<20 {
			t.Errorf("unique bytes %d, want 7168 MiB", st.UniqueBytes)
		}
		// Flat delivery sends every contribution to every replica: rho x B.
		if st.TransferBytes != int64(rho)*7168<<20 || st.EgressMax != int64(rho)*448<<20 || st.EgressMin != st.EgressMax {
			t.Errorf("rho %d: transfer %d, egress %d..%d", rho, st.TransferBytes, st.EgressMin, st.EgressMax)
		}
	}
}

// A DP-replicated source spreads its egress over its replicas.
func TestReplicatedSourceBalanced(t *testing.T) {
	shape := []int64{64, 64}
	src := layout.Layout{Shape: shape, DType: layout.FP32, Mesh: layout.Mesh{Shape: []int{4, 2}, Ranks: []int{0, 1, 2, 3, 4, 5, 6, 7}}, Placements: []layout.Placement{layout.R, layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.FP32, Mesh: layout.Mesh{Shape: []int{8}, Ranks: []int{10, 11, 12, 13, 14, 15, 16, 17}}, Placements: []layout.Placement{layout.S(1)}}
	r, err := Derive(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if st.EgressMin != st.EgressMax {
		t.Errorf("egress per source rank %d..%d, want equal", st.EgressMin, st.EgressMax)
	}
	checkAgainstOracle(t, src, dst, r)
}

// Overlapping meshes: a rank that already holds what it needs copies it.
func TestOverlapLocalCopy(t *testing.T) {
	shape := []int64{8, 8}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{4}, Ranks: []int{0, 1, 2, 3}}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2, 2}, Ranks: []int{0, 1, 2, 3}}, Placements: []layout.Placement{layout.S(0), layout.S(0)}}
	r, err := Derive(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if st.Transfers != 0 || st.LocalCopies != 4 {
		t.Errorf("same boxes on the same ranks: %d transfers, %d local copies; want 0 and 4", st.Transfers, st.LocalCopies)
	}
	checkAgainstOracle(t, src, dst, r)
}

func TestDeriveErrors(t *testing.T) {
	mesh := layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}
	ok := layout.Layout{Shape: []int64{4, 4}, DType: layout.BF16, Mesh: mesh, Placements: []layout.Placement{layout.S(0)}}
	for _, tc := range []struct {
		name     string
		src, dst layout.Layout
		err      string
	}{
		{"shapes differ", ok, layout.Layout{Shape: []int64{4, 5}, DType: layout.BF16, Mesh: mesh, Placements: ok.Placements}, "source shape [4 4] and destination shape [4 5] differ"},
		{"dtypes differ", ok, layout.Layout{Shape: ok.Shape, DType: layout.FP32, Mesh: mesh, Placements: ok.Placements}, "source dtype bf16 and destination dtype fp32 differ"},
		{"bad source", layout.Layout{Shape: ok.Shape, DType: layout.BF16, Mesh: mesh, Placements: []layout.Placement{layout.S(3)}}, ok, "source layout: placements[0] = S(3)"},
		{"bad destination", ok, layout.Layout{Shape: ok.Shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{3}, Ranks: []int{0, 1}}, Placements: ok.Placements}, "destination layout: mesh shape [3] has 3 positions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Derive(tc.src, tc.dst)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Derive() = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

// A tensor of 10^12 elements plans without overflow.
func TestHugeTensor(t *testing.T) {
	shape := []int64{1_000_000, 1_000_000}
	src := layout.Layout{Shape: shape, DType: layout.FP64, Mesh: layout.Mesh{Shape: []int{7}, Ranks: []int{0, 1, 2, 3, 4, 5, 6}}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.FP64, Mesh: layout.Mesh{Shape: []int{3, 3}, Ranks: []int{7, 8, 9, 10, 11, 12, 13, 14, 15}}, Placements: []layout.Placement{layout.S(1), layout.S(0)}}
	r, err := Derive(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if st.UniqueBytes != 8e12 {
		t.Errorf("unique bytes %d, want 8e12", st.UniqueBytes)
	}
	var sum int64
	for j := range r.Contribs {
		sum += r.Bytes(j)
	}
	if sum != 8e12 {
		t.Errorf("contributions sum to %d bytes, want 8e12", sum)
	}
}

func TestDigestStable(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 50 {
		src, dst := randomLayouts(rng)
		a, err := Derive(src, dst)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Derive(src, dst)
		if a.Digest() != b.Digest() {
			t.Fatalf("two derivations of the same layouts differ")
		}
	}
	// Pin one digest so that a change to the derivation is seen in review.
	src := layout.Layout{Shape: []int64{10, 6}, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2, 2}, Ranks: []int{0, 1, 2, 3}}, Placements: []layout.Placement{layout.R, layout.S(0)}}
	dst := layout.Layout{Shape: []int64{10, 6}, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{3}, Ranks: []int{2, 5, 6}}, Placements: []layout.Placement{layout.S(1)}}
	r, _ := Derive(src, dst)
	d := r.Digest()
	const want = "dd5b12b50bda95efb428cc522c55c191b30598bb3dfb87a009c3f4d14014a2b6"
	if got := hex.EncodeToString(d[:]); got != want {
		t.Errorf("digest %s, want %s", got, want)
	}
}

func FuzzDerive(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 5, 4, 3, 2, 2, 1, 0, 2, 3, 1, 1, 9, 9, 9, 2, 0, 0, 1})
	f.Add([]byte{1, 7, 2, 1, 1, 2, 0, 4, 4, 7, 3, 2, 2, 1, 1, 0, 0, 5})
	f.Add([]byte{4, 2, 3, 4, 5, 3, 3, 3, 3, 1, 2, 0, 3, 1, 4, 2, 2, 2, 2, 1, 0, 1, 0, 30, 40})
	f.Add([]byte{255, 255, 255, 255, 0, 0, 0, 0, 128, 64, 32, 16, 8, 4, 2, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		src, dst := layoutsFromBytes(data)
		r, err := Derive(src, dst)
		if err != nil {
			return // invalid layouts must give an error, never a panic
		}
		checkAgainstOracle(t, src, dst, r)
	})
}

// layoutsFromBytes builds two small layouts from fuzz input. It may build
// invalid ones (out-of-range shard dims, duplicate ranks) on purpose.
func layoutsFromBytes(data []byte) (layout.Layout, layout.Layout) {
	i := 0
	next := func(n int) int {
		if i >= len(data) || n <= 0 {
			return 0
		}
		v := int(data[i]) % n
		i++
		return v
	}
	nd := 1 + next(5)
	shape := make([]int64, nd)
	for d := range shape {
		shape[d] = int64(next(8)) // 0 is invalid, on purpose
		if shape[d] == 0 && next(4) != 0 {
			shape[d] = 1
		}
	}
	mk := func() layout.Layout {
		na := 1 + next(4)
		ms := make([]int, na)
		size := 1
		for a := range ms {
			ms[a] = 1 + next(4)
			size *= ms[a]
		}
		ranks := make([]int, size)
		for k := range ranks {
			ranks[k] = next(64)
		}
		ps := make([]layout.Placement, na)
		for a := range ps {
			if v := next(7); v > 0 {
				ps[a] = layout.S(v - 1) // may exceed nd
			}
		}
		return layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: ms, Ranks: ranks}, Placements: ps}
	}
	return mk(), mk()
}

// BenchmarkDerive4096 plans S(0) over 4096 ranks to [R, S(1)] over 64 x 64:
// 64 destination slots of 4096 contributions each.
func BenchmarkDerive4096(b *testing.B) {
	ranks := func(a, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = a + i
		}
		return out
	}
	shape := []int64{4096 * 16, 8192}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{4096}, Ranks: ranks(0, 4096)}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{64, 64}, Ranks: ranks(4096, 4096)}, Placements: []layout.Placement{layout.R, layout.S(1)}}
	b.ReportAllocs()
	for b.Loop() {
		r, err := Derive(src, dst)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Contribs) != 64*4096 {
			b.Fatalf("%d contributions", len(r.Contribs))
		}
	}
}

func ExampleDerive() {
	ranks := func(a, n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = a + i
		}
		return out
	}
	shape := []int64{256, 2048, 7168}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{16}, Ranks: ranks(0, 16)}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2, 8}, Ranks: ranks(72, 16)}, Placements: []layout.Placement{layout.R, layout.S(1)}}
	r, _ := Derive(src, dst)
	needs := r.Needs(75) // DP 0, TP slot 3
	fmt.Println(len(needs), "regions; first:", needs[0].Box, "from rank", needs[0].Supplier)
	// Output:
	// 16 regions; first: [0:16, 768:1024, 0:7168] from rank 0
}

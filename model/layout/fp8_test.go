package layout

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// Hand-computed fp8_e4m3 (E4M3FN: bias 7, no infinities, 0x7F NaN) cases.
func TestToE4M3Table(t *testing.T) {
	p := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	cases := []struct {
		in   float32
		want uint8
		why  string
	}{
		{0, 0x00, "+0"},
		{float32(math.Copysign(0, -1)), 0x80, "-0 keeps its sign"},
		{1, 0x38, "1 = 1.000 x 2^0: exponent 0+7"},
		{-1, 0xb8, "sign bit"},
		{0.1, 0x1d, "0.1 = 1.6 x 2^-4: mantissa 4.8/8 rounds to 5/8"},
		{240, 0x77, "1.875 x 2^7"},
		{448, 0x7e, "the largest finite"},
		{-448, 0xfe, "the smallest finite"},
		{449, 0x7e, "above 448: saturates"},
		{464, 0x7e, "the tie between 448 and 480 (not finite): even, 448"},
		{465, 0x7e, "PyTorch gives NaN here; m2n saturates"},
		{1e30, 0x7e, "saturates"},
		{float32(math.Inf(1)), 0x7e, "infinity saturates"},
		{float32(math.Inf(-1)), 0xfe, "-infinity saturates"},
		{float32(math.NaN()), 0x7f, "NaN"},
		{1.0625, 0x38, "1 + 1/16: tie between 1.000 and 1.001, even 1.000"},
		{1.1875, 0x3a, "1 + 3/16: tie between 1.001 and 1.010, even 1.010"},
		{1.0625 + 1.0/1024, 0x39, "just above the tie rounds up"},
		{p(-6), 0x08, "2^-6, the smallest normal"},
		{p(-9), 0x01, "2^-9, the smallest subnormal"},
		{7 * p(-9), 0x07, "the largest subnormal"},
		{7.5 * p(-9), 0x08, "tie between 7 x 2^-9 and 2^-6: even, 2^-6"},
		{p(-10), 0x00, "half the smallest subnormal: tie, even, +0"},
		{-p(-10), 0x80, "the same below zero: -0"},
		{p(-10) * 1.0001, 0x01, "just above half rounds up"},
		{1.5 * p(-9), 0x02, "tie between 1 and 2 x 2^-9: even, 2"},
		{2.5 * p(-9), 0x02, "tie between 2 and 3 x 2^-9: even, 2"},
		{p(-20), 0x00, "far below: zero"},
	}
	for _, c := range cases {
		if got := ToE4M3(c.in); got != c.want {
			t.Errorf("ToE4M3(%g) = %#02x, want %#02x (%s)", c.in, got, c.want, c.why)
		}
	}
}

// The quantizer against an independent oracle: the nearest of the 253
// finite fp8 values (ties to the even code), saturating at ±448.
// e4m3Vals are the finite non-negative fp8 values, by code.
var e4m3Vals = func() (v []float64) {
	for c := 0; c < 0x7f; c++ {
		v = append(v, float64(E4M3ToFloat32(uint8(c))))
	}
	return v
}()

// nearestE4M3 is the oracle: the nearest finite value, ties to the even
// code, saturating.
func nearestE4M3(x float32) uint8 {
	a := math.Abs(float64(x))
	best := 0
	for c := 1; c < len(e4m3Vals); c++ {
		d, bd := math.Abs(e4m3Vals[c]-a), math.Abs(e4m3Vals[best]-a)
		if d < bd || (d == bd && c%2 == 0) {
			best = c
		}
	}
	if math.Signbit(float64(x)) {
		return uint8(best) | 0x80
	}
	return uint8(best)
}

// FuzzToE4M3 checks the quantizer against the oracle on any non-NaN
// float32.
func FuzzToE4M3(f *testing.F) {
	for _, v := range []float32{0, 1, 448, 464, 2.5 / 512, 1e-30, -7.5 / 512} {
		f.Add(math.Float32bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint32) {
		x := math.Float32frombits(bits)
		if x != x {
			if ToE4M3(x)&0x7f != 0x7f {
				t.Fatalf("NaN %#08x -> %#02x", bits, ToE4M3(x))
			}
			return
		}
		if got, want := ToE4M3(x), nearestE4M3(x); got != want {
			t.Fatalf("ToE4M3(%g [%#08x]) = %#02x, the nearest is %#02x", x, bits, got, want)
		}
	})
}

func TestToE4M3Nearest(t *testing.T) {
	vals, oracle := e4m3Vals, nearestE4M3
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		// Magnitudes over every fp8 binade and beyond, midpoints included.
		var x float32
		switch i % 3 {
		case 0:
			x = float32(math.Ldexp(rng.Float64()*2, rng.IntN(24)-14))
		case 1: // exact midpoints between neighbours
			c := rng.IntN(len(vals) - 1)
			x = float32((vals[c] + vals[c+1]) / 2)
		default:
			x = math.Float32frombits(rng.Uint32()) // any float32
		}
		if rng.IntN(2) == 0 {
			x = -x
		}
		if x != x {
			continue
		}
		if got, want := ToE4M3(x), oracle(x); got != want {
			t.Fatalf("ToE4M3(%g [%#08x]) = %#02x, the nearest is %#02x", x, math.Float32bits(x), got, want)
		}
	}
	// Every code decodes and encodes back.
	for c := 0; c < 256; c++ {
		if c&0x7f == 0x7f {
			continue
		}
		if got := ToE4M3(E4M3ToFloat32(uint8(c))); got != uint8(c) {
			t.Errorf("code %#02x: decodes to %g, which encodes to %#02x", c, E4M3ToFloat32(uint8(c)), got)
		}
	}
}

func TestQuantizeBlockTable(t *testing.T) {
	cases := []struct {
		x     []float32
		scale float32
		q     []uint8
	}{
		// amax 896: scale 2 exactly; 0.5 = 2^-1, -1, 0.25 = 2^-2, 448.
		{[]float32{1, -2, 0.5, 896}, 2, []uint8{0x30, 0xb8, 0x28, 0x7e}},
		// All zero: scale 1, zeros keep their signs.
		{[]float32{0, float32(math.Copysign(0, -1))}, 1, []uint8{0x00, 0x80}},
		// amax 3: scale fl(3/448); 3 / scale lands on 448; 1 / scale is
		// 149.33 = 1.1667 x 2^7, mantissa 1.33/8 -> 1/8.
		{[]float32{1, -3}, float32(3) / 448, []uint8{0x71, 0xfe}},
	}
	for _, c := range cases {
		q := make([]uint8, len(c.x))
		s := QuantizeBlock(c.x, q)
		if s != c.scale {
			t.Errorf("QuantizeBlock(%v): scale %g, want %g", c.x, s, c.scale)
		}
		for i := range q {
			if q[i] != c.q[i] {
				t.Errorf("QuantizeBlock(%v): q[%d] = %#02x, want %#02x", c.x, i, q[i], c.q[i])
			}
		}
	}
}

// A NaN takes no part in its block's amax: the block quantizes as it
// would without it, the NaN itself to 0x7F whatever its sign, on random
// blocks.
func TestQuantizeBlockNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	nan := float32(math.NaN())
	for range 200 {
		n := 1 + rng.IntN(64)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(9)-4)))
		}
		at := rng.IntN(n)
		with := slices.Clone(x)
		with[at] = nan
		if rng.IntN(2) == 0 {
			with[at] = -nan
		}
		want := make([]uint8, n)
		x[at] = 0
		ws := QuantizeBlock(x, want)
		got := make([]uint8, n)
		gs := QuantizeBlock(with, got)
		if gs != ws {
			t.Fatalf("%v: scale %g with the NaN, %g with 0 there", with, gs, ws)
		}
		for i := range got {
			if i == at {
				if got[i] != 0x7f {
					t.Errorf("%v: the NaN quantized to %#02x, want 0x7f (the device's canonical NaN)", with, got[i])
				}
			} else if got[i] != want[i] {
				t.Errorf("%v: q[%d] = %#02x, want %#02x (as without the NaN)", with, i, got[i], want[i])
			}
		}
	}
}

func TestDecode(t *testing.T) {
	if g := BF16ToFloat32(0x3f80); g != 1 {
		t.Errorf("bf16 0x3f80 = %g, want 1", g)
	}
	for h, want := range map[uint16]float32{0x3c00: 1, 0xc000: -2, 0x0001: float32(math.Ldexp(1, -24)), 0x7bff: 65504, 0x0400: float32(math.Ldexp(1, -14))} {
		if g := FP16ToFloat32(h); g != want {
			t.Errorf("fp16 %#04x = %g, want %g", h, g, want)
		}
	}
}

func TestScaleLayout(t *testing.T) {
	q := Quant{Scheme: QuantBlock, Block: DefaultBlock}
	// [384 experts, 4096 rows, 7168 cols] over TP 8 on rows: 512 rows each.
	l := Layout{Shape: []int64{384, 4096, 7168}, DType: BF16, Mesh: Mesh{Shape: []int{2, 8}, Ranks: seq(16)},
		Placements: []Placement{{}, {Shard: true, Dim: 1}}}
	sl, err := ScaleLayout(l, q)
	if err != nil {
		t.Fatal(err)
	}
	if got := sl.Shape; got[0] != 384 || got[1] != 32 || got[2] != 56 {
		t.Errorf("scale shape %v, want [384 32 56]", got)
	}
	for i := range l.Mesh.Ranks {
		if w, s := q.ScaleBox(l.Shape, l.LocalBox(i)), sl.LocalBox(i); !w.Equal(s) {
			t.Errorf("rank %d: blocks of its weight %v, but scale box %v", i, w, s)
		}
	}
	// TP 32 of 2048 rows: 64 rows a shard, half a block.
	l.Shape[1] = 2048
	l.Mesh = Mesh{Shape: []int{1, 32}, Ranks: seq(32)}
	_, err = ScaleLayout(l, q)
	if !errors.Is(err, ErrCutsBlock) || !strings.Contains(err.Error(), "shards of 64") || !strings.Contains(err.Error(), "ends at 64, inside a block of 128") ||
		!strings.Contains(err.Error(), "vLLM refuses such a split too") {
		t.Errorf("TP 32 of 2048 rows: %v", err)
	}
	// Per channel, the same split is fine; per tensor it cuts the one
	// block, and the error says that vLLM holds it with the scale
	// replicated (a destination lands it: LandingLayout, below).
	if _, err := ScaleLayout(l, Quant{Scheme: QuantChannel}); err != nil {
		t.Errorf("per channel: %v", err)
	}
	if _, err := ScaleLayout(l, Quant{Scheme: QuantTensor}); !errors.Is(err, ErrCutsBlock) || !strings.Contains(err.Error(), "tensor scale replicated") ||
		!strings.Contains(err.Error(), "LandingLayout") || strings.Contains(err.Error(), "vLLM refuses") {
		t.Errorf("per tensor over TP 32: %v", err)
	}
}

// The layout a destination quantizes on: itself where its shards hold
// whole blocks; the axes that cut a block spanning its whole dim
// replicated (per channel split by columns, per tensor split any way),
// and nothing else changed; a cut of a dim of several blocks refused.
func TestLandingLayout(t *testing.T) {
	seq := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	mesh := Mesh{Shape: []int{2, 4}, Ranks: seq(8)}
	for _, c := range []struct {
		name string
		pl   []Placement
		q    Quant
		want []Placement // nil: refused
	}{
		{"block, whole blocks", []Placement{R, S(0)}, Quant{Scheme: QuantBlock, Block: [2]int64{128, 128}}, []Placement{R, S(0)}},
		{"block, cut", []Placement{R, S(1)}, Quant{Scheme: QuantBlock, Block: [2]int64{128, 384}}, nil},
		{"channel, column split (row-parallel)", []Placement{S(0), S(1)}, Quant{Scheme: QuantChannel}, []Placement{S(0), R}},
		{"channel, row split", []Placement{R, S(0)}, Quant{Scheme: QuantChannel}, []Placement{R, S(0)}},
		{"tensor, any split", []Placement{S(0), S(1)}, Quant{Scheme: QuantTensor}, []Placement{R, R}},
		{"block wider than the dim", []Placement{R, S(1)}, Quant{Scheme: QuantBlock, Block: [2]int64{128, 4096}}, []Placement{R, R}},
	} {
		l := Layout{Shape: []int64{1024, 2048}, DType: FP8E4M3, Mesh: mesh, Placements: c.pl}
		got, err := LandingLayout(l, c.q)
		if c.want == nil {
			if !errors.Is(err, ErrCutsBlock) {
				t.Errorf("%s: %v, %v; want refused", c.name, got.Placements, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got.Placements, c.want) || !slices.Equal(got.Shape, l.Shape) || got.DType != l.DType || !slices.Equal(got.Mesh.Ranks, l.Mesh.Ranks) {
			t.Errorf("%s: %v, %v; want %v", c.name, got.Placements, err, c.want)
			continue
		}
		if _, err := ScaleLayout(got, c.q); err != nil {
			t.Errorf("%s: the landing layout has no scale layout: %v", c.name, err)
		}
	}
}

// On random layouts, a layout CheckBlocks accepts has a scale layout whose
// every rank holds exactly the blocks of its weight box.
func TestScaleLayoutRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	accepted := 0
	for it := 0; it < 3000; it++ {
		l := randomMatrixLayout(rng, BF16)
		shape, nd, n := l.Shape, len(l.Shape), len(l.Mesh.Ranks)
		q := Quant{Scheme: QuantScheme(1 + rng.IntN(3)), Block: [2]int64{int64(1 + rng.IntN(4)), int64(1 + rng.IntN(4))}}
		sl, err := ScaleLayout(l, q)
		if err != nil {
			if !errors.Is(err, ErrCutsBlock) {
				t.Fatalf("%v under %v: %v", l, q, err)
			}
			continue
		}
		accepted++
		br, bc := q.Blocks(shape)
		for i := range n {
			w := l.LocalBox(i)
			if w.Empty() {
				continue
			}
			// Whole blocks: starts on a block edge, ends on one or at the edge.
			for k, bs := range [2]int64{br, bc} {
				d := nd - 2 + k
				if w.Start[d]%bs != 0 || ((w.Start[d]+w.Size[d])%bs != 0 && w.Start[d]+w.Size[d] != shape[d]) {
					t.Fatalf("%v under %v: rank %d holds %v, cutting a block", l, q, i, w)
				}
			}
			if s := sl.LocalBox(i); !q.ScaleBox(shape, w).Equal(s) {
				t.Fatalf("%v under %v: rank %d: weight %v, scales %v", l, q, i, w, s)
			}
		}
	}
	if accepted < 300 {
		t.Errorf("only %d of 3000 random layouts hold whole blocks: the test checks little", accepted)
	}
}

// randomMatrixLayout is a random layout of dtype dt: two or three dims of
// 1 to 12, one to three mesh axes of 1 to 4 ranks, each sharding a random
// dim two times in three.
func randomMatrixLayout(rng *rand.Rand, dt DType) Layout {
	nd := 2 + rng.IntN(2)
	shape := make([]int64, nd)
	for d := range shape {
		shape[d] = int64(1 + rng.IntN(12))
	}
	axes := 1 + rng.IntN(3)
	ms := make([]int, axes)
	pl := make([]Placement, axes)
	n := 1
	for a := range ms {
		ms[a] = 1 + rng.IntN(4)
		n *= ms[a]
		if rng.IntN(3) > 0 {
			pl[a] = Placement{Shard: true, Dim: rng.IntN(nd)}
		}
	}
	return Layout{Shape: shape, DType: dt, Mesh: Mesh{Shape: ms, Ranks: seq(n)}, Placements: pl}
}

func seq(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// WeightBox inverts ScaleBox on whole blocks: the scales a weight box's
// blocks need cover that box, and the weight box of any scale box is
// block-aligned but at the weight's edge.
func TestWeightBox(t *testing.T) {
	rng := rand.New(rand.NewPCG(91, 92))
	for range 1000 {
		shape := []int64{1 + rng.Int64N(3), 1 + rng.Int64N(300), 1 + rng.Int64N(300)}
		q := Quant{Scheme: QuantBlock, Block: [2]int64{1 + rng.Int64N(130), 1 + rng.Int64N(130)}}
		var b Box
		for _, n := range shape {
			lo := rng.Int64N(n)
			b.Start, b.Size = append(b.Start, lo), append(b.Size, 1+rng.Int64N(n-lo))
		}
		sb := q.ScaleBox(shape, b)
		wb := q.WeightBox(shape, sb)
		for d := range shape {
			if wb.Start[d] > b.Start[d] || wb.Start[d]+wb.Size[d] < b.Start[d]+b.Size[d] {
				t.Fatalf("shape %v %v: box %v, scales %v, their weight box %v does not cover it", shape, q, b, sb, wb)
			}
		}
		if back := q.ScaleBox(shape, wb); !slices.Equal(back.Start, sb.Start) || !slices.Equal(back.Size, sb.Size) {
			t.Fatalf("shape %v %v: scales %v -> weight box %v -> scales %v", shape, q, sb, wb, back)
		}
	}
}

// Shard scales (vLLM's online FP8: each rank quantizes its own shard with
// one scale) resolve to the destination's shards: a fixed table, then on
// random layouts every rank's box is exactly one block of the last two
// dims, and the layout lands as it is (no rank lands more than its shard).
func TestQuantShardForLayout(t *testing.T) {
	mesh := Mesh{Shape: []int{2, 4}, Ranks: seq(8)}
	for _, c := range []struct {
		name  string
		shape []int64
		pl    []Placement
		block [2]int64
	}{
		{"row split (column-parallel)", []int64{1024, 2048}, []Placement{R, S(0)}, [2]int64{256, 2048}},
		{"column split (row-parallel)", []int64{1024, 2048}, []Placement{R, S(1)}, [2]int64{1024, 512}},
		{"both", []int64{1024, 2048}, []Placement{S(0), S(1)}, [2]int64{512, 512}},
		{"replicated", []int64{1024, 2048}, []Placement{R, R}, [2]int64{1024, 2048}},
		{"uneven (torch.chunk: 3, 3, 3, 1)", []int64{10, 64}, []Placement{R, S(0)}, [2]int64{3, 64}},
		{"stacked experts, split by expert and rows", []int64{8, 64, 32}, []Placement{S(0), S(1)}, [2]int64{16, 32}},
	} {
		l := Layout{Shape: c.shape, DType: FP8E4M3, Mesh: mesh, Placements: c.pl}
		q, err := Quant{Scheme: QuantShard}.ForLayout(l)
		if err != nil || q.Scheme != QuantShard || q.Block != c.block {
			t.Errorf("%s: %v, %v; want shard %v", c.name, q, err, c.block)
			continue
		}
		if err := ValidateQuant(BF16, FP8E4M3, c.shape, q); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if land, err := LandingLayout(l, q); err != nil || !slices.Equal(land.Placements, l.Placements) {
			t.Errorf("%s: lands on %v (%v), want its own layout", c.name, land.Placements, err)
		}
	}
	if err := ValidateQuant(BF16, FP8E4M3, []int64{64, 64}, Quant{Scheme: QuantShard}); err == nil || !strings.Contains(err.Error(), "not resolved") {
		t.Errorf("unresolved shard scales: %v", err)
	}
	if q, err := (Quant{Scheme: QuantTensor}).ForLayout(Layout{Shape: []int64{8, 8}, Mesh: mesh, Placements: []Placement{R, S(0)}}); err != nil || q != (Quant{Scheme: QuantTensor}) {
		t.Errorf("per tensor: %v, %v; want it unchanged", q, err)
	}
	if s, err := ParseQuantScheme("shard"); err != nil || s != QuantShard || s.String() != "shard" {
		t.Errorf("ParseQuantScheme(shard) = %v, %v", s, err)
	}

	rng := rand.New(rand.NewPCG(5, 6))
	resolved, refused := 0, 0
	for it := 0; it < 2000; it++ {
		l := randomMatrixLayout(rng, FP8E4M3)
		shape, nd, n, ms, pl := l.Shape, len(l.Shape), len(l.Mesh.Ranks), l.Mesh.Shape, l.Placements
		q, err := Quant{Scheme: QuantShard}.ForLayout(l)
		if err != nil {
			// Refused only where nested uneven splits make shards of
			// several sizes along a dim (no one block fits them all).
			even := true
			for d := nd - 2; d < nd; d++ {
				k := int64(1)
				for a, p := range pl {
					if p.Shard && p.Dim == d {
						k *= int64(ms[a])
					}
				}
				even = even && shape[d]%k == 0
			}
			if even || !errors.Is(err, ErrCutsBlock) {
				t.Fatalf("%v: %v", l, err)
			}
			refused++
			continue
		}
		resolved++
		if land, err := LandingLayout(l, q); err != nil || !slices.Equal(land.Placements, l.Placements) {
			t.Fatalf("%v under %v: lands on %v (%v)", l, q, land.Placements, err)
		}
		for i := range n {
			w := l.LocalBox(i)
			if w.Empty() {
				continue
			}
			if s := q.ScaleBox(shape, w); s.Size[nd-2] != 1 || s.Size[nd-1] != 1 {
				t.Fatalf("%v under %v: rank %d holds %v, scales %v: want one scale a matrix", l, q, i, w, s)
			}
		}
	}
	if resolved < 1000 || refused == 0 {
		t.Errorf("%d random layouts resolved, %d refused: the test checks little", resolved, refused)
	}
}

//go:build linux && cgo

package native

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/program"
)

// quantCase is one box to quantize between two arrays on the device.
type quantCase struct {
	dt                  layout.DType
	srcFull, srcStart   []int64
	size                []int64
	br, bc              int64
	srcOff, dstOff, sOf uint64
	// special draws the source otherwise: 1 magnitudes below 2^-100
	// (bf16) or zeros (fp16); 2 one value in 64 at least 2^127 (bf16) or
	// the largest finite (fp16); 3 one value in 64 a NaN of either sign
	// (which no block's amax takes, layout.QuantizeBlock).
	special int
}

// withLeadDims gives c two or three dims, each of 1 to 3 elements (the
// last two for the caller to set), and returns how many.
func (c *quantCase) withLeadDims(rng *rand.Rand) int {
	nd := 2 + rng.IntN(2)
	c.srcFull, c.srcStart, c.size = make([]int64, nd), make([]int64, nd), make([]int64, nd)
	for d := range nd {
		c.size[d] = 1 + rng.Int64N(3)
	}
	return nd
}

// embed places c's box in its source array: each dim the box's own, or
// at random larger by up to 16 elements with the box at the end, on a
// multiple of 8.
func (c *quantCase) embed(rng *rand.Rand) {
	for d := range c.size {
		c.srcFull[d] = c.size[d]
		if rng.IntN(2) == 0 {
			c.srcFull[d] += 8 * rng.Int64N(3)
			c.srcStart[d] = (c.srcFull[d] - c.size[d]) / 8 * 8
		}
	}
}

// runQuantCase quantizes on the device and on the host (emulateQuant) from
// the same random source (finite unless c.special is 3), and returns the
// kernel and the count of differing bytes.
func runQuantCase(t *testing.T, g *cudaGPU, dev int, st handle, rng *rand.Rand, c quantCase) (string, int) {
	t.Helper()
	elem := c.dt.Size()
	nd := len(c.size)
	srcBytes := elem
	for _, v := range c.srcFull {
		srcBytes *= v
	}
	n := layout.Box{Size: c.size}.Elems()
	sb := []int64{(c.size[nd-2] + c.br - 1) / c.br, (c.size[nd-1] + c.bc - 1) / c.bc}
	nsc := n / c.size[nd-2] / c.size[nd-1] * sb[0] * sb[1]
	dstAt := uint64(srcBytes+64) + c.dstOff
	scAt := (dstAt+uint64(n)+64+3)&^3 + 4*c.sOf // scales are FP32: 4-byte aligned
	host := make([]byte, scAt+uint64(4*nsc)+64)
	for k := int64(0); k < srcBytes/elem; k++ { // finite values of every magnitude
		v := rng.Uint64() &^ (1 << (8*elem - 2))
		switch {
		case c.special == 1 && c.dt == layout.BF16:
			v = v&0x807f | uint64(rng.IntN(27))<<7
		case c.special == 1:
			v &= 0x8000
		case c.special == 2 && rng.IntN(64) == 0:
			v = v&0x8000 | map[layout.DType]uint64{layout.BF16: 0x7f00 | v&0x7f, layout.FP16: 0x7bff}[c.dt]
		case c.special == 3 && rng.IntN(64) == 0:
			v = v&(1<<(8*elem-1)) | nanBits(c.dt, rng)
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], v)
		copy(host[c.srcOff+uint64(k*elem):], b[:elem])
	}
	base, err := g.alloc(dev, int64(len(host)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.free(dev, base)
	if err := g.upload(dev, base, host); err != nil {
		t.Fatal(err)
	}
	sst := program.RowMajor(c.srcFull)
	var off int64
	for d := range nd {
		off += c.srcStart[d] * sst[d]
	}
	sdt, _ := sdtCode(c.dt)
	plan := func(b uint64) (quantArgs, string) {
		return planQuantArrays(b+c.srcOff+uint64(off*elem), b+dstAt, b+scAt, sst, program.RowMajor(c.size),
			program.RowMajor(append(append([]int64(nil), c.size[:nd-2]...), sb...)), c.size, c.br, c.bc, sdt, elem)
	}
	a, kernel := plan(base)
	if program.IsSplitKernel(kernel) {
		// Their work memory, zero once: the kernels leave it zero, which
		// a second run on other values checks (a stale amax would change
		// its scales).
		n := splitWorkBytes(a.Lead * a.NBR * a.NBC)
		w, err := g.alloc(dev, n)
		if err != nil {
			t.Fatal(err)
		}
		defer g.free(dev, w)
		if err := g.upload(dev, w, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		a.Work = w
		if err := g.quantize(&a, kernel, false, st); err != nil {
			t.Fatal(err)
		}
		for k := int64(0); k < srcBytes; k += elem { // smaller values, the same layout
			v := binary.LittleEndian.Uint16(host[c.srcOff+uint64(k):])
			if elem == 2 && v&0x7fff > 0x0100 && !isNaN16(c.dt, v) {
				binary.LittleEndian.PutUint16(host[c.srcOff+uint64(k):], v-0x0100)
			}
		}
		if err := g.upload(dev, base, host); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.quantize(&a, kernel, false, st); err != nil {
		t.Fatal(err)
	}
	got := readBack(t, g, dev, st, base, len(host))
	ha, _ := plan(0)
	emulateQuant(host, ha)
	return kernel, diffBytes(host, got)
}

// nanBits is a random NaN's bits in dtype dt (bf16, fp16 or fp32), sign
// clear.
func nanBits(dt layout.DType, rng *rand.Rand) uint64 {
	switch dt {
	case layout.BF16:
		return 0x7f81 + uint64(rng.IntN(0x7f))
	case layout.FP16:
		return 0x7c01 + uint64(rng.IntN(0x3ff))
	}
	return 0x7f800001 + uint64(rng.IntN(0x7fffff))
}

// isNaN16 says whether v is a NaN of the 16-bit dtype dt.
func isNaN16(dt layout.DType, v uint16) bool {
	if dt == layout.BF16 {
		return v&0x7fff > 0x7f80
	}
	return v&0x7fff > 0x7c00
}

// diffBytes counts the bytes where a and b (of one length) differ.
func diffBytes(a, b []byte) int {
	n := 0
	for k := range a {
		if a[k] != b[k] {
			n++
		}
	}
	return n
}

// The quantize kernels against the reference quantizer on random boxes,
// strided and not, every source dtype, aligned (vector kernels) or not.
func TestGPUQuantizeKernels(t *testing.T) {
	g, dev, st := firstGPU(t)
	rng := rand.New(rand.NewPCG(61, 62))
	kernels := map[string]int{}
	for i := range 200 {
		nd := 2 + rng.IntN(2)
		c := quantCase{dt: []layout.DType{layout.BF16, layout.FP16, layout.FP32}[rng.IntN(3)]}
		if i%8 == 7 {
			c.special = 3
		}
		c.br, c.bc = []int64{1, 3, 8, 128}[rng.IntN(4)], []int64{1, 5, 8, 16, 128}[rng.IntN(5)]
		c.srcFull, c.srcStart, c.size = make([]int64, nd), make([]int64, nd), make([]int64, nd)
		for d := range nd {
			c.size[d] = 1 + rng.Int64N([]int64{3, 40, 600}[rng.IntN(3)])
			if d < nd-2 {
				c.size[d] = 1 + rng.Int64N(4)
			}
			c.srcFull[d] = c.size[d]
			if rng.IntN(2) == 0 { // strided: the box inside a larger array, starting on a block edge
				c.srcFull[d] += rng.Int64N(3) * 8
				if d >= nd-2 {
					c.srcStart[d] = (c.srcFull[d] - c.size[d]) / 8 * 8
				}
			}
		}
		if rng.IntN(3) == 0 {
			// Off vector alignment, on element boundaries (the kernels'
			// contract: planQuant refuses anything less).
			c.srcOff, c.dstOff, c.sOf = uint64(c.dt.Size())*uint64(rng.IntN(8)), uint64(rng.IntN(8)), uint64(rng.IntN(4))
		}
		kernel, bad := runQuantCase(t, g, dev, st, rng, c)
		kernels[kernel]++
		if bad > 0 {
			t.Errorf("case %d: %s, %v box %v in %v at %v, blocks %dx%d, special %d: %d bytes differ from the reference", i, kernel, c.dt, c.size, c.srcFull, c.srcStart, c.br, c.bc, c.special, bad)
		}
	}
	// The 128 x 128 kernels: whole-width blocks of 16-bit sources, rows
	// ending short, strided, lead dims; blocks of tiny or huge magnitudes
	// take their general path.
	for i := range 40 {
		c := quantCase{dt: []layout.DType{layout.BF16, layout.FP16}[i%2], br: 128, bc: 128, special: i / 2 % 4}
		nd := c.withLeadDims(rng)
		c.size[nd-2], c.size[nd-1] = 1+rng.Int64N(300), 128*(1+rng.Int64N(4))
		c.embed(rng)
		kernel, bad := runQuantCase(t, g, dev, st, rng, c)
		kernels[kernel]++
		if !strings.HasPrefix(kernel, "quantize_e4m3_b128_") || bad > 0 {
			t.Errorf("128 x 128 case %d: %s, %v box %v in %v at %v, special %d: %d bytes differ from the reference", i, kernel, c.dt, c.size, c.srcFull, c.srcStart, c.special, bad)
		}
	}
	// The row kernels: blocks of one row (per channel, or 1 x bc) of
	// 16-bit sources, rows of every length, strided, lead dims; rows of
	// tiny or huge magnitudes take the reference's code.
	for i := range 30 {
		c := quantCase{dt: []layout.DType{layout.BF16, layout.FP16}[i%2], special: i / 2 % 4, br: 1}
		nd := c.withLeadDims(rng)
		c.size[nd-2], c.size[nd-1] = 1+rng.Int64N(400), 8*(1+rng.Int64N([]int64{8, 300, 4000}[i%3]))
		c.bc = c.size[nd-1] // per channel
		if i%5 == 4 {
			c.bc = 8 * (1 + rng.Int64N(c.size[nd-1]/8)) // 1 x bc blocks
		}
		c.embed(rng)
		kernel, bad := runQuantCase(t, g, dev, st, rng, c)
		kernels[kernel]++
		if !strings.HasPrefix(kernel, "quantize_e4m3_rows_") || bad > 0 {
			t.Errorf("row case %d: %s, %v box %v in %v at %v, blocks 1x%d, special %d: %d bytes differ from the reference", i, kernel, c.dt, c.size, c.srcFull, c.srcStart, c.bc, c.special, bad)
		}
	}
	// The split kernels: blocks of at least program.SplitMinElems of
	// 16-bit sources (per tensor, per expert, large blocks), lead dims,
	// strided, rows of every length; blocks of tiny or huge magnitudes
	// take the IEEE division.
	for i := range 24 {
		c := quantCase{dt: []layout.DType{layout.BF16, layout.FP16}[i%2], special: i / 2 % 4}
		nd := c.withLeadDims(rng)
		c.size[nd-2], c.size[nd-1] = 64+rng.Int64N(700), 8*(64+rng.Int64N(400))
		c.br, c.bc = c.size[nd-2], c.size[nd-1] // per tensor (a scale a lead slice): at least 64 x 512
		if i%3 == 2 {
			// blocks of up to 64 rows and half the columns (rounded up to
			// vectors): two column blocks and several row blocks
			c.size[nd-1] = 8 * (128 + rng.Int64N(300))
			c.br, c.bc = 64, 8*((c.size[nd-1]/8+1)/2)
		}
		c.embed(rng)
		kernel, bad := runQuantCase(t, g, dev, st, rng, c)
		kernels[kernel]++
		if !program.IsSplitKernel(kernel) || bad > 0 {
			t.Errorf("split case %d: %s, %v box %v in %v at %v, blocks %dx%d, special %d: %d bytes differ from the reference", i, kernel, c.dt, c.size, c.srcFull, c.srcStart, c.br, c.bc, c.special, bad)
		}
	}
	t.Logf("kernels exercised: %v", kernels)
}

// The batch forms of the quantize kernels against the reference quantizer:
// a few random boxes at once in one allocation, each kernel's ops in one
// launch (planQuantBatches, as the executor's batch steps), the kernels of
// one op alone as they run alone; every byte and scale compared.
func TestGPUQuantizeBatch(t *testing.T) {
	g, dev, st := firstGPU(t)
	rng := rand.New(rand.NewPCG(63, 64))
	launched := map[string]int{}
	for round := range 40 {
		n := 2 + rng.IntN(6)
		var host []byte
		grow := func(n int64, align int) uint64 { // room for n bytes after 64 bytes of gap
			at := (len(host) + 64 + align - 1) / align * align
			host = append(host, make([]byte, at+int(n)-len(host))...)
			return uint64(at)
		}
		lps := make([]localPlan, n)
		ha := make([]quantArgs, n)
		members := make([]int32, n)
		for i := range n {
			dt := []layout.DType{layout.BF16, layout.FP16, layout.FP32}[rng.IntN(3)]
			br, bc := []int64{1, 8, 128}[rng.IntN(3)], []int64{1, 8, 16, 128}[rng.IntN(4)]
			size := []int64{1 + rng.Int64N(300), 1 + rng.Int64N(300)}
			if round%2 == 0 { // the 128 x 128 kernels
				dt, br, bc = []layout.DType{layout.BF16, layout.FP16}[round/2%2], 128, 128
				size[1] = 128 * (1 + rng.Int64N(3))
			} else if round%4 == 1 { // the row kernels
				dt, br = []layout.DType{layout.BF16, layout.FP16}[round/4%2], 1
				size[1] = 8 * (1 + rng.Int64N(300))
				bc = []int64{8, size[1]}[rng.IntN(2)]
			}
			elem := dt.Size()
			sb := []int64{(size[0] + br - 1) / br, (size[1] + bc - 1) / bc}
			src := grow(size[0]*size[1]*elem, 256)
			for k := src; k < uint64(len(host)); k += uint64(elem) { // finite values
				v := rng.Uint64() &^ (1 << (8*elem - 2))
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], v)
				copy(host[k:], b[:elem])
			}
			dst := grow(size[0]*size[1], 256)
			sc := grow(4*sb[0]*sb[1], 4)
			sdt, _ := sdtCode(dt)
			ha[i], lps[i].kernel = planQuantArrays(src, dst, sc, program.RowMajor(size), program.RowMajor(size), program.RowMajor(sb), size, br, bc, sdt, elem)
			lps[i].kind = lpQuant
			members[i] = int32(i)
		}
		base, err := g.alloc(dev, int64(len(host)))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.upload(dev, base, host); err != nil {
			t.Fatal(err)
		}
		for i := range lps {
			lps[i].quant = ha[i]
			lps[i].quant.Src += base
			lps[i].quant.Dst += base
			lps[i].quant.Scale += base
		}
		qs, rest := planQuantBatches(members, func(i int32) *localPlan { return &lps[i] })
		var bufs []uint64
		for _, q := range qs {
			at, err := g.alloc(dev, int64(len(q.blob)))
			if err != nil {
				t.Fatal(err)
			}
			bufs = append(bufs, at)
			if err := g.upload(dev, at, q.blob); err != nil {
				t.Fatal(err)
			}
			q.args.Args, q.args.Prefix = at, at+q.args.Prefix
			if err := g.quantizeBatch(&q.args, q.kernel, round%3 == 0, st); err != nil {
				t.Fatal(err)
			}
			launched[q.kernel+"_batch"]++
		}
		for _, i := range rest {
			if err := g.quantize(&lps[i].quant, lps[i].kernel, false, st); err != nil {
				t.Fatal(err)
			}
		}
		got := readBack(t, g, dev, st, base, len(host))
		for i := range ha {
			emulateQuant(host, ha[i])
		}
		if bad := diffBytes(host, got); bad > 0 {
			t.Errorf("round %d: %d ops (%d batches, %d alone): %d bytes differ from the reference", round, n, len(qs), len(rest), bad)
		}
		for _, b := range append(bufs, base) {
			g.free(dev, b)
		}
	}
	if launched["quantize_e4m3_rows_bf16_batch"]+launched["quantize_e4m3_rows_fp16_batch"] == 0 {
		t.Errorf("batch kernels launched: %v; want the row kernels' too", launched)
	}
	if launched["quantize_e4m3_b128_bf16_batch"]+launched["quantize_e4m3_b128_fp16_batch"] == 0 || len(launched) < 3 {
		t.Errorf("batch kernels launched: %v; want the 128 x 128 and generic ones", launched)
	}
	t.Logf("batch kernels launched: %v", launched)
}

// The 128 x 128 kernels' arithmetic (a reciprocal and residual
// corrections instead of IEEE division) gives the bytes and scales of IEEE
// division for every pair of 16-bit values a block can hold: every amax
// where they take it, every x with |x| <= amax, both signs.
func TestGPUQuantDivision(t *testing.T) {
	g, dev, st := firstGPU(t)
	cnt, err := g.alloc(dev, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer g.free(dev, cnt)
	for _, sdt := range []int32{1, 2} {
		if err := g.upload(dev, cnt, make([]byte, 32)); err != nil {
			t.Fatal(err)
		}
		a := struct { // struct QuantDivArgs
			bad uint64
			sdt int32
			_   int32
		}{bad: cnt, sdt: sdt}
		if err := g.launch(dev, "quant_div_check", 4096, 256, st, unsafe.Pointer(&a), unsafe.Sizeof(a), 0, 1); err != nil {
			t.Fatal(err)
		}
		if err := g.sync(st); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 32)
		g.download(dev, got, cnt)
		scales, bytes, n := binary.LittleEndian.Uint64(got), binary.LittleEndian.Uint64(got[8:]), binary.LittleEndian.Uint64(got[16:])
		// The pairs the check must have covered.
		var want uint64
		for am := range uint64(map[int32]uint64{1: 0x7f80, 2: 0x7c00}[sdt] + 1) {
			f := layout.Decode(sdtDType[sdt], []byte{byte(am), byte(am >> 8)}, 0)
			if f == 0 || f >= 0x1p-100 && f <= 0x1p127 {
				want += 2*am + 2
			}
		}
		t.Logf("%s: %d pairs checked; %d scales and %d fp8 bytes differ from IEEE division", sdtDType[sdt], n, scales, bytes)
		if n != want || scales+bytes > 0 {
			t.Errorf("%s: %d pairs checked (want %d), %d scales and %d bytes differ", sdtDType[sdt], n, want, scales, bytes)
		}
	}
}

// readFile reads a little-endian file of the PyTorch check (scripts/gpu-fp8.sh).
func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Bit-equality with PyTorch (M2N_FP8_DIR, written by scripts/fp8_torch.py):
// fp8 bits of x / s as torch's (x / s).clamp(-448, 448).to(float8_e4m3fn),
// from the Go reference and the device conversion; and whole 128 x 128
// blocks of bf16, quantized by torch as the reference describes, from the
// Go reference and the quantize kernel.
func TestGPUFP8Bits(t *testing.T) {
	dir := os.Getenv("M2N_FP8_DIR")
	if dir == "" {
		t.Skip("M2N_FP8_DIR is not set: scripts/gpu-fp8.sh sets it")
	}
	x, s, q := readFile(t, dir, "values.f32"), readFile(t, dir, "scales.f32"), readFile(t, dir, "torch.u8")
	n := len(q)
	if len(x) != 4*n || len(s) != 4*n {
		t.Fatalf("values %d, scales %d, torch bits %d: want 4n, 4n, n", len(x), len(s), n)
	}
	f := func(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }
	bad := 0
	for i := range n {
		if got := layout.ToE4M3(f(x, i) / f(s, i)); got != q[i] {
			if bad < 5 {
				t.Errorf("Go: %g / %g -> %#02x, PyTorch %#02x", f(x, i), f(s, i), got, q[i])
			}
			bad++
		}
	}
	t.Logf("Go reference: %d of %d values differ from PyTorch", bad, n)
	g, dev, st := firstGPU(t)
	dx, _ := g.alloc(dev, int64(len(x)))
	ds, _ := g.alloc(dev, int64(len(s)))
	dq, _ := g.alloc(dev, int64(n))
	g.upload(dev, dx, x)
	g.upload(dev, ds, s)
	type args struct { // struct ConvertArgs
		x, s, q uint64
		n       int64
	}
	a := args{dx, ds, dq, int64(n)}
	if err := g.launch(dev, "e4m3_convert", 1024, 256, st, unsafe.Pointer(&a), unsafe.Sizeof(a), 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := g.sync(st); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	g.download(dev, got, dq)
	dbad := 0
	for i := range n {
		if got[i] != q[i] {
			if dbad < 5 {
				t.Errorf("device: %g / %g -> %#02x, PyTorch %#02x", f(x, i), f(s, i), got[i], q[i])
			}
			dbad++
		}
	}
	t.Logf("device conversion: %d of %d values differ from PyTorch", dbad, n)

	// Whole blocks.
	blk, bq, bs := readFile(t, dir, "blocks.bf16"), readFile(t, dir, "blocks_q.u8"), readFile(t, dir, "blocks_scale.f32")
	nb := int64(len(bs) / 4)
	if int64(len(blk)) != nb*128*128*2 || int64(len(bq)) != nb*128*128 {
		t.Fatalf("blocks: %d bytes of bf16, %d of fp8 for %d scales", len(blk), len(bq), nb)
	}
	vals := make([]float32, nb*128*128)
	for i := range vals {
		vals[i] = layout.BF16ToFloat32(binary.LittleEndian.Uint16(blk[2*i:]))
	}
	hq, hs := make([]uint8, len(vals)), make([]float32, nb)
	layout.QuantizeBox(vals, []int64{nb, 128, 128}, 128, 128, hq, hs)
	gb := 0
	for i := range hq {
		if hq[i] != bq[i] {
			gb++
		}
	}
	for i := range hs {
		if math.Float32bits(hs[i]) != binary.LittleEndian.Uint32(bs[4*i:]) {
			gb++
		}
	}
	t.Logf("Go reference, %d blocks of 128 x 128: %d fp8 bytes or scales differ from PyTorch", nb, gb)
	src, _ := g.alloc(dev, int64(len(blk)))
	out, _ := g.alloc(dev, int64(len(bq)))
	sc, _ := g.alloc(dev, int64(len(bs)))
	g.upload(dev, src, blk)
	size := []int64{nb, 128, 128}
	qa, kernel := planQuantArrays(src, out, sc, program.RowMajor(size), program.RowMajor(size), program.RowMajor([]int64{nb, 1, 1}), size, 128, 128, 1, 2)
	if err := g.quantize(&qa, kernel, false, st); err != nil {
		t.Fatal(err)
	}
	g.sync(st)
	kq, ks := make([]byte, len(bq)), make([]byte, len(bs))
	g.download(dev, kq, out)
	g.download(dev, ks, sc)
	kb := 0
	for i := range kq {
		if kq[i] != bq[i] {
			kb++
		}
	}
	for i := range ks {
		if ks[i] != bs[i] {
			kb++
		}
	}
	t.Logf("kernel %s, %d blocks: %d fp8 bytes or scale bytes differ from PyTorch", kernel, nb, kb)
	if bad+dbad+gb+kb > 0 {
		t.Errorf("differences from PyTorch: Go %d, device %d, Go blocks %d, kernel blocks %d", bad, dbad, gb, kb)
	}
}

// The quantize kernel's bandwidth on the paper tensor's boxes against a
// device copy of the bf16 bytes, both counting bytes read and written:
// bf16 in, fp8 and scales out. Run with -test.bench GPUQuantize.
func BenchmarkGPUQuantize(b *testing.B) {
	g, dev, st := firstGPU(b)
	timeIt := medianOf10(b, g, st)
	cases := []struct {
		name        string
		full, start []int64
		size        []int64
	}{
		// A trainer rank's shard of the paper's layer (EP16), quantized whole at the source.
		{"paper-shard", []int64{16, 2048, 7168}, []int64{0, 0, 0}, []int64{16, 2048, 7168}},
		// One destination slot's part of it (TP8): strided in the shard.
		{"paper-pack-box", []int64{16, 2048, 7168}, []int64{0, 256, 0}, []int64{16, 256, 7168}},
		// What fp8-2gpu quantizes: a rank's 8 experts at the source, and
		// a gathered matrix whose rows end in a short block (4160 = 32.5 x 128).
		{"fp8-2gpu-shard", []int64{8, 2048, 7168}, []int64{0, 0, 0}, []int64{8, 2048, 7168}},
		{"fp8-2gpu-gather", []int64{4160, 7168}, []int64{0, 0}, []int64{4160, 7168}},
		// One expert's matrix of it.
		{"one-expert", []int64{16, 2048, 7168}, []int64{5, 0, 0}, []int64{1, 2048, 7168}},
		// A dense matrix, Kimi-K2's o_proj: [7168, 8192].
		{"o-proj", []int64{7168, 8192}, []int64{0, 0}, []int64{7168, 8192}},
	}
	for _, c := range cases {
		nd := len(c.size)
		full := layout.Box{Size: c.full}.Elems() * 2
		n := layout.Box{Size: c.size}.Elems()
		sb := append(append([]int64(nil), c.size[:nd-2]...), (c.size[nd-2]+127)/128, (c.size[nd-1]+127)/128)
		nsc := layout.Box{Size: sb}.Elems()
		src, err := g.alloc(dev, full)
		if err != nil {
			b.Fatal(err)
		}
		dst, _ := g.alloc(dev, n)
		sc, _ := g.alloc(dev, 4*nsc)
		cp, _ := g.alloc(dev, 2*n)
		sst := program.RowMajor(c.full)
		var off int64
		for d := range nd {
			off += c.start[d] * sst[d]
		}
		// Weights as a trainer holds them: bf16 of a normal
		// distribution (sigma 0.02).
		if err := g.upload(dev, src, trainerWeights(full/2, rand.New(rand.NewPCG(3, uint64(len(c.name)))))); err != nil {
			b.Fatal(err)
		}
		qa, kernel := planQuantArrays(src+uint64(2*off), dst, sc, sst, program.RowMajor(c.size), program.RowMajor(sb), c.size, 128, 128, 1, 2)
		b.Run(c.name, func(b *testing.B) {
			// The general vector kernel beside the chosen one, in one loop.
			var tq, tg, tc units.Time
			for b.Loop() {
				tq = timeIt(func() error { return g.quantize(&qa, kernel, false, st) })
				tg = timeIt(func() error { return g.quantize(&qa, "quantize_e4m3_8", false, st) })
				tc = timeIt(func() error { return g.copy(cp, src, 2*n, st) })
			}
			qbw := float64(2*n+n+4*nsc) / tq.Seconds() / 1e9
			gbw := float64(2*n+n+4*nsc) / tg.Seconds() / 1e9
			cbw := float64(4*n) / tc.Seconds() / 1e9
			b.ReportMetric(qbw, "quantize-GB/s")
			b.ReportMetric(cbw, "copy-GB/s")
			b.ReportMetric(qbw/cbw, "quantize/copy")
			fmt.Fprintf(os.Stderr, "quantize %-15s %v %s: %7.0f GB/s (read+written) against a device copy's %7.0f GB/s: %.2f (quantize_e4m3_8: %7.0f GB/s, %.2f)\n",
				c.name, c.size, kernel, qbw, cbw, qbw/cbw, gbw, gbw/cbw)
		})
		g.free(dev, src)
		g.free(dev, dst)
		g.free(dev, sc)
		g.free(dev, cp)
	}
}

// Quantized schedules on the GPU with blocks for the split kernels (per
// tensor and per expert scales of 16-bit sources), in loopback over copies
// and NCCL: every fp8 byte and scale checked there by the tiled check
// (verify_quant_amax, verify_quant_tiles), which then fails on one flipped
// fp8 byte and on one flipped scale.
func TestGPUSplitQuantizeSchedules(t *testing.T) {
	if _, err := Devices(); err != nil {
		skipWithoutGPU(t, err)
	}
	rng := rand.New(rand.NewPCG(67, 68))
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 2, 2
	for i := range 8 {
		s := splitSchedule(t, rng, tp, 512, 512, 1<<16)
		runGPULoopbacks(t, rng, i, s)
		if i < 2 {
			checkFailsOnFlip(t, s)
		}
	}
}

// runGPULoopbacks runs case i's schedule s on the GPU in loopback over
// copies (in a graph for even i) and over NCCL, each at a random count of
// lanes, twice, every byte checked.
func runGPULoopbacks(t *testing.T, rng *rand.Rand, i int, s *ir.Schedule) {
	t.Helper()
	for _, opt := range []Options{
		{Backend: Loopback, Settings: program.Settings{Transport: TransportCopy, Lanes: 1 + rng.IntN(4), Graph: i%2 == 0}, Iters: 2},
		{Backend: Loopback, Settings: program.Settings{Transport: TransportNCCL, Lanes: 1 + rng.IntN(4)}, Iters: 2},
	} {
		runGPU(t, i, s, opt)
	}
}

// checkFailsOnFlip runs s in loopback, then flips one bit of an fp8 output
// and of a scale on the GPU: the check must find each.
func checkFailsOnFlip(t *testing.T, s *ir.Schedule) {
	t.Helper()
	x, err := New(s, Options{Backend: Loopback, Iters: 1})
	skipWithoutGPU(t, err)
	defer x.Close()
	if _, err := x.Run(); err != nil {
		t.Fatal(err)
	}
	g := x.g.(*cudaGPU)
	for _, scales := range []bool{false, true} {
		buf := -1
		for i, b := range s.Buffers {
			if b.Kind == ir.Output && (s.Tensors[b.Tensor].ScaleOf > 0) == scales && (scales || s.Tensors[b.Tensor].Quant.On()) {
				buf = i
				break
			}
		}
		if buf < 0 {
			t.Fatalf("no output buffer of %s", map[bool]string{false: "fp8", true: "scales"}[scales])
		}
		d := x.devOf[int32(s.Buffers[buf].Rank)]
		at := x.bufAddr[buf] + uint64(s.Buffers[buf].Bytes/2)
		b := make([]byte, 1)
		if err := g.download(d, b, at); err != nil {
			t.Fatal(err)
		}
		flipped := []byte{b[0] ^ 0x40}
		if err := g.upload(d, at, flipped); err != nil {
			t.Fatal(err)
		}
		var res Result
		if err := x.check(&res); err != nil {
			t.Fatal(err)
		}
		if res.Verified || res.WrongElems != 1 {
			t.Errorf("a flipped %s byte: verified %v, %d wrong elements; want 1", map[bool]string{false: "fp8", true: "scale"}[scales], res.Verified, res.WrongElems)
		}
		if err := g.upload(d, at, b); err != nil {
			t.Fatal(err)
		}
	}
}

// Destinations whose shards cut their blocks (per channel and per tensor,
// split by columns, as vLLM's row-parallel weights) on the GPU: every
// route in loopback over copies and NCCL, every fp8 byte checked against
// the pattern quantized over the whole blocks, and a flipped byte and
// scale found; the same weight in shard scales (a scale a rank's shard,
// which no split cuts).
func TestGPUCutBlockSchedules(t *testing.T) {
	if _, err := Devices(); err != nil {
		skipWithoutGPU(t, err)
	}
	rng := rand.New(rand.NewPCG(71, 72))
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 2, 2
	i := 0
	for _, scheme := range []layout.QuantScheme{layout.QuantChannel, layout.QuantTensor, layout.QuantShard} {
		for _, route := range plan.Routes {
			shape := []int64{128 + rng.Int64N(256), 8 * (64 + rng.Int64N(128))}
			if scheme == layout.QuantShard {
				shape[1] = 16 * (64 + rng.Int64N(64)) // two shards of whole vectors, wide enough for the split kernels
			}
			dt := []layout.DType{layout.BF16, layout.FP16}[rng.IntN(2)]
			s := cutBlockSchedule(t, tp, shape, dt, scheme, route, 1<<16)
			runGPULoopbacks(t, rng, i, s)
			if route == plan.Routes[0] {
				checkFailsOnFlip(t, s)
			}
			i++
		}
	}
}

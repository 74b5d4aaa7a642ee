package layout

import (
	"errors"
	"fmt"
	"math"
)

// E4M3Max is the largest finite fp8_e4m3 (OCP E4M3FN, torch.float8_e4m3fn)
// value: 1.75 x 2^8.
const E4M3Max = 448

// ToE4M3 converts a float32 to the bits of an fp8_e4m3 (OCP E4M3FN) value:
// round to nearest, ties to even; a magnitude of 448 or more saturates to
// ±448 (0x7E / 0xFE); NaN becomes 0x7F (with the input's sign). Below 2^-6
// the result is subnormal (the smallest is 2^-9), and anything at or below
// half of 2^-9 rounds to a signed zero.
//
// On |f| < 464 it is bit for bit PyTorch's f.to(torch.float8_e4m3fn)
// (c10/util/Float8_e4m3fn.h, whose algorithm this is); PyTorch turns 464
// and above into NaN where this saturates, so it equals
// f.clamp(-448, 448).to(torch.float8_e4m3fn) for every finite f.
func ToE4M3(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	b &^= 1 << 31
	switch {
	case b > 0x7f800000: // NaN
		return sign | 0x7f
	case b >= 0x43e00000: // 448 and above, infinity included
		return sign | 0x7e
	case b < 121<<23: // below 2^-6: subnormal or zero
		// Adding 2^(127-7+23-3+1-127) = 2^14 aligns the fp8 mantissa's
		// last bit with the float32's: the addition rounds to nearest even.
		const denorm = 141 << 23
		s := math.Float32frombits(b) + math.Float32frombits(denorm)
		return sign | uint8(math.Float32bits(s)-denorm)
	}
	odd := (b >> 20) & 1
	b -= (127 - 7) << 23 // rebias the exponent
	b += 0x7ffff + odd   // round: half down, then half to even
	return sign | uint8(b>>20)
}

// E4M3ToFloat32 decodes fp8_e4m3 bits (0x7F and 0xFF are NaN).
func E4M3ToFloat32(q uint8) float32 {
	sign := float32(1)
	if q&0x80 != 0 {
		sign = -1
	}
	e, m := int(q>>3)&0xf, float32(q&7)
	switch {
	case e == 0xf && m == 7:
		return float32(math.NaN())
	case e == 0:
		return sign * m / 8 * float32(math.Ldexp(1, -6))
	}
	return sign * (1 + m/8) * float32(math.Ldexp(1, e-7))
}

// BF16ToFloat32 decodes bfloat16 bits.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FP16ToFloat32 decodes IEEE half-precision bits.
func FP16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	e, m := uint32(h>>10)&0x1f, uint32(h&0x3ff)
	switch {
	case e == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | m<<13)
	case e == 0 && m == 0:
		return math.Float32frombits(sign)
	case e == 0: // subnormal: m x 2^-24, exact in float32
		f := float32(m) * float32(math.Ldexp(1, -24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (e+112)<<23 | m<<13)
}

// Decode returns element i of little-endian data of a float dtype (bf16,
// fp16, fp32, fp8_e4m3) as a float32, exactly.
func Decode(dt DType, data []byte, i int64) float32 {
	switch dt {
	case BF16:
		return BF16ToFloat32(uint16(data[2*i]) | uint16(data[2*i+1])<<8)
	case FP16:
		return FP16ToFloat32(uint16(data[2*i]) | uint16(data[2*i+1])<<8)
	case FP32:
		return math.Float32frombits(uint32(data[4*i]) | uint32(data[4*i+1])<<8 | uint32(data[4*i+2])<<16 | uint32(data[4*i+3])<<24)
	case FP8E4M3:
		return E4M3ToFloat32(data[i])
	}
	panic(fmt.Sprintf("layout.Decode: %v is not a float dtype m2n decodes", dt))
}

// Scale is the FP32 scale of a block whose largest magnitude is amax:
// amax / 448, rounded to nearest float32; 1 for an all-zero block. The
// block's values are stored as ToE4M3(x / scale), and x is approximately
// scale x E4M3ToFloat32(q): scale is what DeepSeek-V3's checkpoints and
// vLLM call weight_scale_inv.
func Scale(amax float32) float32 {
	if amax == 0 {
		return 1
	}
	return amax / E4M3Max
}

// QuantizeBlock is the reference quantizer of one block: amax = the largest
// |x| of the block (float32) that is not NaN, scale = Scale(amax), and each
// q[i] = ToE4M3(x[i] / scale) with the division in float32, rounded to
// nearest even. It returns the scale. Every executor's quantize op must
// produce exactly these bits. A NaN element is 0x7F whatever its sign (a
// GPU's division returns the canonical NaN, sign clear: measured on an
// H200 by TestGPUQuantizeKernels) and leaves the rest of its block as it
// would be without it, as the GPU kernels' fmaxf and vLLM's FP8 kernels
// give (PyTorch's |x|.amax() would make the whole block NaN).
func QuantizeBlock(x []float32, q []uint8) float32 {
	var amax float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax { // false for NaN
			amax = a
		}
	}
	s := Scale(amax)
	for i, v := range x {
		if v != v {
			q[i] = 0x7f
		} else {
			q[i] = ToE4M3(v / s)
		}
	}
	return s
}

// QuantScheme is how a destination's FP8 weight is scaled.
type QuantScheme uint8

// Quantization schemes.
const (
	NoQuant QuantScheme = iota
	// QuantBlock: one scale per Block[0] x Block[1] block of the last two
	// dims (DeepSeek-V3 and Kimi-K2: 128 x 128), per leading index (per
	// expert of stacked experts).
	QuantBlock
	// QuantChannel: one scale per row (output channel) of the last two dims.
	QuantChannel
	// QuantTensor: one scale per matrix (per expert of stacked experts).
	QuantTensor
	// QuantShard: one scale per destination shard of the matrix, as vLLM
	// quantizes a bf16 checkpoint online (quantization = "fp8" without
	// serialized fp8 weights: each rank's process_weights_after_loading
	// quantizes its own shard with one dynamic per-tensor scale). Block
	// holds the shard's extents once resolved for the destination
	// layout (ForLayout); from there it is a block scheme of that block.
	QuantShard
)

var schemeNames = [...]string{NoQuant: "none", QuantBlock: "block", QuantChannel: "channel", QuantTensor: "tensor", QuantShard: "shard"}

func (s QuantScheme) String() string {
	if int(s) < len(schemeNames) {
		return schemeNames[s]
	}
	return fmt.Sprintf("scheme(%d)", int(s))
}

// ParseQuantScheme reads "block", "channel", "tensor" or "shard".
func ParseQuantScheme(s string) (QuantScheme, error) {
	for i, n := range schemeNames {
		if i > 0 && n == s {
			return QuantScheme(i), nil
		}
	}
	return NoQuant, fmt.Errorf("unknown quantization scheme %q (known: block, channel, tensor, shard)", s)
}

// Quant says how a tensor's destination is quantized: the destination
// dtype is fp8_e4m3 and each block of the last two dims has one FP32
// scale, held by a scale tensor of its own. The zero value is no
// quantization.
type Quant struct {
	Scheme QuantScheme
	Block  [2]int64 // QuantBlock, QuantShard (resolved): rows and columns of a block
}

// HasBlock reports whether the scheme's blocks are Block: block scales,
// and shard scales once resolved for a layout.
func (q Quant) HasBlock() bool { return q.Scheme == QuantBlock || q.Scheme == QuantShard }

// DefaultBlock is DeepSeek-V3's and Kimi-K2's weight_block_size.
var DefaultBlock = [2]int64{128, 128}

// On reports whether q quantizes.
func (q Quant) On() bool { return q.Scheme != NoQuant }

func (q Quant) String() string {
	if q.HasBlock() {
		return fmt.Sprintf("%v %dx%d", q.Scheme, q.Block[0], q.Block[1])
	}
	return q.Scheme.String()
}

// Blocks returns the block extent of the last two dims of a tensor of
// this shape: Block for block and (resolved) shard scales, [1, cols] per
// channel, [rows, cols] per tensor.
func (q Quant) Blocks(shape []int64) (rows, cols int64) {
	nd := len(shape)
	switch q.Scheme {
	case QuantChannel:
		return 1, shape[nd-1]
	case QuantTensor:
		return shape[nd-2], shape[nd-1]
	}
	return q.Block[0], q.Block[1]
}

// ScaleShape is the shape of the scale tensor of a tensor of this shape:
// its leading dims, then ceil(rows / block rows) x ceil(cols / block cols).
// For 128 x 128 blocks of a [7168, 2048] matrix, [56, 16]; per channel
// [7168, 1] (vLLM's weight_scale); per tensor [1, 1].
func (q Quant) ScaleShape(shape []int64) []int64 {
	br, bc := q.Blocks(shape)
	nd := len(shape)
	out := append([]int64(nil), shape[:nd-2]...)
	return append(out, ceilDiv(shape[nd-2], br), ceilDiv(shape[nd-1], bc))
}

// ScaleBox is the box of the scale tensor that the blocks of a weight box
// cover (from the block of its first element to the block of its last).
func (q Quant) ScaleBox(shape []int64, b Box) Box {
	br, bc := q.Blocks(shape)
	nd := len(shape)
	out := b.Clone()
	for k, bs := range [2]int64{br, bc} {
		d := nd - 2 + k
		lo := b.Start[d] / bs
		out.Start[d], out.Size[d] = lo, ceilDiv(b.Start[d]+b.Size[d], bs)-lo
	}
	return out
}

// WeightBox is the box of a weight of this shape that a box of its scale
// tensor covers: each scale's block, the last ones cut at the weight's
// edge (the inverse of ScaleBox on whole blocks).
func (q Quant) WeightBox(shape []int64, scales Box) Box {
	br, bc := q.Blocks(shape)
	nd := len(shape)
	out := scales.Clone()
	for k, bs := range [2]int64{br, bc} {
		d := nd - 2 + k
		lo := scales.Start[d] * bs
		out.Start[d], out.Size[d] = lo, min((scales.Start[d]+scales.Size[d])*bs, shape[d])-lo
	}
	return out
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// ForLayout resolves shard scales for destination layout l: the block is
// the extent of l's shards in each of the last two dims (the largest of a
// split dim's shards: torch.chunk's, the last one possibly shorter; the
// whole dim where l does not split it). Other schemes are returned as they
// are. A layout whose shards of a dim differ otherwise (one that does not
// start each shard on a multiple of the first's size) is refused by
// CheckBlocks, naming the dim.
func (q Quant) ForLayout(l Layout) (Quant, error) {
	if q.Scheme != QuantShard {
		return q, nil
	}
	nd := len(l.Shape)
	if nd < 2 {
		return q, fmt.Errorf("shape %v: quantizing needs two dims or more (blocks span the last two)", l.Shape)
	}
	for k := range 2 {
		d := nd - 2 + k
		b := int64(0)
		for _, iv := range l.Partition(d).Intervals {
			b = max(b, iv.Size)
		}
		if b == 0 {
			b = l.Shape[d]
		}
		q.Block[k] = b
	}
	if err := CheckBlocks(l, q); err != nil {
		return q, fmt.Errorf("shard scales: the destination's shards are not one size: %w", err)
	}
	return q, nil
}

// ValidateQuant checks that src can be quantized to dst under q: dst is
// fp8_e4m3, src bf16, fp16 or fp32, the tensor has two dims or more, and
// blocks are positive.
func ValidateQuant(src, dst DType, shape []int64, q Quant) error {
	switch {
	case q.Scheme > QuantShard:
		return fmt.Errorf("quantization scheme %v is not known", q.Scheme)
	case q.Scheme == QuantShard && (q.Block[0] <= 0 || q.Block[1] <= 0):
		return fmt.Errorf("shard scales with block %v: not resolved for a destination layout (Quant.ForLayout)", q.Block)
	case dst != FP8E4M3:
		return fmt.Errorf("destination dtype %v: quantized destinations are fp8_e4m3", dst)
	case src != BF16 && src != FP16 && src != FP32:
		return fmt.Errorf("source dtype %v: m2n quantizes bf16, fp16 or fp32 to fp8_e4m3", src)
	case len(shape) < 2:
		return fmt.Errorf("shape %v: quantizing needs two dims or more (blocks span the last two)", shape)
	case q.Scheme == QuantBlock && (q.Block[0] <= 0 || q.Block[1] <= 0):
		return fmt.Errorf("block %v: both extents must be positive", q.Block)
	case q.Scheme == QuantBlock && (q.Block[0] > MaxBlock || q.Block[1] > MaxBlock):
		// Block counts are ceil(extent / block): an extent near 2^63 would
		// overflow the sum inside.
		return fmt.Errorf("block %v: each extent may be at most %d (a block larger than its dim is one block; per-tensor scales are scales = \"tensor\")", q.Block, int64(MaxBlock))
	}
	return nil
}

// MaxBlock bounds a quantization block's extents.
const MaxBlock = 1 << 31

// ErrCutsBlock is wrapped by the error of a layout whose shards cut a
// quantization block.
var ErrCutsBlock = errors.New("a shard boundary cuts a quantization block")

// CheckBlocks checks that every shard of l holds whole blocks of q in the
// last two dims (a shard may end at the tensor's edge inside a block): a
// shard boundary inside a block would leave the block's scale to two
// ranks. vLLM refuses such a TP for block-FP8 weights (the shard size must
// be a multiple of the block), and so does m2n. Per-channel and
// per-tensor scales are another matter: vLLM holds a row-parallel shard of
// such a weight (its block cut by the split) with the scale replicated,
// computed over the whole block before sharding, and so does m2n on the
// destination (LandingLayout). The error names the dim, the shard and the
// block.
func CheckBlocks(l Layout, q Quant) error {
	nd := len(l.Shape)
	br, bc := q.Blocks(l.Shape)
	for k, bs := range [2]int64{br, bc} {
		d := nd - 2 + k
		n := l.Shape[d]
		for _, iv := range l.Partition(d).Intervals {
			if iv.Size == 0 {
				continue
			}
			end := iv.Start + iv.Size
			for _, at := range [2]int64{iv.Start, end} {
				if at%bs != 0 && at != n {
					axes := ""
					for i, a := range l.Partition(d).Axes {
						if i > 0 {
							axes += ", "
						}
						axes += fmt.Sprintf("mesh axis %d (%d ranks, %v)", a, l.Mesh.Shape[a], l.Placements[a])
					}
					why := "vLLM refuses such a split too: each shard must hold whole blocks"
					if q.Scheme == QuantShard {
						why = "shard scales take the shards' size as their block, and these shards differ in size (uneven splits nested)"
					} else if !q.HasBlock() {
						why = fmt.Sprintf("vLLM holds such a shard with the %s scale replicated, computed over the whole block before sharding (a destination lands the whole block: LandingLayout)", q.Scheme)
					}
					return fmt.Errorf("%w: dim %d (%d) is split by %s into shards of %d, and the shard [%d, %d) %s at %d, inside a block of %d (%d = %d x %d + %d); %s",
						ErrCutsBlock, d, n, axes, iv.Size, iv.Start, end, map[bool]string{true: "starts", false: "ends"}[at == iv.Start], at, bs, at, at/bs, bs, at%bs, why)
				}
			}
		}
	}
	return nil
}

// LandingLayout is the layout a quantized destination l is quantized on,
// one rank per shard of it: l itself where its shards hold whole blocks
// of q; where the shards of a mesh axis cut the blocks of a dim that one
// block spans whole (per-channel scales split by columns, a per-tensor
// scale split any way: vLLM's row-parallel FP8 weights), that axis
// replicates instead, so that each rank lands the whole blocks its shard
// touches, quantizes them and keeps its part, with the scales replicated
// as vLLM holds them. Any other cut is refused, with CheckBlocks's error.
func LandingLayout(l Layout, q Quant) (Layout, error) {
	err := CheckBlocks(l, q)
	if err == nil {
		return l, nil
	}
	nd := len(l.Shape)
	br, bc := q.Blocks(l.Shape)
	out := l
	out.Placements = append([]Placement(nil), l.Placements...)
	for k, bs := range [2]int64{br, bc} {
		d := nd - 2 + k
		if bs < l.Shape[d] {
			continue // several blocks along d: a cut there stays a cut
		}
		for a, p := range out.Placements {
			if p.Shard && p.Dim == d {
				out.Placements[a] = R
			}
		}
	}
	if CheckBlocks(out, q) != nil {
		return Layout{}, err
	}
	return out, nil
}

// ScaleLayout is the layout of the scale tensor of l under q: FP32, the
// scale shape, the same mesh and placements. When l's shards hold whole
// blocks ([CheckBlocks]), each rank's scale box is exactly the blocks of
// its weight box; ScaleLayout checks that and reports otherwise.
func ScaleLayout(l Layout, q Quant) (Layout, error) {
	if err := CheckBlocks(l, q); err != nil {
		return Layout{}, err
	}
	sl := Layout{Shape: q.ScaleShape(l.Shape), DType: FP32, Mesh: l.Mesh, Placements: l.Placements}
	nd := len(l.Shape)
	for d := nd - 2; d < nd; d++ {
		w, s := l.Partition(d).Intervals, sl.Partition(d).Intervals
		for i := range w {
			full := Box{Start: make([]int64, nd), Size: append([]int64(nil), l.Shape...)}
			full.Start[d], full.Size[d] = w[i].Start, w[i].Size
			want := q.ScaleBox(l.Shape, full)
			if w[i].Size == 0 && s[i].Size == 0 {
				continue
			}
			if w[i].Size == 0 || s[i].Start != want.Start[d] || s[i].Size != want.Size[d] {
				return Layout{}, fmt.Errorf("%w: dim %d: shard %d holds [%d, %d) of the weight but [%d, %d) of the %d-block scales",
					ErrCutsBlock, d, i, w[i].Start, w[i].Start+w[i].Size, s[i].Start, s[i].Start+s[i].Size, sl.Shape[d])
			}
		}
	}
	return sl, nil
}

// QuantizeBox quantizes the elements of a box, row-major in x, whose last
// two dims hold whole blocks of br x bc (the box starts on a block edge;
// a last block may be cut by the tensor's edge): each block by
// [QuantizeBlock], the fp8 bits row-major in q (as x), the scales
// row-major in scales (the box's leading dims, then its block rows and
// block columns).
func QuantizeBox(x []float32, size []int64, br, bc int64, q []uint8, scales []float32) {
	nd := len(size)
	rows, cols := size[nd-2], size[nd-1]
	lead := int64(1)
	for _, s := range size[:nd-2] {
		lead *= s
	}
	nbr, nbc := ceilDiv(rows, br), ceilDiv(cols, bc)
	blk := make([]float32, 0, br*bc)
	out := make([]uint8, br*bc)
	for l := range lead {
		base := l * rows * cols
		for i := range nbr {
			r0, r1 := i*br, min((i+1)*br, rows)
			for j := range nbc {
				c0, c1 := j*bc, min((j+1)*bc, cols)
				blk = blk[:0]
				for r := r0; r < r1; r++ {
					blk = append(blk, x[base+r*cols+c0:base+r*cols+c1]...)
				}
				scales[(l*nbr+i)*nbc+j] = QuantizeBlock(blk, out[:len(blk)])
				k := 0
				for r := r0; r < r1; r++ {
					copy(q[base+r*cols+c0:base+r*cols+c1], out[k:k+int(c1-c0)])
					k += int(c1 - c0)
				}
			}
		}
	}
}

package program

import (
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
)

// QuantKernel is which quantize kernel the executor runs for a quantize op.
type QuantKernel uint8

const (
	// QuantB128 is the 128 x 128 kernel (quantize_e4m3_b128_*): 16-bit
	// sources in 16-byte vectors, whole-width 128 x 128 blocks.
	QuantB128 QuantKernel = iota
	// QuantGeneric is the kernel of any other block shape (per channel,
	// unaligned or fp32 sources; quantize_e4m3_1, _4 and _8): a thread
	// block a quantization block, an amax pass then a quantize pass.
	QuantGeneric
	// QuantSplit is the split kernels' pair (quantize_e4m3_split_*): blocks
	// of at least SplitMinElems elements of 16-bit sources in vectors (per
	// tensor, per expert), each taken by many thread blocks: one launch
	// reads the source for the blocks' amax, a second reads it again and
	// writes the bytes and scales. It has no batch form.
	QuantSplit
	// QuantRows is the row kernels (quantize_e4m3_rows_*): blocks of one
	// row (per-channel scales) of 16-bit sources in vectors, a thread
	// block a row, the amax an integer max and the division the 128 x 128
	// kernels' proven fast arithmetic.
	QuantRows
)

func (k QuantKernel) String() string {
	switch k {
	case QuantB128:
		return "128 x 128"
	case QuantSplit:
		return "split"
	case QuantRows:
		return "rows"
	}
	return "generic"
}

// SplitMinElems is the smallest quantization block (elements of the box it
// covers) the split kernels take: below it one thread block a block keeps
// up (a per-channel row of a few thousand elements); a block of millions on
// one thread block ran 1,000 times slower than the split kernels.
const SplitMinElems = 1 << 15

// SplitMinCols is the narrowest block (columns of the box it covers) the
// split kernels take: their tiles are a row of a block's columns, and a
// tile of a few vectors would pay a thread block's reduction and two
// atomics for them (tall narrow blocks stay on the generic kernel).
const SplitMinCols = 256

// MaxSplitBlocks is the most quantization blocks a box the split kernels
// take may have (their work memory, two words a block).
const MaxSplitBlocks = 1 << 20

// QuantKernelName chooses the kernel that quantizes a box of size (its last
// two dims cut in blocks of br x bc) of elem-byte source elements (bf16 or
// else fp16 when 2 bytes) at address src with element strides sst (all but
// the last dim), into fp8 at address dst with strides dstS: its class and
// its name. The executor launches what it returns; the model classes the
// op with the same function (QuantKernelOf).
func QuantKernelName(src, dst uint64, sst, dstS, size []int64, br, bc, elem int64, bf16 bool) (QuantKernel, string) {
	nd := len(size)
	// Vectors of v source elements when every block row is whole 16-byte
	// source vectors and v-byte destination words.
	v := 16 / elem
	ok := bc%v == 0 && size[nd-1]%v == 0 && src%16 == 0 && dst%uint64(v) == 0
	for d := 0; d < nd-1; d++ {
		ok = ok && (sst[d]*elem)%16 == 0 && dstS[d]%v == 0
	}
	if !ok {
		v = 1
	}
	lead := int64(1)
	for d := 0; d < nd-2; d++ {
		lead *= size[d]
	}
	nb := lead * ((size[nd-2] + br - 1) / br) * ((size[nd-1] + bc - 1) / bc)
	// The 128 x 128 kernels: 16-bit sources in vectors, whole-width blocks.
	if v == 8 && br == 128 && bc == 128 && size[nd-1]%128 == 0 && nb < 1<<31 && slices.Max(size) < 1<<31 {
		if bf16 {
			return QuantB128, "quantize_e4m3_b128_bf16"
		}
		return QuantB128, "quantize_e4m3_b128_fp16"
	}
	// The row kernels: 16-bit sources in vectors, blocks of one row.
	if v == 8 && br == 1 && nb < 1<<31 && slices.Max(size) < 1<<31 {
		if bf16 {
			return QuantRows, "quantize_e4m3_rows_bf16"
		}
		return QuantRows, "quantize_e4m3_rows_fp16"
	}
	// The split kernels: 16-bit sources in vectors, blocks too large for
	// one thread block.
	if v == 8 && min(br, size[nd-2])*min(bc, size[nd-1]) >= SplitMinElems && min(bc, size[nd-1]) >= SplitMinCols && nb <= MaxSplitBlocks && slices.Max(size) < 1<<31 {
		if bf16 {
			return QuantSplit, "quantize_e4m3_split_bf16"
		}
		return QuantSplit, "quantize_e4m3_split_fp16"
	}
	return QuantGeneric, fmt.Sprintf("quantize_e4m3_%d", v)
}

// IsSplitKernel reports whether a quantize kernel is one of the split
// kernels (QuantSplit), which run as two launches (its _amax, then its
// _apply) with work memory.
func IsSplitKernel(kernel string) bool { return strings.HasPrefix(kernel, "quantize_e4m3_split_") }

// HasBatchForm reports whether a quantize kernel has a batch form (its
// name with _batch): every one but the split kernels.
func HasBatchForm(kernel string) bool { return !IsSplitKernel(kernel) }

// QuantKernelOf returns the kernel the executor runs for quantize op i of s,
// taking every buffer to start 16-byte aligned: the executor aligns its
// own buffers to 256 bytes at least; a caller's arrays (native's External)
// are as the caller allocated them, and an unaligned one may run the
// generic kernel where this says the 128 x 128 one.
func QuantKernelOf(s *ir.Schedule, i int32) (QuantKernel, error) {
	k, _, _, err := QuantKernelNameOf(s, i)
	return k, err
}

// QuantKernelNameOf is QuantKernelOf with the kernel's name and its
// quantization blocks.
func QuantKernelNameOf(s *ir.Schedule, i int32) (k QuantKernel, name string, blocks int64, err error) {
	l, err := QuantLayoutOf(s, i)
	if err != nil {
		return 0, "", 0, err
	}
	// The staging arena starts aligned; its buffers need not.
	src := l.Src + s.Buffers[l.Op.Src.Buf].Base()
	dst := l.Dst + s.Buffers[l.Op.Dst.Buf].Base()
	k, name = QuantKernelName(uint64(src), uint64(dst), l.SrcStrides, l.DstStrides, l.Box.Size, l.BR, l.BC, l.Elem, l.Tensor.Src.DType == layout.BF16)
	nd := len(l.Box.Size)
	blocks = (l.Box.Size[nd-2] + l.BR - 1) / l.BR * ((l.Box.Size[nd-1] + l.BC - 1) / l.BC)
	for d := range nd - 2 {
		blocks *= l.Box.Size[d]
	}
	return k, name, blocks, nil
}

// MaxQuantBatchBlocks is the most quantization blocks one launch of a
// quantize kernel's batch form runs: the 128 x 128 kernels count blocks in
// 32 bits.
const MaxQuantBatchBlocks = 1<<31 - 1

// SplitQuantBatch splits the quantize ops of a batch step, given each
// one's kernel and quantization blocks, into the launches the executor
// makes: the ops of a kernel with two or more of them (and at most
// MaxQuantBatchBlocks blocks in all) as one launch of its batch form, in
// the order the kernels first appear; the others alone, in order.
func SplitQuantBatch(kernels []string, blocks []int64) (groups [][]int, alone []int) {
	var names []string
	by := map[string][]int{}
	for i, k := range kernels {
		if _, ok := by[k]; !ok {
			names = append(names, k)
		}
		by[k] = append(by[k], i)
	}
	for _, k := range names {
		ops := by[k]
		var n int64
		for _, i := range ops {
			n += blocks[i]
		}
		if len(ops) < 2 || n > MaxQuantBatchBlocks || !HasBatchForm(k) {
			alone = append(alone, ops...)
			continue
		}
		groups = append(groups, ops)
	}
	return groups, alone
}

// QuantLayout is how a quantize op lays out what it reads and writes.
type QuantLayout struct {
	Op     *ir.Op
	Tensor *ir.Tensor // the tensor it quantizes
	Box    layout.Box // the box it quantizes, in the tensor
	Elem   int64      // the source's element size, bytes
	BR, BC int64      // the quantization block: rows x columns of the last two dims
	// Src and Dst are the byte offsets of the box's first element in its
	// source and fp8 destination buffers, with the element strides of
	// each buffer around it.
	Src, Dst               int64
	SrcStrides, DstStrides []int64
}

// QuantLayoutOf returns the layout of quantize op i of s.
func QuantLayoutOf(s *ir.Schedule, i int32) (QuantLayout, error) {
	op := &s.Ops[i]
	if op.Kind != ir.Quantize {
		return QuantLayout{}, fmt.Errorf("op %d is a %v, not a quantize", i, op.Kind)
	}
	t := &s.Tensors[s.Buffers[op.Src.Buf].Tensor]
	box, ok := s.GlobalBox(op.Src)
	if !ok {
		return QuantLayout{}, fmt.Errorf("op %d: quantizes a byte range that is not a box", i)
	}
	l := QuantLayout{Op: op, Tensor: t, Box: box, Elem: t.Src.DType.Size()}
	l.Src, l.SrcStrides = RegionArray(s, op.Src, box.Size, l.Elem)
	l.Dst, l.DstStrides = RegionArray(s, op.Dst, box.Size, 1)
	l.BR, l.BC = t.Quant.Blocks(t.Src.Shape)
	return l, nil
}

// RegionArray returns where a region's box starts in its buffer (its first
// element's byte offset) and the element strides of the buffer around it: a
// box of a placed buffer inside the buffer's box; a byte range holds its box
// dense (size, row-major).
func RegionArray(s *ir.Schedule, r ir.Region, size []int64, elem int64) (int64, []int64) {
	if r.IsBox() {
		b := &s.Buffers[r.Buf]
		st := RowMajor(b.Box.Size)
		var off int64
		for d, v := range s.Box(r).Start {
			off += v * st[d]
		}
		return off * elem, st
	}
	return r.Offset, RowMajor(size)
}

// RowMajor returns the element strides of a row-major array of shape full.
func RowMajor(full []int64) []int64 {
	st := make([]int64, len(full))
	n := int64(1)
	for d := len(full) - 1; d >= 0; d-- {
		st[d] = n
		n *= full[d]
	}
	return st
}

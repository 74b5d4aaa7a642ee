package native

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/program"
)

// quantArgs mirrors struct QuantArgs in kernels/copy.cu, field for field.
type quantArgs struct {
	Src, Dst, Scale                    uint64
	Lead, Rows, Cols, BR, BC, NBR, NBC int64
	NLead, SDT                         int32
	Size                               [maxDims]int64
	SrcStride                          [maxDims]int64
	DstStride                          [maxDims]int64
	ScaleStride                        [maxDims]int64
	// Work is the split kernels' device memory (splitWorkBytes; zero
	// before their first launch), 0 for the other kernels.
	Work uint64
}

// splitWorkBytes is the device memory a split kernel's launch needs for a
// box of nb quantization blocks: two words a block and a counter (struct
// QuantArgs in kernels/copy.cu).
func splitWorkBytes(nb int64) int64 { return 4 * (2*nb + 1) }

// quantBatchArgs mirrors struct QuantBatchArgs in kernels/copy.cu: the
// device addresses of a batch's quantArgs and of their blocks' prefix
// sums, how many ops, and their blocks in all.
type quantBatchArgs struct {
	Args, Prefix uint64
	N, Blocks    int64
}

// quantBatch is one launch of a quantize kernel's batch form: the ops of
// a batch step that run that kernel.
type quantBatch struct {
	kernel string // the ops' kernel; the launch is its _batch form
	args   quantBatchArgs
	blob   []byte // until uploaded: the quantArgs, then the prefix sums
}

// planQuantBatches splits the quantize ops of a batch step as
// program.SplitQuantBatch does (the simulator's model reads the same
// split): each kernel's ops, two or more, go in one launch of its batch
// form (their arguments and block prefix sums in blob, addresses relative
// to the blob's start until uploaded); the others are returned to run
// alone.
func planQuantBatches(members []int32, lp func(int32) *localPlan) (qs []quantBatch, rest []int32) {
	kernels, blocks := make([]string, len(members)), make([]int64, len(members))
	for j, i := range members {
		a := &lp(i).quant
		kernels[j], blocks[j] = lp(i).kernel, a.Lead*a.NBR*a.NBC
	}
	groups, alone := program.SplitQuantBatch(kernels, blocks)
	for _, g := range groups {
		var buf bytes.Buffer
		for _, j := range g {
			binary.Write(&buf, binary.LittleEndian, &lp(members[j]).quant)
		}
		prefixAt := uint64(buf.Len())
		var at int64
		for _, j := range g {
			binary.Write(&buf, binary.LittleEndian, at)
			at += blocks[j]
		}
		binary.Write(&buf, binary.LittleEndian, at)
		qs = append(qs, quantBatch{kernel: kernels[g[0]], args: quantBatchArgs{Prefix: prefixAt, N: int64(len(g)), Blocks: at}, blob: buf.Bytes()})
	}
	for _, j := range alone {
		rest = append(rest, members[j])
	}
	return qs, rest
}

// quantCheckArgs mirrors struct QuantCheckArgs in kernels/copy.cu.
type quantCheckArgs struct {
	Buf                     uint64
	Tensor, SDT, ND, Scales int32
	BR, BC                  int64
	Start, Size, GStride    [maxDims]int64
	Work                    uint64 // verify_quant_amax's and verify_quant_tiles' (a word a block), else 0
	// HStart, HSize: the global box of the fp8 bytes the buffer holds,
	// inside Start, Size, which covers their whole blocks (a shard that
	// cuts its blocks holds part of them); Start, Size when it cuts none.
	HStart, HSize [maxDims]int64
}

// sdtCode is the kernels' code of a quantized tensor's source dtype.
func sdtCode(dt layout.DType) (int32, error) {
	switch dt {
	case layout.BF16:
		return 1, nil
	case layout.FP16:
		return 2, nil
	case layout.FP32:
		return 3, nil
	}
	return 0, fmt.Errorf("quantize: source dtype %v (the kernels take bf16, fp16 and fp32)", dt)
}

// regionArray returns where a region's box starts (its first element's
// address) and the element strides of its buffer around it, as
// program.RegionArray lays it out (the model's kernel choice reads the same).
func (x *Executor) regionArray(r ir.Region, size []int64, elem int64) (uint64, []int64) {
	off, st := program.RegionArray(x.s, r, size, elem)
	return x.bufAddr[r.Buf] + uint64(off), st
}

// planQuant computes the arguments and the kernel of quantize op i.
func (x *Executor) planQuant(i int32) (quantArgs, string, error) {
	var a quantArgs
	s := x.s
	l, err := program.QuantLayoutOf(s, i)
	if err != nil {
		return a, "", err
	}
	op, t, box := l.Op, l.Tensor, l.Box
	nd := len(box.Size)
	if nd > maxDims {
		return a, "", fmt.Errorf("op %d: a tensor of %d dims: the kernels take at most %d", i, nd, maxDims)
	}
	sdt, err := sdtCode(t.Src.DType)
	if err != nil {
		return a, "", err
	}
	br, bc, elem, sst, dstS := l.BR, l.BC, l.Elem, l.SrcStrides, l.DstStrides
	src := x.bufAddr[op.Src.Buf] + uint64(l.Src)
	dst := x.bufAddr[op.Dst.Buf] + uint64(l.Dst)
	sbox := t.Quant.ScaleBox(t.Src.Shape, box)
	scale, scS := x.regionArray(s.QuantScale[i], sbox.Size, 4)
	if src%uint64(elem) != 0 || scale%4 != 0 {
		return a, "", fmt.Errorf("op %d: quantize: the source (at %#x) must be aligned to its %d-byte elements and the scales (at %#x) to 4 bytes", i, src, elem, scale)
	}
	a, kernel := planQuantArrays(src, dst, scale, sst, dstS, scS, box.Size, br, bc, sdt, elem)
	return a, kernel, nil
}

// planQuantArrays computes the arguments and the kernel that quantize a
// box of the given size (its last two dims whole blocks of br x bc) from
// src to dst (fp8) and scale (FP32): each side's first element's address
// and the element strides of its array around it.
func planQuantArrays(src, dst, scale uint64, sst, dstS, scS, size []int64, br, bc int64, sdt int32, elem int64) (quantArgs, string) {
	nd := len(size)
	sb := []int64{(size[nd-2] + br - 1) / br, (size[nd-1] + bc - 1) / bc}
	box := layout.Box{Size: size}
	a := quantArgs{Src: src, Dst: dst, Scale: scale, Lead: 1, Rows: box.Size[nd-2], Cols: box.Size[nd-1], BR: br, BC: bc,
		NBR: sb[0], NBC: sb[1], NLead: int32(nd - 2), SDT: sdt}
	for d := 0; d < nd-2; d++ {
		a.Lead *= box.Size[d]
		a.Size[d] = box.Size[d]
	}
	for d := 0; d < nd-1; d++ {
		a.SrcStride[d], a.DstStride[d], a.ScaleStride[d] = sst[d], dstS[d], scS[d]
	}
	_, kernel := program.QuantKernelName(src, dst, sst, dstS, size, br, bc, elem, sdt == 1)
	return a, kernel
}

// quantGrid is the launch of a quantize kernel over nb quantization blocks
// on a GPU of sms multiprocessors: threads a thread block, and thread
// blocks. The 128 x 128 kernels run two thread blocks a multiprocessor,
// each taking an equal share of the blocks (measured fastest,
// docs/native.md); most > 0 caps the thread blocks (beside NCCL kernels).
func quantGrid(kernel string, nb int64, sms, most int) (threads int, grid int64) {
	if strings.HasPrefix(kernel, "quantize_e4m3_b128_") {
		if nb == 0 {
			return 128, 1 // an empty box: one block, which returns
		}
		blocks := 2 * int64(sms)
		if most > 0 {
			blocks = min(blocks, int64(most))
		}
		per := (nb + blocks - 1) / blocks
		return 128, (nb + per - 1) / per
	}
	if program.IsSplitKernel(kernel) {
		// nb counts tiles here (a row of a block's columns each): four
		// thread blocks a multiprocessor, striding over them.
		grid = max(1, min(nb, int64(4*sms)))
		if most > 0 {
			grid = min(grid, int64(most))
		}
		return 256, grid
	}
	grid = min(nb, int64(8*sms))
	if most > 0 {
		grid = min(grid, int64(most))
	}
	return 256, grid
}

// planQuantCheck computes the check of an output buffer of a quantized
// tensor (its fp8 bytes) or of a scale tensor (its scales); ok is false
// for any other buffer.
func planQuantCheck(s *ir.Schedule, buf int, addr uint64) (quantCheckArgs, bool, error) {
	var a quantCheckArgs
	b := &s.Buffers[buf]
	t := &s.Tensors[b.Tensor]
	w, box, scales := b.Tensor, b.Box, int32(0)
	switch {
	case t.Quant.On():
		// the whole blocks the box touches: a shard that cuts them
		// (layout.LandingLayout) was quantized over them whole
		box = t.Quant.WeightBox(t.Src.Shape, t.Quant.ScaleBox(t.Src.Shape, b.Box))
	case t.ScaleOf > 0:
		w, scales = t.ScaleOf-1, 1
		wt := &s.Tensors[w]
		box = wt.Quant.WeightBox(wt.Src.Shape, b.Box)
	default:
		return a, false, nil
	}
	wt := &s.Tensors[w]
	nd := len(box.Size)
	if nd > maxDims {
		return a, false, fmt.Errorf("a tensor of %d dims: the kernels take at most %d", nd, maxDims)
	}
	sdt, err := sdtCode(wt.Src.DType)
	if err != nil {
		return a, false, err
	}
	br, bc := wt.Quant.Blocks(wt.Src.Shape)
	a = quantCheckArgs{Buf: addr, Tensor: int32(w), SDT: sdt, ND: int32(nd), Scales: scales, BR: br, BC: bc}
	g := program.RowMajor(wt.Src.Shape)
	held := b.Box
	if scales != 0 {
		held = box
	}
	for d := range nd {
		a.Start[d], a.Size[d], a.GStride[d] = box.Start[d], box.Size[d], g[d]
		a.HStart[d], a.HSize[d] = held.Start[d], held.Size[d]
	}
	return a, true, nil
}

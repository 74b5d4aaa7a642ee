package native

import (
	"fmt"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/plan/program"
)

// maxDims is the most tensor dims the kernels take (M2N_MAXD in copy.cu).
const maxDims = 8

// boxArgs mirrors struct BoxArgs in kernels/copy.cu, field for field.
type boxArgs struct {
	Src, Dst   uint64
	Runs       int64
	RunBytes   int64
	SegBytes   int64
	SegsPerRun int64
	NOuter     int32
	_          int32
	Size       [maxDims]int64
	SrcStride  [maxDims]int64
	DstStride  [maxDims]int64
}

// patternArgs mirrors struct PatternArgs in kernels/copy.cu.
type patternArgs struct {
	Buf     uint64
	Elems   int64
	ND      int32
	Elem    int32
	Tensor  int32
	Flags   int32 // patternInvert | patternFloat
	Size    [maxDims]int64
	Start   [maxDims]int64
	GStride [maxDims]int64
}

// segBytes is the work of one block in a long-run copy.
const segBytes = 64 << 10

// view is a box inside a row-major array on the device: the array's base
// address and shape, and the box's start in it.
type view struct {
	addr  uint64
	full  []int64
	start []int64
}

// planBoxCopy computes the kernel arguments that copy a box of the given
// size (elements of elem bytes) from src to dst, the kernel's name, and the
// vector width it uses. Dims where both sides are contiguous merge into the
// run; the rest iterate.
func planBoxCopy(src, dst view, size []int64, elem int64) (boxArgs, string, error) {
	var a boxArgs
	nd := len(size)
	if len(src.full) != nd || len(dst.full) != nd || len(src.start) != nd || len(dst.start) != nd {
		return a, "", fmt.Errorf("box copy: rank mismatch")
	}
	g := program.Geometry(src.full, src.start, dst.full, dst.start, size, elem)
	a.Src, a.Dst = src.addr+uint64(g.SrcOff), dst.addr+uint64(g.DstOff)
	// The outer dims iterate around the run; those of size 1 are dropped.
	a.Runs = 1
	for j := range g.Outer {
		if size[j] == 1 {
			continue
		}
		if a.NOuter == maxDims {
			return a, "", fmt.Errorf("box copy: more than %d strided dims", maxDims)
		}
		a.Size[a.NOuter], a.SrcStride[a.NOuter], a.DstStride[a.NOuter] = size[j], g.SrcStride[j], g.DstStride[j]
		a.NOuter++
		a.Runs *= size[j]
	}
	a.RunBytes = g.Run
	// The widest access that every run's start allows on both sides; a
	// run's length need not be a multiple: its tail is copied byte by byte.
	width := g.Width(src.addr, dst.addr, size)
	a.SegBytes, a.SegsPerRun = g.Run, 1
	switch program.RunClass(g.Run, width) {
	case program.Staged:
		// Rows off 16-byte alignment: stage them, so both sides still move
		// 16 bytes an access.
		return a, "box_copy_stage", nil
	case program.LongRuns:
		a.SegBytes = segBytes
		a.SegsPerRun = (g.Run + segBytes - 1) / segBytes
		return a, fmt.Sprintf("box_copy_long_%d", width), nil
	}
	return a, fmt.Sprintf("box_copy_short_%d", width), nil
}

// emulateBoxCopy runs a box copy's arguments on host memory the way the
// kernel does, for tests: mem maps device addresses to bytes.
func emulateBoxCopy(mem []byte, a boxArgs) {
	for r := int64(0); r < a.Runs; r++ {
		rem := r
		var so, do int64
		for k := int(a.NOuter) - 1; k >= 0; k-- {
			i := rem % a.Size[k]
			rem /= a.Size[k]
			so += i * a.SrcStride[k]
			do += i * a.DstStride[k]
		}
		for seg := range a.SegsPerRun {
			lo := seg * a.SegBytes
			hi := min(lo+a.SegBytes, a.RunBytes)
			copy(mem[int64(a.Dst)+do+lo:int64(a.Dst)+do+hi], mem[int64(a.Src)+so+lo:int64(a.Src)+so+hi])
		}
	}
}

// PatternArgs.flags: write the complement; clear the exponent's top bit
// (hostexec.FiniteMask) of a float dtype.
const (
	patternInvert = 1
	patternFloat  = 2
)

// planPattern computes the fill/verify arguments of a buffer that holds
// box of a tensor of global shape shape and dtype dt.
func planPattern(addr uint64, tensor int, shape []int64, start, size []int64, dt layout.DType, invert bool) (patternArgs, error) {
	var a patternArgs
	elem := dt.Size()
	nd := len(shape)
	if nd > maxDims {
		return a, fmt.Errorf("a tensor of %d dims: the kernels take at most %d", nd, maxDims)
	}
	a.Buf, a.ND, a.Elem, a.Tensor = addr, int32(nd), int32(elem), int32(tensor)
	if invert {
		a.Flags |= patternInvert
	}
	if dt.Float() {
		a.Flags |= patternFloat
	}
	a.Elems = 1
	g := int64(1)
	for k := nd - 1; k >= 0; k-- {
		a.Size[k], a.Start[k], a.GStride[k] = size[k], start[k], g
		g *= shape[k]
		a.Elems *= size[k]
	}
	return a, nil
}

package native

import (
	"fmt"

	"github.com/m2n-project/m2n/model/layout"
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

// longRunBytes is the run length from which a box copy splits each run
// into segments across blocks; shorter runs are copied a warp per run.
const longRunBytes = 4096

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
	// Byte strides of each dim on each side.
	ss, ds := make([]int64, nd), make([]int64, nd)
	s, d := elem, elem
	for k := nd - 1; k >= 0; k-- {
		ss[k], ds[k] = s, d
		s *= src.full[k]
		d *= dst.full[k]
	}
	a.Src, a.Dst = src.addr, dst.addr
	for k := range nd {
		a.Src += uint64(src.start[k] * ss[k])
		a.Dst += uint64(dst.start[k] * ds[k])
	}
	// The run: innermost dims, as long as both sides stay contiguous. A dim
	// joins the run when every dim inside it is whole on both sides.
	run := elem
	k := nd - 1
	for ; k >= 0; k-- {
		run *= size[k]
		if size[k] != src.full[k] || size[k] != dst.full[k] {
			k--
			break
		}
	}
	// Outer dims k..0 iterate; drop those of size 1.
	a.Runs = 1
	for j := 0; j <= k; j++ {
		if size[j] == 1 {
			continue
		}
		if a.NOuter == maxDims {
			return a, "", fmt.Errorf("box copy: more than %d strided dims", maxDims)
		}
		a.Size[a.NOuter], a.SrcStride[a.NOuter], a.DstStride[a.NOuter] = size[j], ss[j], ds[j]
		a.NOuter++
		a.Runs *= size[j]
	}
	a.RunBytes = run
	// The widest access that every run's start allows on both sides: the
	// base addresses and the outer strides. A run's length need not be a
	// multiple: its tail is copied byte by byte.
	width := int64(16)
	aligned := func(v int64) bool { return v%width == 0 }
	for width > 1 {
		ok := aligned(int64(a.Src%16)) && aligned(int64(a.Dst%16))
		for j := range int(a.NOuter) {
			ok = ok && aligned(a.SrcStride[j]) && aligned(a.DstStride[j])
		}
		if ok {
			break
		}
		width /= 2
	}
	a.SegBytes, a.SegsPerRun = run, 1
	if width < 16 && run >= 64 {
		// Rows off 16-byte alignment: stage them, so both sides still move
		// 16 bytes an access.
		return a, "box_copy_stage", nil
	}
	kind := "short"
	if run >= longRunBytes {
		kind = "long"
		a.SegBytes = segBytes
		a.SegsPerRun = (run + segBytes - 1) / segBytes
	}
	return a, fmt.Sprintf("box_copy_%s_%d", kind, width), nil
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

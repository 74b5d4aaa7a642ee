package program

import "github.com/m2n-project/m2n/ir"

// BoxClass is the kind of kernel the executor copies a box with, which sets
// its rate (docs/native.md, "Box copy"): the executor's box-copy planner
// (native's planBoxCopy) picks it from the same geometry.
type BoxClass uint8

const (
	// Contiguous: a plain copy of a byte range (a copy engine or the
	// contiguous copy kernel), no box.
	Contiguous BoxClass = iota
	// LongRuns: runs of at least 4 KiB, every run starting 16-byte aligned
	// on both sides.
	LongRuns
	// ShortRuns: runs under 4 KiB, 16-byte aligned: a warp per run.
	ShortRuns
	// Staged: rows off 16-byte alignment, staged through shared memory.
	Staged
)

// String names the class.
func (c BoxClass) String() string {
	return [...]string{"contiguous", "long-runs", "short-runs", "staged"}[c]
}

// LongRunBytes is the run length from which the box-copy kernel splits
// runs across blocks.
const LongRunBytes = 4096

// BoxGeometry is how a box of size elements (elem bytes each) lies in two
// row-major arrays: the layout both the executor's box-copy planner
// (native's planBoxCopy) and ClassOf read.
type BoxGeometry struct {
	SrcStride, DstStride []int64 // per dim, bytes
	SrcOff, DstOff       int64   // bytes from each array's start to the box's first element
	// Run is the bytes of one contiguous run: the innermost dims, merged
	// while every dim inside is whole on both sides.
	Run int64
	// Outer is the number of dims that iterate around the run (0..Outer-1;
	// some may have size 1).
	Outer int
}

// Geometry returns the geometry of a box of size at srcStart in an array
// of shape srcFull, copied to dstStart in one of shape dstFull; every slice
// has the box's rank.
func Geometry(srcFull, srcStart, dstFull, dstStart, size []int64, elem int64) BoxGeometry {
	nd := len(size)
	g := BoxGeometry{SrcStride: make([]int64, nd), DstStride: make([]int64, nd)}
	s, d := elem, elem
	for k := nd - 1; k >= 0; k-- {
		g.SrcStride[k], g.DstStride[k] = s, d
		s *= srcFull[k]
		d *= dstFull[k]
	}
	for k := range nd {
		g.SrcOff += srcStart[k] * g.SrcStride[k]
		g.DstOff += dstStart[k] * g.DstStride[k]
	}
	g.Run = elem
	k := nd - 1
	for ; k >= 0; k-- {
		g.Run *= size[k]
		if size[k] != srcFull[k] || size[k] != dstFull[k] {
			k--
			break
		}
	}
	g.Outer = k + 1
	return g
}

// Width returns the widest access of 16 bytes or less (a power of two)
// at which every run starts aligned on both sides when the source array
// starts at address src and the destination's at dst: the box's first
// bytes and the strides of its outer dims of size above 1.
func (g BoxGeometry) Width(src, dst uint64, size []int64) int64 {
	width := int64(16)
	for ; width > 1; width /= 2 {
		ok := (int64(src%16)+g.SrcOff)%width == 0 && (int64(dst%16)+g.DstOff)%width == 0
		for j := range g.Outer {
			if size[j] != 1 {
				ok = ok && g.SrcStride[j]%width == 0 && g.DstStride[j]%width == 0
			}
		}
		if ok {
			break
		}
	}
	return width
}

// RunClass is the class of a box copy of runs of run bytes accessed width
// bytes at a time.
func RunClass(run, width int64) BoxClass {
	switch {
	case width < 16 && run >= 64:
		return Staged
	case run >= LongRunBytes:
		return LongRuns
	default:
		return ShortRuns
	}
}

// ClassOf returns the class of a copy, pack or unpack, taking every buffer
// to start 16-byte aligned (the executor aligns them to 256 bytes).
func ClassOf(s *ir.Schedule, op *ir.Op) BoxClass {
	if !op.Src.IsBox() && !op.Dst.IsBox() {
		return Contiguous
	}
	var size []int64
	type view struct {
		off   int64 // byte offset of the box's first element from an aligned base
		full  []int64
		start []int64
	}
	side := func(r, other ir.Region) view {
		b := &s.Buffers[r.Buf]
		if r.IsBox() {
			box := s.Box(r)
			size = box.Size
			return view{full: b.Box.Size, start: box.Start}
		}
		ob := s.Box(other)
		return view{off: r.Offset, full: ob.Size, start: make([]int64, len(ob.Size))}
	}
	src, dst := side(op.Src, op.Dst), side(op.Dst, op.Src)
	var elem int64
	if b := &s.Buffers[op.Src.Buf]; b.Placed() {
		elem = s.Elem(b.Tensor)
	} else {
		elem = s.Elem(s.Buffers[op.Dst.Buf].Tensor)
	}
	nd := len(size)
	if len(src.full) != nd || len(dst.full) != nd {
		return Staged
	}
	g := Geometry(src.full, src.start, dst.full, dst.start, size, elem)
	return RunClass(g.Run, g.Width(uint64(src.off), uint64(dst.off), size))
}

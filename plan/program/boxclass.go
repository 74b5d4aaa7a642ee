package program

import "github.com/m2n-project/m2n/plan/ir"

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

// longRunBytes is the run length from which the box-copy kernel splits
// runs across blocks (native's longRunBytes).
const longRunBytes = 4096

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
	ss, ds := make([]int64, nd), make([]int64, nd)
	a, d := elem, elem
	for k := nd - 1; k >= 0; k-- {
		ss[k], ds[k] = a, d
		a *= src.full[k]
		d *= dst.full[k]
	}
	so, do := src.off, dst.off
	for k := range nd {
		so += src.start[k] * ss[k]
		do += dst.start[k] * ds[k]
	}
	run := elem
	k := nd - 1
	for ; k >= 0; k-- {
		run *= size[k]
		if size[k] != src.full[k] || size[k] != dst.full[k] {
			k--
			break
		}
	}
	aligned := so%16 == 0 && do%16 == 0
	for j := 0; j <= k; j++ {
		if size[j] != 1 {
			aligned = aligned && ss[j]%16 == 0 && ds[j]%16 == 0
		}
	}
	switch {
	case !aligned && run >= 64:
		return Staged
	case run >= longRunBytes:
		return LongRuns
	default:
		return ShortRuns
	}
}

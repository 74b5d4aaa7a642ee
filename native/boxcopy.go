package native

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/program"
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
		so, do := runOffsets(a, r)
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

// batchDesc mirrors struct BatchDesc in kernels/copy.cu: one box copy of a
// batch step, its access width, and its work in units of about 64 KiB.
type batchDesc struct {
	Box         boxArgs
	RunsPerUnit int64 // 0: a unit is one segment of a long run; else this many whole short runs
	Width       int32
	_           int32
}

// batchArgs mirrors struct BatchArgs in kernels/copy.cu.
type batchArgs struct {
	Desc, Prefix uint64 // device addresses of the descriptors and the units' prefix sums
	N, Units     int64
}

// flagArgs mirrors FlagArgs in kernels/copy.cu: the flag a flag_wait
// kernel spins on, how long at most (ns), and the value it waits for.
type flagArgs struct {
	Addr, TimeoutNs uint64
	Value, Pad      uint32
}

// unitBytes is the work of one unit of a batch: a long run's segment, or
// whole short runs adding up to about as much.
const unitBytes = segBytes

// batchable turns a box copy's arguments and kernel into a batch
// descriptor; false for the staging kernel (misaligned rows), which runs
// on its own.
func batchable(a boxArgs, kernel string) (batchDesc, bool) {
	var w int32
	switch {
	case strings.HasSuffix(kernel, "_16"):
		w = 16
	case strings.HasSuffix(kernel, "_8"):
		w = 8
	case strings.HasSuffix(kernel, "_4"):
		w = 4
	case strings.HasSuffix(kernel, "_2"):
		w = 2
	case strings.HasSuffix(kernel, "_1"):
		w = 1
	default:
		return batchDesc{}, false
	}
	d := batchDesc{Box: a, Width: w}
	// Short runs, and long ones of which a unit holds four or more, go
	// several to a unit: a unit of one 8 KiB run gave each thread one load
	// between binary searches, and a batch of them ran at 0.91 TB/s where
	// the one-box kernel runs at 3.0 (BenchmarkGPUBatchCopy on an H200,
	// docs/native.md). Longer runs stay a unit each: as runs, 32 KiB ones
	// ran as fast on the whole GPU but slower beside NCCL (0.72 against
	// 0.99 TB/s), 64 KiB ones slower on both.
	if !strings.Contains(kernel, "long") || 4*a.RunBytes <= unitBytes {
		d.Box.SegBytes, d.Box.SegsPerRun = a.RunBytes, 1
		d.RunsPerUnit = max(1, unitBytes/max(a.RunBytes, 1))
	}
	return d, true
}

// units is the number of units of work of a descriptor.
func (d *batchDesc) units() int64 {
	if d.RunsPerUnit == 0 {
		return d.Box.Runs * d.Box.SegsPerRun
	}
	return (d.Box.Runs + d.RunsPerUnit - 1) / d.RunsPerUnit
}

// encodeBatch lays out descriptors and their units' prefix sums as the
// kernel reads them from device memory: the descriptors, then n+1 int64s.
// It returns the bytes and the offset of the prefix sums.
func encodeBatch(ds []batchDesc) (b []byte, prefixAt int64, units int64) {
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, ds)
	prefixAt = int64(buf.Len())
	for i := range ds {
		binary.Write(&buf, binary.LittleEndian, units)
		units += ds[i].units()
	}
	binary.Write(&buf, binary.LittleEndian, units)
	return buf.Bytes(), prefixAt, units
}

// emulateBatch runs a batch's descriptors on host memory the way
// box_copy_batch does, unit by unit (for tests): mem maps device
// addresses to bytes. With order non-nil, the units run in the order it
// gives (a permutation of the units), as the kernel's blocks may.
func emulateBatch(mem []byte, ds []batchDesc, order func(units int64) []int64) {
	var prefix []int64
	var units int64
	for i := range ds {
		prefix = append(prefix, units)
		units += ds[i].units()
	}
	seq := make([]int64, units)
	for u := range seq {
		seq[u] = int64(u)
	}
	if order != nil {
		seq = order(units)
	}
	for _, u := range seq {
		k, _ := slices.BinarySearch(prefix, u+1)
		d := &ds[k-1]
		w := u - prefix[k-1]
		a := d.Box
		if d.RunsPerUnit == 0 {
			run, seg := w/a.SegsPerRun, w%a.SegsPerRun
			so, do := runOffsets(a, run)
			lo := seg * a.SegBytes
			hi := min(lo+a.SegBytes, a.RunBytes)
			copy(mem[int64(a.Dst)+do+lo:int64(a.Dst)+do+hi], mem[int64(a.Src)+so+lo:int64(a.Src)+so+hi])
			continue
		}
		for run := w * d.RunsPerUnit; run < min((w+1)*d.RunsPerUnit, a.Runs); run++ {
			so, do := runOffsets(a, run)
			copy(mem[int64(a.Dst)+do:int64(a.Dst)+do+a.RunBytes], mem[int64(a.Src)+so:int64(a.Src)+so+a.RunBytes])
		}
	}
}

// runOffsets is run_offsets in copy.cu: the byte offsets of a run's start
// from the box's first byte on each side.
func runOffsets(a boxArgs, run int64) (so, do int64) {
	rem := run
	for k := int(a.NOuter) - 1; k >= 0; k-- {
		i := rem % a.Size[k]
		rem /= a.Size[k]
		so += i * a.SrcStride[k]
		do += i * a.DstStride[k]
	}
	return so, do
}

//go:build linux && cgo

package native

// The device benchmarks of m2n calibrate and m2n run: copy bandwidth, box
// copies and quantize kernels timed on one GPU.

/*
#include <stdlib.h>
#include "m2n_cuda.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/program"
)

// CopyBandwidth measures a device-to-device copy of n bytes on a GPU
// (median of five after a warm-up), counting bytes read plus written, the
// way memory bandwidth is quoted for copies.
func CopyBandwidth(dev int, n int64) (units.Bandwidth, error) {
	g, err := newCUDA([]int{dev}, time.Minute)
	if err != nil {
		return 0, err
	}
	defer g.close()
	a, err := g.alloc(dev, 2*n)
	if err != nil {
		return 0, err
	}
	defer g.free(dev, a)
	st, err := g.newStream(dev)
	if err != nil {
		return 0, err
	}
	tm, err := g.newTimer(st)
	if err != nil {
		return 0, err
	}
	times, err := tm.runs(5, func() error { return g.copy(a+uint64(n), a, n, st) })
	if err != nil {
		return 0, err
	}
	return units.Bandwidth(float64(2*n) / medianTime(times).Seconds()), nil
}

// timer times work on one stream in device time, between two events.
type timer struct {
	g          *cudaGPU
	st, e0, e1 handle
}

// newTimer makes a timer of stream st.
func (g *cudaGPU) newTimer(st handle) (*timer, error) {
	e0, err := g.newEvent(g.owner[st], true)
	if err != nil {
		return nil, err
	}
	e1, err := g.newEvent(g.owner[st], true)
	if err != nil {
		return nil, err
	}
	return &timer{g, st, e0, e1}, nil
}

// runs issues f on the timer's stream reps+1 times, waiting for each, and
// returns the device time of every run but the first (a warm-up).
func (t *timer) runs(reps int, f func() error) ([]units.Time, error) {
	times := make([]units.Time, 0, reps)
	for i := range reps + 1 {
		t.g.record(t.e0, t.st)
		if err := f(); err != nil {
			return nil, err
		}
		t.g.record(t.e1, t.st)
		if err := t.g.sync(t.st); err != nil {
			return nil, err
		}
		if i > 0 {
			d, err := t.g.elapsed(t.e0, t.e1)
			if err != nil {
				return nil, err
			}
			times = append(times, d)
		}
	}
	return times, nil
}

// trainerWeights returns n bf16 values as a trainer holds weights: a
// normal distribution of sigma 0.02, drawn from rng.
func trainerWeights(n int64, rng *rand.Rand) []byte {
	b := make([]byte, 2*n)
	for k := range n {
		binary.LittleEndian.PutUint16(b[2*k:], uint16(math.Float32bits(float32(0.02*rng.NormFloat64()))>>16))
	}
	return b
}

// upload and download copy between host and device memory (tests).
func (g *cudaGPU) upload(dev int, dst uint64, b []byte) error {
	return g.on(dev, func() error {
		if r := C.m2n_cuMemcpyHtoD(C.ull(dst), unsafe.Pointer(&b[0]), C.size_t(len(b))); r != 0 {
			return cuErr("cuMemcpyHtoD", r)
		}
		// From pageable memory the copy may still be in flight on the legacy
		// stream, which m2n's non-blocking streams do not wait for.
		return cuErr("cuCtxSynchronize", C.m2n_cuCtxSynchronize())
	})
}

func (g *cudaGPU) download(dev int, b []byte, src uint64) error {
	return g.on(dev, func() error {
		return cuErr("cuMemcpyDtoH", C.m2n_cuMemcpyDtoH(unsafe.Pointer(&b[0]), C.ull(src), C.size_t(len(b))))
	})
}

// boxBuffers opens dev with an array of shape full and a contiguous
// buffer for a box of size (elem bytes each); done frees them and closes.
func boxBuffers(dev int, full, size []int64, elem int64) (g *cudaGPU, strided, packed uint64, boxBytes int64, done func(), err error) {
	if g, err = newCUDA([]int{dev}, time.Minute); err != nil {
		return nil, 0, 0, 0, nil, err
	}
	fullBytes, boxBytes := elem, elem
	for k := range full {
		fullBytes *= full[k]
		boxBytes *= size[k]
	}
	if strided, err = g.alloc(dev, fullBytes); err == nil {
		if packed, err = g.alloc(dev, boxBytes); err != nil {
			g.free(dev, strided)
		}
	}
	if err != nil {
		g.close()
		return nil, 0, 0, 0, nil, err
	}
	return g, strided, packed, boxBytes, func() { g.free(dev, packed); g.free(dev, strided); g.close() }, nil
}

// TimeBoxCopy times, on one GPU, the pack of a box of size elements (elem
// bytes each) at start in a row-major array of shape full into a
// contiguous buffer, its unpack back, and a device copy of the same bytes:
// reps timed runs of each after a warm-up, in device time; and the pack
// kernel's name.
func TimeBoxCopy(dev int, full, start, size []int64, elem int64, reps int) (pack, unpack, cp []units.Time, kernel string, err error) {
	g, strided, packed, boxBytes, done, err := boxBuffers(dev, full, size, elem)
	if err != nil {
		return nil, nil, nil, "", err
	}
	defer done()
	zero := make([]int64, len(size))
	pa, pk, err := planBoxCopy(view{strided, full, start}, view{packed, size, zero}, size, elem)
	if err != nil {
		return nil, nil, nil, "", err
	}
	ua, uk, err := planBoxCopy(view{packed, size, zero}, view{strided, full, start}, size, elem)
	if err != nil {
		return nil, nil, nil, "", err
	}
	st, err := g.newStream(dev)
	if err != nil {
		return nil, nil, nil, "", err
	}
	tm, err := g.newTimer(st)
	if err != nil {
		return nil, nil, nil, "", err
	}
	if pack, err = tm.runs(reps, func() error { return g.boxCopy(&pa, pk, st) }); err != nil {
		return nil, nil, nil, "", err
	}
	if unpack, err = tm.runs(reps, func() error { return g.boxCopy(&ua, uk, st) }); err != nil {
		return nil, nil, nil, "", err
	}
	if cp, err = tm.runs(reps, func() error { return g.copy(packed, strided, boxBytes, st) }); err != nil {
		return nil, nil, nil, "", err
	}
	return pack, unpack, cp, pk, nil
}

// TimeBatchCopy times, on one GPU, a box of size at start in a row-major
// array of shape full unpacked from contiguous staging as one batch kernel
// (box_copy_batch) of pieces boxes, the box cut along dim 0: reps timed
// runs on the whole GPU's grid (whole) and on the grid a batch gets beside
// NCCL kernels in waves mode (shared), in device time.
func TimeBatchCopy(dev int, full, start, size []int64, elem int64, pieces, reps int) (whole, shared []units.Time, err error) {
	if pieces < 1 || int64(pieces) > size[0] {
		return nil, nil, fmt.Errorf("TimeBatchCopy: %d pieces of %d rows", pieces, size[0])
	}
	g, strided, packed, _, done, err := boxBuffers(dev, full, size, elem)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	var ds []batchDesc
	var off int64
	for i := range int64(pieces) {
		lo, hi := size[0]*i/int64(pieces), size[0]*(i+1)/int64(pieces)
		sub := append([]int64{hi - lo}, size[1:]...)
		at := append([]int64{start[0] + lo}, start[1:]...)
		a, kernel, err := planBoxCopy(view{packed + uint64(off), sub, make([]int64, len(sub))}, view{strided, full, at}, sub, elem)
		if err != nil {
			return nil, nil, err
		}
		d, ok := batchable(a, kernel)
		if !ok {
			return nil, nil, fmt.Errorf("TimeBatchCopy: %s does not batch", kernel)
		}
		ds = append(ds, d)
		off += elem * layout.Box{Size: sub}.Elems()
	}
	b, prefixAt, nUnits := encodeBatch(ds)
	desc, err := g.alloc(dev, int64(len(b)))
	if err != nil {
		return nil, nil, err
	}
	defer g.free(dev, desc)
	if err := g.upload(dev, desc, b); err != nil {
		return nil, nil, err
	}
	args := batchArgs{Desc: desc, Prefix: desc + uint64(prefixAt), N: int64(len(ds)), Units: nUnits}
	st, err := g.newStream(dev)
	if err != nil {
		return nil, nil, err
	}
	tm, err := g.newTimer(st)
	if err != nil {
		return nil, nil, err
	}
	if whole, err = tm.runs(reps, func() error { return g.batchCopy(&args, false, st) }); err != nil {
		return nil, nil, err
	}
	if shared, err = tm.runs(reps, func() error { return g.batchCopy(&args, true, st) }); err != nil {
		return nil, nil, err
	}
	return whole, shared, nil
}

// TimeQuantize times, on one GPU, the quantize kernel on a bf16 box of
// size at start in a row-major array of shape full (its last two dims in
// br x bc blocks), filled with trainer-like weights (a normal
// distribution, sigma 0.02): reps timed runs after a warm-up, in device
// time; and the bytes each moves (source read, fp8 and scales written).
func TimeQuantize(dev int, full, start, size []int64, br, bc int64, reps int) (times []units.Time, bytes int64, err error) {
	g, err := newCUDA([]int{dev}, time.Minute)
	if err != nil {
		return nil, 0, err
	}
	defer g.close()
	nd := len(size)
	fullBytes, n := int64(2), int64(1)
	for k := range full {
		fullBytes *= full[k]
		n *= size[k]
	}
	sb := append(append([]int64(nil), size[:nd-2]...), (size[nd-2]+br-1)/br, (size[nd-1]+bc-1)/bc)
	nsc := int64(1)
	for _, v := range sb {
		nsc *= v
	}
	src, err := g.alloc(dev, fullBytes)
	if err != nil {
		return nil, 0, err
	}
	defer g.free(dev, src)
	out, err := g.alloc(dev, n+4*nsc+256)
	if err != nil {
		return nil, 0, err
	}
	defer g.free(dev, out)
	if err := g.upload(dev, src, trainerWeights(fullBytes/2, rand.New(rand.NewPCG(3, 4)))); err != nil {
		return nil, 0, err
	}
	sst := program.RowMajor(full)
	var off int64
	for d := range nd {
		off += start[d] * sst[d]
	}
	scale := out + uint64((n+255)&^255)
	a, kernel := planQuantArrays(src+uint64(2*off), out, scale, sst, program.RowMajor(size), program.RowMajor(sb), size, br, bc, 1, 2)
	if program.IsSplitKernel(kernel) {
		n := splitWorkBytes(a.Lead * a.NBR * a.NBC)
		w, err := g.alloc(dev, n)
		if err != nil {
			return nil, 0, err
		}
		defer g.free(dev, w)
		if err := g.upload(dev, w, make([]byte, n)); err != nil {
			return nil, 0, err
		}
		a.Work = w
	}
	st, err := g.newStream(dev)
	if err != nil {
		return nil, 0, err
	}
	tm, err := g.newTimer(st)
	if err != nil {
		return nil, 0, err
	}
	if times, err = tm.runs(reps, func() error { return g.quantize(&a, kernel, false, st) }); err != nil {
		return nil, 0, err
	}
	return times, 2*n + n + 4*nsc, nil
}

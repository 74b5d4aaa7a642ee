package native

import (
	"encoding/binary"
	"math"

	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/model/layout"
)

var sdtDType = map[int32]layout.DType{1: layout.BF16, 2: layout.FP16, 3: layout.FP32}

// emulateQuant does what the quantize kernels do, over mem (addresses are
// offsets into it), with the reference quantizer.
func emulateQuant(mem []byte, a quantArgs) {
	dt := sdtDType[a.SDT]
	elem := dt.Size()
	nl := int(a.NLead)
	x := make([]float32, a.BR*a.BC)
	q := make([]uint8, a.BR*a.BC)
	for l := range a.Lead {
		var so, do, co int64
		r := l
		for k := nl - 1; k >= 0; k-- {
			v := r % a.Size[k]
			r /= a.Size[k]
			so, do, co = so+v*a.SrcStride[k], do+v*a.DstStride[k], co+v*a.ScaleStride[k]
		}
		for i := range a.NBR {
			for j := range a.NBC {
				r0, c0 := i*a.BR, j*a.BC
				nr, nc := min(a.BR, a.Rows-r0), min(a.BC, a.Cols-c0)
				x = x[:0]
				for rr := range nr {
					for cc := range nc {
						at := int64(a.Src) + (so+(r0+rr)*a.SrcStride[nl]+c0+cc)*elem
						x = append(x, layout.Decode(dt, mem[at:at+elem], 0))
					}
				}
				s := layout.QuantizeBlock(x, q[:len(x)])
				binary.LittleEndian.PutUint32(mem[int64(a.Scale)+4*(co+i*a.ScaleStride[nl]+j):], math.Float32bits(s))
				k := 0
				for rr := range nr {
					for cc := range nc {
						mem[int64(a.Dst)+do+(r0+rr)*a.DstStride[nl]+c0+cc] = q[k]
						k++
					}
				}
			}
		}
	}
}

// emulateQuantCheck does what verify_quant does: the expected bytes from
// the host executor's reference (hostexec.Value through layout.QuantizeBox).
func emulateQuantCheck(mem []byte, a quantCheckArgs) (bad, first int64) {
	nd := int(a.ND)
	dt := sdtDType[a.SDT]
	box := layout.Box{Start: append([]int64(nil), a.Start[:nd]...), Size: append([]int64(nil), a.Size[:nd]...)}
	n := box.Elems()
	x := make([]float32, n)
	var tmp [8]byte
	idx := make([]int64, nd)
	for e := range n {
		r := e
		var g uint64
		for d := nd - 1; d >= 0; d-- {
			idx[d] = r % box.Size[d]
			r /= box.Size[d]
			g += uint64(box.Start[d]+idx[d]) * uint64(a.GStride[d])
		}
		binary.LittleEndian.PutUint64(tmp[:], hostexec.Value(int(a.Tensor), g, dt))
		x[e] = layout.Decode(dt, tmp[:], 0)
	}
	nbr, nbc := (box.Size[nd-2]+a.BR-1)/a.BR, (box.Size[nd-1]+a.BC-1)/a.BC
	lead := n / box.Size[nd-2] / box.Size[nd-1]
	q := make([]uint8, n)
	sc := make([]float32, lead*nbr*nbc)
	layout.QuantizeBox(x, box.Size, a.BR, a.BC, q, sc)
	first = -1
	note := func(i int64) {
		if bad == 0 {
			first = i
		}
		bad++
	}
	if a.Scales != 0 {
		for i, s := range sc {
			if binary.LittleEndian.Uint32(mem[int64(a.Buf)+4*int64(i):]) != math.Float32bits(s) {
				note(int64(i))
			}
		}
		return bad, first
	}
	// the bytes the buffer holds (check_held): the held box, within box
	held := layout.Box{Start: append([]int64(nil), a.HStart[:nd]...), Size: append([]int64(nil), a.HSize[:nd]...)}
	for d := range nd {
		held.Start[d] -= box.Start[d]
	}
	var at int64
	held.ForEachRun(box.Size, func(from, k int64) {
		for i := from; i < from+k; i++ {
			if mem[int64(a.Buf)+at] != q[i] {
				note(at)
			}
			at++
		}
	})
	return bad, first
}

package hostexec

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
)

// A schedule over the limit is refused before anything is allocated, with
// an error that says so and carries the numbers.
func TestTooLarge(t *testing.T) {
	s := &ir.Schedule{Buffers: []ir.Buffer{
		{Rank: 0, Kind: ir.Input, Bytes: 3 << 30, Tensor: -1},
		{Rank: 1, Kind: ir.Staging, Bytes: 2 << 30, Tensor: -1},
	}}
	_, err := Run(s, Options{})
	var tl *TooLargeError
	if !errors.Is(err, ir.ErrTooLarge) || !errors.As(err, &tl) || tl.Need != 5<<30 || tl.Limit != DefaultMaxBytes {
		t.Fatalf("got %v (%#v)", err, tl)
	}
	if want := "the schedule's buffers need 5.00 GiB, more than the host executor's limit of 4.00 GiB; shrink the tensors (m2n's --scale)"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if _, err := Run(s, Options{MaxBytes: 1 << 20}); !errors.As(err, &tl) || tl.Limit != 1<<20 {
		t.Errorf("with MaxBytes 1 MiB: %v", err)
	}
}

// Every float element of the fill pattern is finite, and the pattern
// still reaches subnormals, both signs, and large magnitudes.
func TestValueFinite(t *testing.T) {
	for _, dt := range []layout.DType{layout.BF16, layout.FP16, layout.FP32, layout.FP8E4M3} {
		var neg, sub, big bool
		for g := uint64(0); g < 1<<17; g++ {
			v := Value(3, g, dt)
			var buf [8]byte
			binary.LittleEndian.PutUint64(buf[:], v)
			f := layout.Decode(dt, buf[:], 0)
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				t.Fatalf("%v element %d: %#x is %g", dt, g, v&(1<<(8*dt.Size())-1), f)
			}
			a := math.Abs(float64(f))
			neg = neg || f < 0
			sub = sub || (a > 0 && a < math.Ldexp(1, -6)) // below fp8's normals
			big = big || a >= 1
		}
		if !neg || !sub || !big {
			t.Errorf("%v: negative %v, tiny %v, at least 1 %v: want all", dt, neg, sub, big)
		}
	}
	if FiniteMask(layout.Int32) != ^uint64(0) {
		t.Error("int32 elements must keep every bit")
	}
}

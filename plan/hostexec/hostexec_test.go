package hostexec

import (
	"errors"
	"testing"

	"github.com/m2n-project/m2n/plan/ir"
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
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &tl) || tl.Need != 5<<30 || tl.Limit != DefaultMaxBytes {
		t.Fatalf("got %v (%#v)", err, tl)
	}
	if want := "the schedule's buffers need 5.00 GiB, more than the host executor's limit of 4.00 GiB; shrink the tensors (m2n's --scale)"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if _, err := Run(s, Options{MaxBytes: 1 << 20}); !errors.As(err, &tl) || tl.Limit != 1<<20 {
		t.Errorf("with MaxBytes 1 MiB: %v", err)
	}
}

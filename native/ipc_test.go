package native

import (
	"errors"
	"testing"

	"github.com/m2n-project/m2n/internal/schedtest"
	"github.com/m2n-project/m2n/plan"
)

// One process a GPU (NCCL, or copies between processes with flags) takes
// every schedule whose ops wait only for ops of their own rank:
// every route m2n builds, and not one with a dependency on another rank's
// op.
func TestDepsWithinRanks(t *testing.T) {
	for _, route := range []string{plan.Flat, plan.Hierarchical, plan.AGBcast, plan.NemoLegacy} {
		s := schedtest.TwoGPU(t, route, 4)
		if err := depsWithinRanks(s); err != nil {
			t.Errorf("%s: %v", route, err)
		}
		// A dependency on another rank's op: the first op with
		// dependencies waits for an op of another rank instead.
		cut := false
		for i := range s.Ops {
			op := &s.Ops[i]
			if op.DepLen == 0 {
				continue
			}
			for j := range int32(i) {
				if s.Ops[j].Rank != op.Rank {
					s.DepPool[op.DepOff] = j
					cut = true
					break
				}
			}
			if cut {
				break
			}
		}
		if !cut {
			t.Fatalf("%s: no op to give a dependency on another rank", route)
		}
		err := depsWithinRanks(s)
		if err == nil || !errors.Is(err, ErrScheduleNotSupported) {
			t.Errorf("%s with a dependency across ranks: got %v, want ErrScheduleNotSupported", route, err)
		}
	}
}

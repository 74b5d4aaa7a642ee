package native

import (
	"errors"
	"testing"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/plan/ir"
)

func twoGPUSchedule(t *testing.T, route string, experts int64) *ir.Schedule {
	t.Helper()
	tp, err := topo.Preset("hgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	tp.GPUsPerDomain, tp.Domains = 1, 2
	shape := []int64{experts, 256, 1024}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{{}}}
	s, err := plan.Build([]ir.Tensor{{Name: "w", Src: src, Dst: dst}}, tp, plan.Options{Route: route, ChunkBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The copy transport across processes takes schedules whose sends read
// inputs and wait only for earlier sends to the same peer.
func TestIPCEligible(t *testing.T) {
	for _, tc := range []struct {
		route string
		ok    bool
	}{{plan.Flat, true}, {plan.Hierarchical, true}, {plan.AGBcast, false}, {plan.NemoLegacy, false}} {
		err := ipcEligible(twoGPUSchedule(t, tc.route, 4))
		if (err == nil) != tc.ok {
			t.Errorf("%s: got %v, want eligible %v", tc.route, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrScheduleNotSupported) {
			t.Errorf("%s: %v is not ErrScheduleNotSupported", tc.route, err)
		}
	}
}

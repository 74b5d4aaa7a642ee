package evaluate

import (
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
)

// Memory per GPU sums the ranks a GPU hosts (colocated trainer and
// generator ranks together), counts an arena by its extent, picks the GPU
// with the largest total and checks it against the GPU's memory.
func TestMemoryOf(t *testing.T) {
	s := &ir.Schedule{
		World: []ir.Rank{{Rank: 0, GPU: 0}, {Rank: 1, GPU: 0}, {Rank: 2, GPU: 1}},
		Buffers: []ir.Buffer{
			{Rank: 0, Kind: ir.Input, Bytes: 100},
			{Rank: 1, Kind: ir.Output, Bytes: 50},
			{Rank: 2, Kind: ir.Output, Bytes: 10},
			{Rank: 2, Kind: ir.Staging, Bytes: 30},
			{Rank: 2, Kind: ir.Staging, Bytes: 5, InArena: true, ArenaOffset: 20},
			{Rank: 2, Kind: ir.Staging, Bytes: 8, InArena: true, ArenaOffset: 0},
		},
	}
	for _, tc := range []struct {
		capacity int64
		want     Memory
	}{
		{0, Memory{GPU: 0, ResidentBytes: 150, TotalBytes: 150}},
		{149, Memory{GPU: 0, ResidentBytes: 150, TotalBytes: 150, CapacityBytes: 149, CapacityKnown: true}},
		{150, Memory{GPU: 0, ResidentBytes: 150, TotalBytes: 150, CapacityBytes: 150, CapacityKnown: true, Fits: true}},
	} {
		if got := MemoryOf(s, &topo.Topology{GPUMemoryBytes: tc.capacity}); got != tc.want {
			t.Errorf("capacity %d: %+v, want %+v", tc.capacity, got, tc.want)
		}
	}
	// GPU 1's staging grows past GPU 0: 10 resident + 30 + an arena of 25.
	s.Buffers[3].Bytes = 130
	if got := MemoryOf(s, &topo.Topology{}); got.GPU != 1 || got.ResidentBytes != 10 || got.StagingBytes != 155 || got.TotalBytes != 165 {
		t.Errorf("%+v, want GPU 1: 10 resident + 155 staging", got)
	}
}

// The framework's time is the busiest exporter's plus the busiest
// loader's, each per tensor and per GiB of its own buffers; none given,
// none charged.
func TestFrameworkOf(t *testing.T) {
	const gib = 1 << 30
	s := &ir.Schedule{Buffers: []ir.Buffer{
		{Rank: 0, Kind: ir.Input, Tensor: 0, Bytes: gib},
		{Rank: 0, Kind: ir.Input, Tensor: 1, Bytes: gib},
		{Rank: 1, Kind: ir.Input, Tensor: 0, Bytes: gib},
		{Rank: 2, Kind: ir.Output, Tensor: 0, Bytes: gib},
		{Rank: 2, Kind: ir.Output, Tensor: 1, Bytes: gib},
		{Rank: 2, Kind: ir.Staging, Tensor: 1, Bytes: 5 * gib},
	}}
	c := &scenario.FrameworkCosts{ExportPerTensor: units.Millisecond, ExportPerGiB: 10 * units.Millisecond,
		LoadPerTensor: 2 * units.Millisecond, LoadPerGiB: 5 * units.Millisecond}
	got := FrameworkOf(s, c)
	if got == nil || got.Export != 22*units.Millisecond || got.Load != 14*units.Millisecond {
		t.Errorf("%+v, want export 22 ms (rank 0: 2 tensors, 2 GiB), load 14 ms (rank 2: 2 tensors, 2 GiB)", got)
	}
	if FrameworkOf(s, nil) != nil {
		t.Error("no costs given, yet a framework time")
	}
}

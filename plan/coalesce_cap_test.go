package plan

import (
	"testing"

	"github.com/m2n-project/m2n/internal/scentest"
	"github.com/m2n-project/m2n/ir"
)

// Under a staging cap, a recv can depend on the pair's previous recv
// because it reuses the arena bytes that recv wrote; coalescing must keep
// that ordering (on the member's copy out) rather than drop it as a mere
// chain of the pair. qwen3-235b-128 scaled to 0.002 under a 64 MiB cap,
// agbcast, was planned invalid (a recv overwrote a copy out it did not
// wait for) until it did: found by the held-out calibration run.
func TestCoalesceKeepsArenaReuse(t *testing.T) {
	p := scentest.Points(t, "qwen3-235b-128")[0]
	if err := p.Scale(0.002); err != nil {
		t.Fatal(err)
	}
	ts := make([]ir.Tensor, len(p.Tensors))
	for i, x := range p.Tensors {
		ts[i] = ir.Tensor{Name: x.Name, Src: x.Src, Dst: x.Dst}
	}
	for _, route := range []string{AGBcast, NemoLegacy} {
		// Build validates the schedule: every byte's writes and reads
		// ordered (its buffers, 34 GiB, are past the host executor's).
		if _, err := Build(ts, p.Topology, Options{Route: route, ChunkBytes: DefaultChunkBytes, StagingCapBytes: 64 << 20, Coalesce: DefaultCoalesce}); err != nil {
			t.Fatalf("%s: %v", route, err)
		}
	}
}

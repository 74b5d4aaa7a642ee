package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
)

// Random layouts and topologies, every route, under random caps below what
// the uncapped schedule stages: every destination byte arrives (the host
// executor checks each), the host executor holds at most the cap of
// staging per rank, and the schedule survives its JSON form.
func TestStagingCapDeliversExactBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	n := 60
	if testing.Short() {
		n = 15
	}
	reused := 0
	for i := range n {
		tensors, tp, chunk := randomBatch(rng, 2)
		for _, route := range Routes {
			s0, err := Build(tensors, tp, Options{Route: route, ChunkBytes: chunk})
			if err != nil {
				t.Fatalf("case %d %s uncapped: %v", i, route, err)
			}
			if checkCapped(t, fmt.Sprintf("case %d %s", i, route), rng, tensors, tp, Options{Route: route, ChunkBytes: chunk}, s0) {
				reused++
			}
		}
	}
	if reused < n {
		t.Errorf("only %d of %d capped schedules staged less than uncapped", reused, 4*n)
	}
}

// checkCapped builds the schedule s0 was built from again under a random
// cap below its staging (or the least the route accepts, when that is
// more), runs it on the host executor, and reports whether it stages less.
func checkCapped(t *testing.T, desc string, rng *rand.Rand, tensors []ir.Tensor, tp *topo.Topology, opt Options, s0 *ir.Schedule) bool {
	t.Helper()
	most := s0.Stats().MaxStaging
	if most == 0 {
		return false
	}
	opt.StagingCapBytes = 1 + rng.Int64N(most)
	s, err := Build(tensors, tp, opt)
	var ce *StagingCapError
	if errors.As(err, &ce) {
		if ce.Need <= opt.StagingCapBytes || ce.Need > most {
			t.Fatalf("%s: cap %d: needs %d, uncapped %d", desc, opt.StagingCapBytes, ce.Need, most)
		}
		opt.StagingCapBytes = ce.Need
		s, err = Build(tensors, tp, opt)
	}
	desc = fmt.Sprintf("%s cap %d", desc, opt.StagingCapBytes)
	if err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	res := runOnHost(t, s, rng.Uint64(), desc)
	if res.PeakStaging > opt.StagingCapBytes || s.Stats().MaxStaging > opt.StagingCapBytes {
		t.Fatalf("%s: the host executor held %d of staging on one rank, stats say %d", desc, res.PeakStaging, s.Stats().MaxStaging)
	}
	b, _ := json.Marshal(s)
	if _, err := ir.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("%s: decode: %v", desc, err)
	}
	return res.PeakStaging < most
}

// capFixture: rank 0 holds an [8, 8] fp32 tensor and ranks 1 and 2 each
// need half its columns, so every 32-byte chunk (two half rows) is packed
// at rank 0; a cap of two chunks makes every pack after the first two reuse
// a slot.
func capFixture(t *testing.T, limit int64) *ir.Schedule {
	t.Helper()
	s, err := buildCapFixture(limit)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func buildCapFixture(limit int64) (*ir.Schedule, error) {
	shape := []int64{8, 8}
	src := layout.Layout{Shape: shape, DType: layout.FP32, Mesh: layout.Mesh{Shape: []int{1}, Ranks: []int{0}}, Placements: []layout.Placement{layout.R}}
	dst := layout.Layout{Shape: shape, DType: layout.FP32, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{1, 2}}, Placements: []layout.Placement{layout.S(1)}}
	tp, _ := topo.Preset("hgx-h200")
	return Build([]ir.Tensor{{Name: "w", Src: src, Dst: dst}}, tp, Options{Route: Flat, ChunkBytes: 32, StagingCapBytes: limit})
}

func TestStagingCapReuse(t *testing.T) {
	s := capFixture(t, 64)
	if got := s.StagingByRank()[0]; got != 64 {
		t.Fatalf("rank 0 stages %d bytes, want 64 (two chunks)", got)
	}
	b, _ := json.Marshal(s)
	if !bytes.Contains(b, []byte(`"version":2`)) || !bytes.Contains(b, []byte(`"arena_offset":0`)) {
		t.Errorf("a capped schedule is not written as version 2 with arena offsets: %.200s", b)
	}
	// Cut the dependency of a pack that reuses a slot on the send that read
	// the slot's old contents: Validate must see it.
	cut := false
	for i := range s.Ops {
		op := &s.Ops[i]
		if op.Kind != ir.Pack {
			continue
		}
		deps := s.Deps(int32(i))
		for k, d := range deps {
			x := &s.Ops[d]
			if x.Kind == ir.Send && x.Src.Buf == op.Dst.Buf && x.Src.Offset == op.Dst.Offset {
				// Rewrite the op's list without d.
				rest := append(append([]int32(nil), deps[:k]...), deps[k+1:]...)
				op.DepOff, op.DepLen = int32(len(s.DepPool)), int32(len(rest))
				s.DepPool = append(s.DepPool, rest...)
				cut = true
				break
			}
		}
		if cut {
			break
		}
	}
	if !cut {
		t.Fatal("no pack reuses a slot after a send")
	}
	err := s.Validate()
	if err == nil || !strings.Contains(err.Error(), "overwrites bytes") || !strings.Contains(err.Error(), "(send on rank 0) reads, which does not happen before it") {
		t.Errorf("Validate() = %v, want an overwrite of bytes a send reads", err)
	}
}

func TestStagingCapErrors(t *testing.T) {
	_, err := Build(paperTensors(2), nvl72(2), Options{Route: AGBcast, StagingCapBytes: 1 << 20})
	want := "staging cap 1.00 MiB: route agbcast needs at least 7.00 GiB on rank 0 (one placed copy of tensor gate_proj)"
	if err == nil || err.Error() != want {
		t.Errorf("agbcast: %v, want %s", err, want)
	}
	_, err = buildCapFixture(20)
	want = "staging cap 20 B: route flat needs at least 32 B on rank 0 (one chunk of tensor w)"
	if err == nil || err.Error() != want {
		t.Errorf("flat: %v, want %s", err, want)
	}
	if _, err := Build(paperTensors(2), nvl72(2), Options{Route: Flat, StagingCapBytes: -1}); err == nil || !strings.Contains(err.Error(), "staging cap -1") {
		t.Errorf("negative cap: %v", err)
	}
	// Deterministic.
	a, _ := json.Marshal(capFixture(t, 48))
	b, _ := json.Marshal(capFixture(t, 48))
	if !bytes.Equal(a, b) {
		t.Error("two builds of one capped schedule differ")
	}
}

package plan

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
)

// sends counts a schedule's transfers.
func sends(s *ir.Schedule) int {
	n := 0
	for i := range s.Ops {
		if s.Ops[i].Kind == ir.Send {
			n++
		}
	}
	return n
}

// Many small tensors between two ranks, each S(0) -> replicated: every
// rank receives one small transfer a tensor from the other, all of one
// level; coalesced, each direction is one transfer, and every byte still
// arrives.
func TestCoalesceSmallTensors(t *testing.T) {
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 1, 2
	var ts []ir.Tensor
	for i := range 20 {
		shape := []int64{4, 8 + int64(i)} // 16 x (8+i) bytes a half
		ts = append(ts, ir.Tensor{Name: fmt.Sprintf("w%d", i),
			Src: layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{layout.S(0)}},
			Dst: layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{layout.R}}})
	}
	for _, route := range []string{Flat, Hierarchical} {
		plain, err := Build(ts, tp, Options{Route: route})
		if err != nil {
			t.Fatal(err)
		}
		c := Coalesce{BelowBytes: 1 << 10, SlabBytes: 1 << 20, BudgetBytes: 4 << 20}
		s, err := Build(ts, tp, Options{Route: route, Coalesce: c})
		if err != nil {
			t.Fatal(err)
		}
		if n := sends(plain); n != 40 {
			t.Fatalf("%s: %d transfers uncoalesced, want 40 (20 tensors each way)", route, n)
		}
		if n := sends(s); n != 2 {
			t.Errorf("%s: %d transfers coalesced, want 2 (one slab each way)", route, n)
		}
		runOnHost(t, s, 1, route)
		// A slab too small for two members leaves them all alone.
		c.BelowBytes, c.SlabBytes, c.BudgetBytes = 300, 300, 600
		s, err = Build(ts, tp, Options{Route: route, Coalesce: c})
		if err != nil {
			t.Fatal(err)
		}
		runOnHost(t, s, 2, route)
		if n := sends(s); n >= 40 || n <= 2 {
			t.Errorf("%s, 300-byte slabs: %d transfers, want between 2 and 40 (slabs of a few tensors)", route, n)
		}
	}
}

// Random layouts, routes, chunks, staging caps and coalescing thresholds:
// every coalesced schedule is valid, rank-local and delivers every byte on
// the host executor, moves no more transfers than the same schedule
// uncoalesced, and stays within its staging cap.
func TestCoalesceRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	fewer := 0
	for i := range 300 {
		tensors, tp, chunk := randomBatch(rng, 1)
		for k := range rng.IntN(4) {
			s2, d2 := randomLayouts(rng)
			tensors = append(tensors, ir.Tensor{Name: fmt.Sprintf("v%d", k), Src: s2, Dst: d2})
		}
		route := Routes[rng.IntN(len(Routes))]
		opt := Options{Route: route, ChunkBytes: chunk}
		if rng.IntN(3) == 0 {
			opt.StagingCapBytes = 64 + rng.Int64N(4096)
		}
		plain, err := Build(tensors, tp, opt)
		if _, ok := err.(*StagingCapError); ok {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		below := 1 + rng.Int64N(128)
		slab := below + rng.Int64N(512)
		opt.Coalesce = Coalesce{BelowBytes: below, SlabBytes: slab, BudgetBytes: 2*slab + rng.Int64N(2048), WindowBytes: rng.Int64N(2) * rng.Int64N(512)}
		s, err := Build(tensors, tp, opt)
		if err != nil {
			t.Fatalf("case %d (%s): %v", i, route, err)
		}
		desc := fmt.Sprintf("case %d (%s, chunk %d, cap %d, %+v)", i, route, chunk, opt.StagingCapBytes, opt.Coalesce)
		runOnHost(t, s, uint64(i), desc)
		if a, b := sends(s), sends(plain); a > b {
			t.Fatalf("%s: %d transfers coalesced, %d before", desc, a, b)
		} else if a < b {
			fewer++
		}
		if opt.StagingCapBytes > 0 {
			for r, n := range s.StagingByRank() {
				if n > opt.StagingCapBytes {
					t.Fatalf("%s: rank %d holds %d bytes of staging, over the cap", desc, r, n)
				}
			}
		}
	}
	if fewer < 60 {
		t.Errorf("only %d of 300 random schedules lost transfers to coalescing", fewer)
	}
}

// The ops limit refuses no schedule that fits it: counted from chunks
// before building, the count is a lower bound; and building stops with an
// OpsLimitError as soon as the schedule passes the limit.
func TestOpsLimitIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(63, 64))
	over := 0
	for i := range 300 {
		tensors, tp, chunk := randomBatch(rng, 2)
		route := Routes[rng.IntN(len(Routes))]
		s, err := Build(tensors, tp, Options{Route: route, ChunkBytes: chunk})
		if err != nil {
			t.Fatal(err)
		}
		n := int64(len(s.Ops))
		if _, err := Build(tensors, tp, Options{Route: route, ChunkBytes: chunk, MaxOps: n}); err != nil {
			t.Fatalf("case %d (%s, chunk %d): %d ops, refused at a limit of %d: %v", i, route, chunk, n, n, err)
		}
		if n < 2 {
			continue
		}
		_, err = Build(tensors, tp, Options{Route: route, ChunkBytes: chunk, MaxOps: n - 1})
		var le *OpsLimitError
		if !errors.As(err, &le) {
			t.Fatalf("case %d (%s): %d ops built under a limit of %d (error %v)", i, route, n, n-1, err)
		}
		over++
	}
	if over < 200 {
		t.Errorf("only %d cases tried the limit", over)
	}
}

// Planning that would take more than the machine's memory is refused from
// the op count, before anything is allocated.
func TestMemoryLimit(t *testing.T) {
	_, err := Build(paperTensors(2), nvl72(2), Options{Route: Hierarchical, ChunkBytes: 1, MaxOps: 1 << 40, MaxMemoryBytes: 1 << 30})
	var me *MemoryLimitError
	if !errors.As(err, &me) || me.Ops < 1<<30 || !strings.Contains(err.Error(), "more than this machine's 1.0 GiB of memory") {
		t.Fatalf("got %v, want a MemoryLimitError naming the machine's memory", err)
	}
}

package native

import (
	"github.com/m2n-project/m2n/internal/schedtest"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/program"
)

// The simulator's box class (program) names the kernel the executor
// picks for every pack, unpack and box copy of random schedules, buffers
// placed as the executor places them.
func TestBoxClassMatchesKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	seen := map[program.BoxClass]int{}
	var big []*ir.Schedule
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 4, 3
	for _, c := range []struct {
		shape    []int64
		src, dst layout.Placement
	}{
		{[]int64{4, 64, 4096}, layout.S(1), layout.S(2)}, // long rows
		{[]int64{4, 64, 1001}, layout.S(1), layout.S(2)}, // odd pitch: staged
		{[]int64{2, 96, 64}, layout.S(0), layout.S(2)},   // short rows
	} {
		src := layout.Layout{Shape: c.shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{4}, Ranks: []int{0, 1, 2, 3}}, Placements: []layout.Placement{c.src}}
		dst := layout.Layout{Shape: c.shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{4}, Ranks: []int{4, 5, 6, 7}}, Placements: []layout.Placement{c.dst}}
		s, err := plan.Build([]ir.Tensor{{Name: "w", Src: src, Dst: dst}}, tp, plan.Options{Route: plan.Hierarchical, ChunkBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		big = append(big, s)
	}
	for k := range 60 + len(big) {
		var s *ir.Schedule
		if k < len(big) {
			s = big[k]
		} else {
			s = schedtest.Random(t, rng)
		}
		off, _, _, _ := placement(s, nil)
		x := &Executor{s: s, bufAddr: make([]uint64, len(s.Buffers))}
		for i := range s.Buffers {
			x.bufAddr[i] = 1<<30 + uint64(s.Buffers[i].Rank)<<24 + uint64(off[i])
		}
		for i := range s.Ops {
			op := &s.Ops[i]
			if op.Kind == ir.Send || op.Kind == ir.Recv {
				continue
			}
			c := program.ClassOf(s, op)
			seen[c]++
			if c == program.Contiguous {
				if op.Src.IsBox() || op.Dst.IsBox() {
					t.Fatalf("op %d: a box copy classed contiguous", i)
				}
				continue
			}
			_, kernel, err := x.boxArgs(op)
			if err != nil {
				t.Fatal(err)
			}
			want := map[program.BoxClass]string{program.LongRuns: "box_copy_long_16", program.Staged: "box_copy_stage"}[c]
			ok := kernel == want
			if c == program.ShortRuns {
				ok = strings.HasPrefix(kernel, "box_copy_short_")
			}
			if !ok {
				t.Fatalf("op %d (%v): class %v, but the executor runs %s", i, op.Kind, c, kernel)
			}
		}
	}
	for _, c := range []program.BoxClass{program.LongRuns, program.ShortRuns, program.Staged} {
		if seen[c] == 0 {
			t.Errorf("no %v box copy in the cases", c)
		}
	}
	t.Logf("classes seen: %v", seen)
}

// TestPlacementAlignsLargeBuffers checks the layout of a rank's block on
// random schedules and on one with buffers around bufferAlign: every buffer
// outside the staging arena starts past it, at a multiple of bufferAlign if
// it holds that many bytes (copies pulled over CUDA IPC are slow otherwise)
// and of 256 bytes if not; no two overlap; each ends inside its rank's
// block; the staging part covers every staging buffer.
func TestPlacementAlignsLargeBuffers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	one := func(s *ir.Schedule) {
		t.Helper()
		off, rankBytes, rankStaging, _ := placement(s, nil)
		arena := s.ArenaBytes()
		type span struct{ lo, hi int64 }
		spans := map[int][]span{}
		staged := map[int]int64{}
		for i := range s.Buffers {
			b := &s.Buffers[i]
			if b.InArena {
				continue
			}
			want := smallAlign
			if b.Bytes >= bufferAlign {
				want = bufferAlign
			}
			if off[i]%want != 0 || off[i] < arena[b.Rank] || off[i]+b.Bytes > rankBytes[b.Rank] {
				t.Fatalf("buffer %d (%d bytes) at %d: want a multiple of %d in [%d, %d]", i, b.Bytes, off[i], want, arena[b.Rank], rankBytes[b.Rank])
			}
			for _, o := range spans[b.Rank] {
				if off[i] < o.hi && o.lo < off[i]+b.Bytes {
					t.Fatalf("buffer %d [%d, %d) overlaps [%d, %d)", i, off[i], off[i]+b.Bytes, o.lo, o.hi)
				}
			}
			spans[b.Rank] = append(spans[b.Rank], span{off[i], off[i] + b.Bytes})
			if b.Kind == ir.Staging {
				staged[b.Rank] += b.Bytes
			}
		}
		for r, n := range staged {
			if rankStaging[r] < arena[r]+n || rankStaging[r] > rankBytes[r] {
				t.Fatalf("rank %d: staging part %d, want at least %d and at most the block's %d", r, rankStaging[r], arena[r]+n, rankBytes[r])
			}
		}
	}
	for range 200 {
		one(schedtest.Random(t, rng))
	}
	s := &ir.Schedule{}
	for i, n := range []int64{100, bufferAlign - 1, bufferAlign, 3, bufferAlign + 1, 7 << 20, 1} {
		s.Buffers = append(s.Buffers, ir.Buffer{ID: i, Rank: 0, Kind: ir.Input, Bytes: n})
	}
	one(s)
}

// An alignment variable set to what is not a power of two of at least 256
// is refused by name and value: a run meant to measure an alignment must
// not quietly measure the default.
func TestAlignEnvRefused(t *testing.T) {
	for _, c := range []struct{ name, value string }{{"M2N_BUFFER_ALIGN", "2MiB"}, {"M2N_SMALL_ALIGN", "100"}, {"M2N_BUFFER_ALIGN", "128"}} {
		t.Setenv(c.name, c.value)
		v, err := envPow2(c.name, 4096)
		if err == nil || !strings.Contains(err.Error(), c.name) || !strings.Contains(err.Error(), c.value) || v != 4096 {
			t.Errorf("%s=%s: %d, %v", c.name, c.value, v, err)
		}
	}
	t.Setenv("M2N_BUFFER_ALIGN", "65536")
	if v, err := envPow2("M2N_BUFFER_ALIGN", 4096); err != nil || v != 65536 {
		t.Errorf("65536: %d, %v", v, err)
	}
	t.Setenv("M2N_BUFFER_ALIGN", "")
	if v, err := envPow2("M2N_BUFFER_ALIGN", 4096); err != nil || v != 4096 {
		t.Errorf("unset: %d, %v", v, err)
	}
}

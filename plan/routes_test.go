package plan

import (
	"math/rand/v2"
	"testing"

	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
)

// receivedHeld checks that no transfer of a one-tensor schedule brings a
// rank bytes it holds in its input: each destination rank receives exactly
// the bytes of its shard that its own source shard lacks (flat and
// hierarchical deliver each contribution a rank lacks once), and nothing
// else receives anything.
func receivedHeld(t *testing.T, s *ir.Schedule, r *Regions) {
	t.Helper()
	got := map[int]int64{}
	for i := range s.Ops {
		if op := &s.Ops[i]; op.Kind == ir.Send {
			got[int(op.Peer)] += op.Src.Bytes
		}
	}
	want := map[int]int64{}
	for k, sl := range r.DstSlots {
		lo, hi := r.SlotContribs(k)
		for _, d := range sl.Ranks {
			for j := lo; j < hi; j++ {
				if r.SrcSlotOf(d) != r.Contribs[j].Src {
					want[d] += r.Bytes(j)
				}
			}
		}
	}
	for rk, n := range got {
		if n != want[rk] {
			t.Errorf("%s: rank %d receives %d bytes, but lacks %d of its shard", s.Route, rk, n, want[rk])
		}
	}
	for rk, n := range want {
		if got[rk] != n {
			t.Errorf("%s: rank %d receives %d bytes, but lacks %d of its shard", s.Route, rk, got[rk], n)
		}
	}
}

// The case of issue 13: a replicated source whose ranks are also
// destination replicas; hierarchical sent 25 its own bytes through 28.
func TestHierarchicalHeldLocally(t *testing.T) {
	src := layout.Layout{Shape: []int64{2}, DType: layout.Int8, Mesh: layout.Mesh{Shape: []int{3}, Ranks: []int{1, 13, 25}}, Placements: []layout.Placement{layout.R}}
	dst := layout.Layout{Shape: []int64{2}, DType: layout.Int8, Mesh: layout.Mesh{Shape: []int{2, 3}, Ranks: []int{38, 37, 18, 28, 13, 25}}, Placements: []layout.Placement{layout.S(0), layout.R}}
	tp, err := topo.Preset("gb300-nvl72")
	if err != nil {
		t.Fatal(err)
	}
	tp.GPUsPerDomain, tp.Domains = 8, 6
	r, err := Derive(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, route := range []string{Flat, Hierarchical} {
		s, err := Build([]ir.Tensor{{Name: "t", Src: src, Dst: dst}}, tp, Options{Route: route, ChunkBytes: 1})
		if err != nil {
			t.Fatal(err)
		}
		receivedHeld(t, s, r)
		for i := range s.Ops {
			if op := &s.Ops[i]; op.Kind == ir.Send && (op.Peer == 13 || op.Peer == 25) {
				t.Errorf("%s: rank %d sends rank %d bytes it holds", route, op.Rank, op.Peer)
			}
		}
		if res, err := hostexec.Run(s, hostexec.Options{Seed: 1}); err != nil || res.Wrong != 0 {
			t.Fatalf("%s: %v, %d wrong bytes", route, err, res.Wrong)
		}
	}
}

// Over random layouts, meshes overlapping or not, on random domain sizes,
// flat and hierarchical never send a rank bytes it holds in its input.
func TestRoutesNeverSendHeldBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 5))
	n := 300
	if testing.Short() {
		n = 60
	}
	for i := range n {
		src, dst := randomLayouts(rng)
		tp := randomTopology(rng)
		r, err := Derive(src, dst)
		if err != nil {
			t.Fatal(err)
		}
		for _, route := range []string{Flat, Hierarchical} {
			s, err := Build([]ir.Tensor{{Name: "t", Src: src, Dst: dst}}, tp, Options{Route: route, ChunkBytes: int64(1 + rng.IntN(64))})
			if err != nil {
				t.Fatalf("case %d %s: %v", i, route, err)
			}
			receivedHeld(t, s, r)
			if t.Failed() {
				t.Fatalf("case %d on %d GPUs per domain\nsrc %v\ndst %v", i, tp.GPUsPerDomain, src, dst)
			}
		}
	}
}

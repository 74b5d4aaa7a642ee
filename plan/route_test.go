package plan

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
)

// firstRoute exists only in this test, to show what a new route takes:
// this type, its builder and its bounder, and one registration. Every
// destination rank receives each contribution from the first replica of
// its source slot (flat spreads them over the replicas), or copies it
// locally where it holds it.
type firstRoute struct{}

func (firstRoute) name() string                    { return "first-replica" }
func (firstRoute) gathers() bool                   { return false }
func (firstRoute) quantizesAtEntry() bool          { return false }
func (firstRoute) builder(b *builder) routeBuilder { return &firstBuild{b} }
func (firstRoute) bounder([]ir.Tensor, *topo.Topology) routeBounder {
	return firstBound{}
}

type firstBuild struct{ *builder }

// minOps: the deliveries' lower bound holds for any choice of supplier.
func (b *firstBuild) minOps(ti int, limit int64) int64 { return b.deliveredMinOps(ti, limit) }
func (b *firstBuild) count(int) int64                  { return 0 }

// from is the rank destination rank d of contribution j receives it from.
func firstFrom(r *Regions, j, d int) int {
	c := &r.Contribs[j]
	if r.SrcSlotOf(d) == c.Src {
		return d
	}
	return r.SrcSlots[c.Src].Ranks[0]
}

func (b *firstBuild) emit(ti int) {
	r := b.regions[ti]
	var ds []delivery
	for k, sl := range r.DstSlots {
		lo, hi := r.SlotContribs(k)
		for _, d := range sl.Ranks {
			for j := lo; j < hi; j++ {
				g := r.Contribs[j].Box
				if s := firstFrom(r, j, d); s != d {
					ds = append(ds, delivery{j: j, chunks: Chunks(g, b.elem(ti), b.s.ChunkBytes), src: s, leader: d})
					continue
				}
				b.localCopy(ti, d, g)
			}
		}
	}
	b.deliver(ti, ds)
}

type firstBound struct{}

func (firstBound) add(_ *ir.Tensor, r *Regions, move func(a, b int, bytes float64)) {
	for k, sl := range r.DstSlots {
		lo, hi := r.SlotContribs(k)
		for _, d := range sl.Ranks {
			for j := lo; j < hi; j++ {
				move(firstFrom(r, j, d), d, float64(r.Bytes(j)))
			}
		}
	}
}
func (firstBound) chain() (float64, string) { return 0, "" }

// register adds a route for the length of a test.
func register(t *testing.T, r route) {
	saved := registry
	registry = append(slices.Clip(registry), r)
	t.Cleanup(func() { registry = saved })
}

// A route registered by one line builds schedules that deliver every
// byte (on the host executor), under a staging cap too, and is bounded:
// where no source slot has more than one replica, it sends what flat
// sends, and its bound is flat's.
func TestNewRouteByOneFile(t *testing.T) {
	register(t, firstRoute{})
	rng := rand.New(rand.NewPCG(71, 72))
	for i := range 100 {
		tensors, tp, chunk := randomBatch(rng, 1+rng.IntN(3))
		opt := Options{Route: "first-replica", ChunkBytes: chunk}
		if rng.IntN(3) == 0 {
			opt.StagingCapBytes = 4096 + rng.Int64N(1<<16)
		}
		s, err := Build(tensors, tp, opt)
		if _, ok := err.(*StagingCapError); ok {
			continue
		}
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		runOnHost(t, s, uint64(i), "first-replica")
		sol, err := Bound("first-replica", tensors, tp)
		if err != nil {
			t.Fatalf("case %d: bound: %v", i, err)
		}
		flat, err := Bound(Flat, tensors, tp)
		if err != nil {
			t.Fatal(err)
		}
		if sol.UniqueBytes != flat.UniqueBytes || singleReplica(tensors) && sol.Time != flat.Time {
			t.Fatalf("case %d: bound %+v against flat's %+v", i, sol, flat)
		}
	}
	if _, err := Build(nil, nil, Options{Route: "no-such-route"}); err == nil {
		t.Fatal("an unknown route built")
	}
}

// singleReplica reports whether every tensor's source slots have one
// replica each (no mesh dim replicates; then first-replica and flat send
// the same bytes).
func singleReplica(ts []ir.Tensor) bool {
	for _, t := range ts {
		for i, p := range t.Src.Placements {
			if !p.Shard && t.Src.Mesh.Shape[i] > 1 {
				return false
			}
		}
	}
	return true
}

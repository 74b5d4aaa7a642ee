package plan

import (
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
)

// Flat is the route without forwarding: every destination rank receives
// each byte it needs straight from a source rank that holds it.
const Flat = "flat"

type flatRoute struct{}

func (flatRoute) name() string           { return Flat }
func (flatRoute) gathers() bool          { return false }
func (flatRoute) quantizesAtEntry() bool { return false }
func (flatRoute) builder(b *builder) routeBuilder {
	return &flatBuild{b}
}
func (flatRoute) bounder([]ir.Tensor, *topo.Topology) routeBounder { return flatBound{} }

// flatBuild builds the flat route; it has no state of its own.
type flatBuild struct{ *builder }

func (b *flatBuild) minOps(ti int, limit int64) int64 { return b.deliveredMinOps(ti, limit) }
func (b *flatBuild) count(int) int64                  { return 0 }

// flat sends every (supplier, destination rank) intersection directly: each
// replica of a destination slot receives its own copy from the source.
func (b *flatBuild) emit(ti int) {
	r := b.regions[ti]
	elem := b.elem(ti)
	var ds []delivery
	for k, sl := range r.DstSlots {
		lo, hi := r.SlotContribs(k)
		chunks := make([][]layout.Box, hi-lo) // shared by the slot's replicas
		for i, d := range sl.Ranks {
			for j := lo; j < hi; j++ {
				s := r.Supplier(j, i)
				g := r.Contribs[j].Box
				if s == d {
					b.localCopy(ti, d, g)
					continue
				}
				if chunks[j-lo] == nil {
					chunks[j-lo] = Chunks(g, elem, b.s.ChunkBytes)
				}
				ds = append(ds, delivery{j: j, chunks: chunks[j-lo], src: s, leader: d})
			}
		}
	}
	b.deliver(ti, ds)
}

type flatBound struct{}

func (flatBound) add(_ *ir.Tensor, r *Regions, move func(a, b int, bytes float64)) {
	boundFlat(r, move)
}
func (flatBound) chain() (float64, string) { return 0, "" }

// boundFlat: every destination rank gets every contribution from its
// supplier.
func boundFlat(r *Regions, move func(a, b int, bytes float64)) {
	for k, sl := range r.DstSlots {
		lo, hi := r.SlotContribs(k)
		for i, d := range sl.Ranks {
			for j := lo; j < hi; j++ {
				move(r.Supplier(j, i), d, float64(r.Bytes(j)))
			}
		}
	}
}

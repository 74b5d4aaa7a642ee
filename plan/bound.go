package plan

import (
	"fmt"
	"sort"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
)

// SOL is the speed-of-light bound of a route: the aggregate data-movement
// model of docs/sim.md, computed from the layouts and the topology's line
// rates. Every rank's bytes on each port (network egress and ingress,
// NVLink egress and ingress), with the route's work spread over replicas as
// evenly as the route allows, divided by the port's line rate; the bound is
// the largest. It leaves out latencies, chunking, and the order of work.
//
// Each route's bound reads the same geometry as its builder, from the same
// functions: the hierarchical route's entry domains ([hierRotation]),
// agbcast's gather sources and broadcast ring, nemo-legacy's ring segments,
// roots and broadcast rings.
type SOL struct {
	Route       string
	Time        units.Time // the bound
	Term        string     // the binding term, e.g. "network egress of rank 0"
	UniqueBytes int64      // bytes of the tensors, each counted once
}

// ports indexes a rank's loads.
const (
	netOut = iota
	netIn
	nvlOut
	nvlIn
)

var portNames = [4]string{"network egress", "network ingress", "NVLink egress", "NVLink ingress"}

// Bound computes the SOL of moving tensors by a route over a topology.
func Bound(route string, tensors []ir.Tensor, tp *topo.Topology) (SOL, error) {
	load, move := mover(tp) // move adds bytes sent from rank a to rank b
	sol := SOL{Route: route}
	var roots []int
	agRoots := rootOrder{}
	rot := newHierRotation()
	var chain float64 // nemo-legacy: the longest single tensor's all-gather plus broadcast
	var chainTerm string
	if route == NemoLegacy {
		roots = stageRoots(tensors)
	}
	// Quantized tensors are bound as they move: fp8 and scales when
	// quantized at the source, the source dtype when at the destination.
	// A schedule's tensors hold scale tensors; expand derives them again.
	var weights []ir.Tensor
	for _, t := range tensors {
		if t.ScaleOf == 0 {
			weights = append(weights, t)
		}
	}
	_, moved, site, entries, err := expand(weights, route)
	if err != nil {
		return sol, err
	}
	// A tensor quantized at its entry replicas moves twice: gathered in its
	// source dtype, then spread in fp8 (after the other tensors here).
	n := len(moved)
	for ti := range n {
		if e, ok := entries[ti]; ok {
			moved = append(moved, e.spread)
			site = append(site, quantAtEntry)
		}
	}
	for ti, t := range moved {
		if site[ti] == scaleAtDest {
			continue
		}
		r, err := Derive(t.Src, t.Dst)
		if err != nil {
			return sol, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if ti < n {
			sol.UniqueBytes += t.Src.Bytes()
		}
		switch route {
		case Flat:
			boundFlat(r, move)
		case Hierarchical:
			boundHier(r, tp, rot, move)
		case AGBcast:
			boundAGBcast(r, tp, agRoots, move)
		case NemoLegacy:
			boundLegacy(r, roots, tp, move, move)
			if c, term := legacyChain(r, roots, tp); c > chain {
				chain, chainTerm = c, fmt.Sprintf("all-gather then broadcast of %s (%s)", t.Name, term)
			}
		default:
			return sol, fmt.Errorf("unknown route %q", route)
		}
	}
	best, term := maxPort(load, tp)
	sol.Term = term
	if chain > best {
		best, sol.Term = chain, chainTerm
	}
	sol.Time = units.Time(best*float64(units.Second) + 0.5)
	return sol, nil
}

// maxPort returns the largest port time of the loads, in seconds, and
// names the port.
func maxPort(load map[int]*[4]float64, tp *topo.Topology) (float64, string) {
	rate := [4]float64{
		netOut: float64(tp.NICLine) * float64(tp.NICsPerGPU), netIn: float64(tp.NICLine) * float64(tp.NICsPerGPU),
		nvlOut: float64(tp.NVLinkLine), nvlIn: float64(tp.NVLinkLine),
	}
	ranks := make([]int, 0, len(load))
	for rk := range load {
		ranks = append(ranks, rk)
	}
	sort.Ints(ranks)
	var best float64
	var term string
	for _, rk := range ranks {
		for p, b := range load[rk] {
			if s := b / rate[p]; s > best {
				best = s
				term = fmt.Sprintf("%s of rank %d", portNames[p], rk)
			}
		}
	}
	return best, term
}

// mover returns a load map and the function that adds bytes sent from rank
// a to rank b to it.
func mover(tp *topo.Topology) (map[int]*[4]float64, func(a, b int, bytes float64)) {
	load := map[int]*[4]float64{}
	at := func(rank int) *[4]float64 {
		l, ok := load[rank]
		if !ok {
			l = &[4]float64{}
			load[rank] = l
		}
		return l
	}
	return load, func(a, b int, bytes float64) {
		switch {
		case a == b:
		case tp.Domain(a) == tp.Domain(b):
			at(a)[nvlOut] += bytes
			at(b)[nvlIn] += bytes
		default:
			at(a)[netOut] += bytes
			at(b)[netIn] += bytes
		}
	}
}

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

// boundHier: per destination slot and domain holding its replicas, each
// contribution enters the domain once, its bytes spread evenly over the
// domain's replicas (the leaders), and each leader replicates its share to
// the domain's other replicas over NVLink. The source injects each
// contribution once, spread evenly over its replicas. Replicas that hold
// the contribution copy it locally and feed their domain's other replicas;
// such a domain receives nothing from the ring. The ring of
// domains starts at the entry domain the route chooses ([hierRotation]);
// domains after the first receive from the previous domain's leaders.
func boundHier(r *Regions, tp *topo.Topology, rot hierRotation, move func(a, b int, bytes float64)) {
	for k, sl := range r.DstSlots {
		h := newHierSlot(sl, tp)
		q := len(h.doms)
		ranks := func(idx []int) []int {
			out := make([]int, len(idx))
			for n, i := range idx {
				out[n] = sl.Ranks[i]
			}
			return out
		}
		lo, hi := r.SlotContribs(k)
		for j := lo; j < hi; j++ {
			b := float64(r.Bytes(j))
			src := r.SrcSlots[r.Contribs[j].Src].Ranks
			e, _, local := rot.entry(r, k, j, h, tp)
			for step := range q {
				reps := ranks(h.at(e, step))
				if holders := hierHolders(r, j, reps); local && len(holders) > 0 {
					// Holders copy locally and feed the domain's others.
					for _, d := range reps {
						if r.SrcSlotOf(d) != r.Contribs[j].Src {
							for _, s := range holders {
								move(s, d, b/float64(len(holders)))
							}
						}
					}
					continue
				}
				share := b / float64(len(reps))
				for _, lead := range reps {
					if step == 0 {
						for _, s := range src {
							move(s, lead, share/float64(len(src)))
						}
					} else {
						prev := ranks(h.at(e, step-1))
						for _, p := range prev {
							move(p, lead, share/float64(len(prev)))
						}
					}
					for _, d := range reps {
						if d != lead {
							move(lead, d, share)
						}
					}
				}
			}
		}
	}
}

// boundAGBcast: the root (the source mesh's first rank) gathers every
// source slot once, then the whole tensor passes along the ring of
// destination ranks, the root's domain first.
func boundAGBcast(r *Regions, tp *topo.Topology, roots rootOrder, move func(a, b int, bytes float64)) {
	root := r.Src.Mesh.Ranks[0]
	for _, sl := range r.SrcSlots {
		move(gatherSource(sl, root, tp), root, float64(sl.Box.Elems()*r.Elem()))
	}
	B := float64(r.Src.Bytes())
	prev := root
	for _, d := range broadcastRing(r.Dst.Mesh.Ranks, root, tp, roots.Of(root)) {
		move(prev, d, B)
		prev = d
	}
}

// boundLegacy: the all-gather brings every source rank the blocks it lacks,
// each from its predecessor on the ring of the source mesh (a block passes
// from each of its holders to the ranks after it, up to the next holder);
// then the whole tensor passes from the root along its broadcast ring
// ([legacyRing]). ag and bc receive the two phases' bytes.
func boundLegacy(r *Regions, roots []int, tp *topo.Topology, ag, bc func(a, b int, bytes float64)) {
	ring := r.Src.Mesh.Ranks
	n := len(ring)
	pos := make(map[int]int, n)
	for i, rk := range ring {
		pos[rk] = i
	}
	for _, sl := range r.SrcSlots {
		b := float64(sl.Box.Elems() * r.Elem())
		for _, sg := range ringSegments(sl, pos, n) {
			prev := sg.from
			for _, q := range sg.to {
				ag(ring[prev], ring[q], b)
				prev = q
			}
		}
	}
	root := ring[0]
	B := float64(r.Src.Bytes())
	prev := root
	for _, d := range legacyRing(root, roots, r.Dst.Mesh.Ranks, tp) {
		bc(prev, d, B)
		prev = d
	}
}

// legacyChain is the bound of one tensor of the nemo-legacy route alone:
// its broadcast starts once the root has done its part of the all-gather
// (received what it lacks, forwarded what it must), so the root's
// all-gather port time and the broadcast's port time add. The route's SOL
// is the larger of this (over tensors) and the aggregate port bound.
func legacyChain(r *Regions, roots []int, tp *topo.Topology) (float64, string) {
	agLoad, ag := mover(tp)
	bcLoad, bc := mover(tp)
	boundLegacy(r, roots, tp, ag, bc)
	root := r.Src.Mesh.Ranks[0]
	rootLoad := map[int]*[4]float64{}
	if l, ok := agLoad[root]; ok {
		rootLoad[root] = l
	}
	a, at := maxPort(rootLoad, tp)
	b, bt := maxPort(bcLoad, tp)
	switch {
	case a == 0:
		return b, bt
	case b == 0:
		return a, at
	}
	return a + b, at + ", then " + bt
}

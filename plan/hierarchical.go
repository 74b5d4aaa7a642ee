package plan

import (
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
	"sort"
)

// Hierarchical is the NCCL M2N paper's route: each byte leaves the source
// once and enters each destination NVLink domain once, then is replicated
// over NVLink inside the domain.
const Hierarchical = "hierarchical"

type hierRoute struct{}

func (hierRoute) name() string  { return Hierarchical }
func (hierRoute) gathers() bool { return false }

// quantizesAtEntry: a tensor quantized at its destination is gathered in
// its source dtype at one replica set, quantized there, and spread in fp8
// with its scales (plan/quant.go).
func (hierRoute) quantizesAtEntry() bool { return true }
func (hierRoute) builder(b *builder) routeBuilder {
	return &hierBuild{b, newHierRotation()}
}
func (hierRoute) bounder(_ []ir.Tensor, tp *topo.Topology) routeBounder {
	return &hierBound{tp, newHierRotation()}
}

// hierBuild builds the hierarchical route: its entry domains and leaders
// rotate across the tensors of the batch.
type hierBuild struct {
	*builder
	rot hierRotation
}

func (b *hierBuild) minOps(ti int, limit int64) int64 { return b.deliveredMinOps(ti, limit) }
func (b *hierBuild) count(int) int64                  { return 0 }

// hierarchical is the paper's route. Per destination slot, each
// contribution enters the destination through one leader: a replica that
// already holds it (a local copy), or else one chosen round-robin among the
// replicas of an entry domain, so leader loads differ by at most one
// contribution; the entry domain rotates over the domains holding replicas.
// The leader forwards each chunk to the replica of the same position in the
// next domain and replicates it over NVLink to the other replicas of its
// domain; the next domain's receiver does the same, around the ring of
// domains. Each byte leaves the source once and enters each destination
// domain once. No rank receives bytes it holds: every replica that holds
// the contribution copies it locally, and a domain with such a replica
// receives nothing from the ring but is fed by it (its first holder leads
// there, and the ring goes on from it).
func (b *hierBuild) emit(ti int) {
	r := b.regions[ti]
	elem := b.elem(ti)
	var ds []delivery
	rot := b.rot
	for k, sl := range r.DstSlots {
		h := newHierSlot(sl, b.tp)
		q := len(h.doms)
		lo, hi := r.SlotContribs(k)
		for j := lo; j < hi; j++ {
			c := &r.Contribs[j]
			e, li, local := rot.entry(r, k, j, h, b.tp)
			ix := 0 // the leader's position among its domain's replicas
			for p, i := range h.at(e, 0) {
				if i == li {
					ix = p
				}
			}
			// The receiving replica in each domain, ring order from the
			// entry: the domain's first holder of the contribution, else
			// the replica of the leader's position.
			recv := make([]int, q)
			held := make([]bool, q) // the domain has a holder
			for step := range q {
				reps := h.at(e, step)
				recv[step] = sl.Ranks[reps[ix%len(reps)]]
				for _, i := range reps {
					if d := sl.Ranks[i]; local && r.SrcSlotOf(d) == c.Src {
						recv[step], held[step] = d, true
						break
					}
				}
			}
			if local {
				recv[0] = sl.Ranks[li]
			}
			chunks := Chunks(c.Box, elem, b.s.ChunkBytes)
			// One delivery per run of the ring from a domain with a holder
			// (or from the entry) up to the next domain with one.
			for start := 0; start < q; {
				end := start + 1
				for end < q && !held[end] {
					end++
				}
				var hops []hop
				for step := start; step < end; step++ {
					if step+1 < end {
						hops = append(hops, hop{recv[step], recv[step+1]})
					}
					for _, i := range h.at(e, step) {
						d := sl.Ranks[i]
						switch {
						case d == recv[step]:
						case local && r.SrcSlotOf(d) == c.Src:
							b.localCopy(ti, d, c.Box)
						default:
							hops = append(hops, hop{recv[step], d})
						}
					}
				}
				leader := recv[start]
				src := leader
				if local {
					b.localCopy(ti, leader, c.Box)
				} else {
					src = r.Supplier(j, li)
				}
				ds = append(ds, delivery{j: j, chunks: chunks, src: src, leader: leader, local: local, hops: hops})
				start = end
			}
		}
	}
	b.deliver(ti, ds)
}

// hierHolders returns the ranks among ranks that hold contribution j in
// their input: the replicas of its source slot.
func hierHolders(r *Regions, j int, ranks []int) []int {
	var out []int
	for _, d := range ranks {
		if r.SrcSlotOf(d) == r.Contribs[j].Src {
			out = append(out, d)
		}
	}
	return out
}

// hierSlot is a destination slot's replicas grouped by NVLink domain, as
// the hierarchical route and its bound see them: the domains ascending (the
// ring the route forwards along) and, per domain, the replica indices in
// mesh order.
type hierSlot struct {
	doms  []int
	byDom map[int][]int
	key   string // the slot's set of ranks, for the rotation across tensors
}

func newHierSlot(sl Slot, tp *topo.Topology) hierSlot {
	h := hierSlot{byDom: map[int][]int{}, key: rankKey(sl.Ranks, nil)}
	for i, d := range sl.Ranks {
		dom := tp.Domain(d)
		if _, ok := h.byDom[dom]; !ok {
			h.doms = append(h.doms, dom)
		}
		h.byDom[dom] = append(h.byDom[dom], i)
	}
	sort.Ints(h.doms)
	return h
}

// at returns the replica indices of the domain step places after entry
// domain e on the ring.
func (h hierSlot) at(e, step int) []int { return h.byDom[h.doms[(e+step)%len(h.doms)]] }

// hierRotation is the hierarchical route's choice of entry domains and
// leaders, carried across the tensors of a batch: contributions entered per
// set of replicas, and leaders chosen per replica group of a domain.
type hierRotation struct{ entered, led map[string]int }

func newHierRotation() hierRotation { return hierRotation{map[string]int{}, map[string]int{}} }

// entry chooses where contribution j of destination slot k enters the
// destination: the entry domain's index in h.doms and the leader's replica
// index. A replica that already holds the contribution leads in its own
// domain (local: a local copy). Otherwise the entry domain rotates over the
// domains, per set of replicas and across the tensors of a batch, so
// tensors with one contribution do not all enter through the same rank, and
// the leader is chosen round-robin among the entry domain's replicas, so
// leader loads differ by at most one contribution.
func (rot hierRotation) entry(r *Regions, k, j int, h hierSlot, tp *topo.Topology) (e, li int, local bool) {
	sl := &r.DstSlots[k]
	for i, d := range sl.Ranks {
		if r.SrcSlotOf(d) == r.Contribs[j].Src {
			return sort.SearchInts(h.doms, tp.Domain(d)), i, true
		}
	}
	e = (rot.entered[h.key] + k) % len(h.doms)
	rot.entered[h.key]++
	reps := h.byDom[h.doms[e]]
	gk := rankKey(sl.Ranks, reps)
	li = reps[rot.led[gk]%len(reps)]
	rot.led[gk]++
	return e, li, false
}

// hierBound bounds the hierarchical route, rotating the entry domains as
// the builder does.
type hierBound struct {
	tp  *topo.Topology
	rot hierRotation
}

func (h *hierBound) add(_ *ir.Tensor, r *Regions, move func(a, b int, bytes float64)) {
	boundHier(r, h.tp, h.rot, move)
}
func (h *hierBound) chain() (float64, string) { return 0, "" }

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

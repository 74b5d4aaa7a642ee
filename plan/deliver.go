package plan

import (
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"slices"
	"strconv"
	"strings"
)

// delivery is one contribution on its way to the replicas of a destination
// slot: from a supplier to a leader (a local copy when the leader holds it),
// then along hops from ranks that have it to ranks that need it.
type delivery struct {
	j      int // contribution
	chunks []layout.Box
	src    int // supplier
	leader int // first destination rank
	local  bool
	hops   []hop
}

type hop struct{ from, to int }

// rankKey names a set of ranks: all of ranks, or those at the indices idx.
func rankKey(ranks []int, idx []int) string {
	var sb strings.Builder
	if idx == nil {
		for _, r := range ranks {
			sb.WriteString(strconv.Itoa(r))
			sb.WriteByte(',')
		}
		return sb.String()
	}
	for _, i := range idx {
		sb.WriteString(strconv.Itoa(ranks[i]))
		sb.WriteByte(',')
	}
	return sb.String()
}

// deliver adds the ops of every delivery in rounds, pipelined: in round r,
// each delivery's supplier sends chunk r, and a rank that received chunks at
// hop depth k forwards chunk r-k. Ops then appear in the order data can
// flow, so the per-pair and per-rank lanes, which run in that order, never
// hold a ready chunk behind one still k hops away. Under a staging cap, the
// chunks go in waves whose staging fits (deliverCapped).
func (b *builder) deliver(ti int, ds []delivery) {
	paths := b.paths(ds)
	if b.cap != nil {
		b.deliverCapped(ti, ds, paths)
		return
	}
	b.deliverChunks(ti, ds, paths, nil, nil, nil)
}

// holding is where a rank of a delivery's path has a chunk, and the op (or
// -1) that put it there.
type holding struct {
	region ir.Region
	dep    int32
}

// path is a delivery's ranks as a tree from its leader.
type path struct {
	from    []int32 // per hop: the node it sends from (0 the leader, i+1 hop i's receiver)
	depth   []int   // per node: transfers from the supplier to it
	deepest int
	held    [][]holding // per chunk, per node
}

func (b *builder) paths(ds []delivery) []path {
	paths := make([]path, len(ds))
	// nodeOf: per rank, 1 + its node in the path being built (0: none);
	// reset after each path. (A map per path cost a fifth of planning
	// scaling-dsv3's 2,048-GPU point, looked up once per hop and chunk.)
	nodeOf := b.nodeOf
	at := func(r int) *int32 {
		if r >= len(nodeOf) {
			nodeOf = append(nodeOf, make([]int32, r+1-len(nodeOf))...)
		}
		return &nodeOf[r]
	}
	for i := range ds {
		d := &ds[i]
		p := path{from: make([]int32, len(d.hops)), depth: make([]int, len(d.hops)+1)}
		if !d.local {
			p.depth[0] = 1
		}
		p.deepest = p.depth[0]
		*at(d.leader) = 1
		for h, hp := range d.hops {
			from := *at(hp.from) - 1
			if from < 0 {
				panic("plan: a hop from a rank that does not hold the chunk")
			}
			p.from[h] = from
			*at(hp.to) = int32(h + 2)
			p.depth[h+1] = p.depth[from] + 1
			p.deepest = max(p.deepest, p.depth[h+1])
		}
		nodeOf[d.leader] = 0
		for _, hp := range d.hops {
			nodeOf[hp.to] = 0
		}
		p.held = make([][]holding, len(d.chunks))
		paths[i] = p
	}
	b.nodeOf = nodeOf
	return paths
}

// deliverChunks adds the rounds of the chunks [lo[i], hi[i]) of the
// deliveries act (nil: every chunk of every delivery).
func (b *builder) deliverChunks(ti int, ds []delivery, paths []path, act, lo, hi []int) {
	cache := map[packKey]packed{}
	n := len(ds)
	if act != nil {
		n = len(act)
	}
	at := func(k int) (i, first, last int) {
		if act == nil {
			return k, 0, len(ds[k].chunks)
		}
		i = act[k]
		return i, lo[i], hi[i]
	}
	total := 0
	for k := range n {
		i, first, last := at(k)
		total = max(total, last-first+paths[i].deepest)
	}
	for r := range total {
		for k := range n {
			i, first, last := at(k)
			d, p := &ds[i], &paths[i]
			if c := first + r; c < last {
				g := d.chunks[c]
				p.held[c] = make([]holding, len(d.hops)+1)
				src, dep := b.sendable(ti, d.src, g, packKey{d.src, d.j, c}, cache)
				if d.local {
					p.held[c][0] = holding{src, dep}
				} else {
					dst, direct := b.landing(ti, d.leader, g)
					_, recv := b.xfer(d.src, d.leader, src, dst, b.dep(dep), nil)
					b.land(ti, d.leader, g, dst, direct, recv)
					p.held[c][0] = holding{dst, recv}
				}
			}
			for h, hp := range d.hops {
				from := p.from[h]
				c := first + r - p.depth[from]
				if c < first || c >= last {
					continue
				}
				g, at := d.chunks[c], p.held[c][from]
				dst, direct := b.landing(ti, hp.to, g)
				_, recv := b.xfer(hp.from, hp.to, at.region, dst, b.dep(at.dep), nil)
				b.land(ti, hp.to, g, dst, direct, recv)
				p.held[c][h+1] = holding{dst, recv}
			}
		}
	}
}

// deliverCapped delivers in waves: it takes the chunks in the order the
// rounds send them (chunk 0 of every delivery, then chunk 1, ...) and
// closes a wave before the chunk whose staging (a pack at the supplier,
// a landing at each rank that receives it strided) would overflow the cap
// on some rank. A wave holds every reader of its staging, so the next one
// can reuse it.
func (b *builder) deliverCapped(ti int, ds []delivery, paths []path) {
	r := b.regions[ti]
	elem := b.elem(ti)
	limit := b.cap.limit
	contig := func(box layout.Box, g layout.Box) bool {
		count, _ := g.Runs(box.Size)
		return count == 1
	}
	strided := func(rank int, g layout.Box) bool { // lands strided in rank's output
		k, _ := r.DstSlotOf(rank)
		return !contig(r.DstSlots[k].Box, g)
	}
	lo, hi := make([]int, len(ds)), make([]int, len(ds))
	var act []int
	used := map[int]int64{}
	packs := map[packKey]bool{}
	type need struct {
		rank int
		n    int64
	}
	var needs []need
	flush := func() {
		if len(act) == 0 {
			return
		}
		slices.Sort(act)
		b.waveBegin()
		b.deliverChunks(ti, ds, paths, act, lo, hi)
		b.waveEnd(ti, true)
		for _, i := range act {
			lo[i], hi[i] = 0, 0
		}
		act = act[:0]
		clear(used)
		clear(packs)
	}
	// needsOf lists the staging chunk c of delivery i takes, per rank.
	needsOf := func(i, c int) {
		d := &ds[i]
		g := d.chunks[c]
		n := g.Elems() * elem
		needs = needs[:0]
		if key := (packKey{d.src, d.j, c}); !packs[key] && !contig(r.SrcSlots[r.SrcSlotOf(d.src)].Box, g) {
			needs = append(needs, need{d.src, n})
		}
		if !d.local && strided(d.leader, g) {
			needs = append(needs, need{d.leader, n})
		}
		for _, hp := range d.hops {
			if strided(hp.to, g) {
				needs = append(needs, need{hp.to, n})
			}
		}
	}
	fits := func() (bool, need) {
		for k, nd := range needs {
			sum := nd.n
			for _, o := range needs[:k] {
				if o.rank == nd.rank {
					sum += o.n
				}
			}
			if used[nd.rank]+sum > limit {
				return false, need{nd.rank, sum}
			}
		}
		return true, need{}
	}
	most := 0
	for i := range ds {
		most = max(most, len(ds[i].chunks))
	}
	for c := range most {
		for i := range ds {
			d := &ds[i]
			if c >= len(d.chunks) {
				continue
			}
			needsOf(i, c)
			if ok, _ := fits(); !ok {
				flush()
				needsOf(i, c)
				if ok, worst := fits(); !ok {
					b.cap.failed(capFailure{need: worst.n, rank: worst.rank, tensor: ti, chunk: true})
				}
			}
			for _, nd := range needs {
				used[nd.rank] += nd.n
			}
			packs[packKey{d.src, d.j, c}] = true
			if hi[i] == lo[i] {
				lo[i] = c
				act = append(act, i)
			}
			hi[i] = c + 1
		}
	}
	flush()
}

// deliveredMinOps is flat's and hierarchical's lower bound on tensor ti's
// ops from the chunk counts alone (see route.minOps).
func (b *builder) deliveredMinOps(ti int, limit int64) int64 {
	r := b.regions[ti]
	elem, cb := b.elem(ti), b.s.ChunkBytes
	var n int64
	// Per destination slot, each replica gets each contribution (at
	// least one op each, counted first): every chunk reaches every
	// replica that does not hold it by one transfer, from the source
	// (flat, and hierarchical's leader) or from a replica that has it
	// (hierarchical's forwarding); a replica that holds it copies it.
	var gate int64          // each replica and contribution: at least one op
	held := map[int]int64{} // per source slot, the slot's replicas holding it
	for k, sl := range r.DstSlots {
		lo, hi := r.SlotContribs(k)
		reps := int64(len(sl.Ranks))
		if gate = addSat(gate, mulSat(reps, int64(hi-lo))); gate > limit {
			return gate // too many to count one by one
		}
		clear(held)
		for _, d := range sl.Ranks {
			if s := r.SrcSlotOf(d); s >= 0 {
				held[s]++
			}
		}
		for j := lo; j < hi; j++ {
			c := ChunkCount(r.Contribs[j].Box, elem, cb)
			sends := reps - held[r.Contribs[j].Src]
			rest := reps - sends // local copies
			n = addSat(n, addSat(mulSat(2*sends, c), rest))
		}
	}
	return n
}

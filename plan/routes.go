package plan

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/m2n-project/m2n/model/topo"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
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

// flat sends every (supplier, destination rank) intersection directly: each
// replica of a destination slot receives its own copy from the source.
func (b *builder) flat(ti int) {
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
func (b *builder) hierarchical(ti int) {
	r := b.regions[ti]
	elem := b.elem(ti)
	var ds []delivery
	rot := hierRotation{b.entered, b.led}
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

// gatherSource is the replica of a source slot that agbcast's root gathers
// it from: the root itself, else a replica in the root's domain, else the
// first.
func gatherSource(sl Slot, root int, tp *topo.Topology) int {
	rootDom := tp.Domain(root)
	s := sl.Ranks[0]
	for _, rk := range sl.Ranks {
		if rk == root {
			return rk
		}
		if tp.Domain(rk) == rootDom && tp.Domain(s) != rootDom {
			s = rk
		}
	}
	return s
}

// broadcastRing orders a broadcast's destination ranks (all but the root)
// into its ring: the root's domain first, then the other domains in order,
// so that only the root's hop and domain-to-domain hops cross the network.
// Within each domain the ring starts at an offset that depends on which
// root this is (k: the root's order of first appearance in the batch),
// spread as evenly as any number of roots allows (0, 1/2, 1/4, 3/4, 1/8, ...
// of the way along), so broadcasts from different roots (one per pipeline
// stage, say) enter each domain through different ranks.
func broadcastRing(dst []int, root int, tp *topo.Topology, k int) []int {
	rootDom := tp.Domain(root)
	var ring []int
	for _, d := range dst {
		if d != root {
			ring = append(ring, d)
		}
	}
	sort.SliceStable(ring, func(i, j int) bool {
		di, dj := tp.Domain(ring[i]), tp.Domain(ring[j])
		if (di == rootDom) != (dj == rootDom) {
			return di == rootDom
		}
		if di != dj {
			return di < dj
		}
		return ring[i] < ring[j]
	})
	for lo := 0; lo < len(ring); {
		hi := lo
		for hi < len(ring) && tp.Domain(ring[hi]) == tp.Domain(ring[lo]) {
			hi++
		}
		seg := ring[lo:hi]
		off := int(vanDerCorput(k) * float64(len(seg)))
		rot := append(append([]int(nil), seg[off:]...), seg[:off]...)
		copy(seg, rot)
		lo = hi
	}
	return ring
}

// vanDerCorput is the k-th point of the base-2 van der Corput sequence in
// [0, 1): 0, 1/2, 1/4, 3/4, 1/8, 5/8, ...
func vanDerCorput(k int) float64 {
	v, f := 0.0, 0.5
	for ; k > 0; k >>= 1 {
		if k&1 == 1 {
			v += f
		}
		f /= 2
	}
	return v
}

// rootOrder numbers the distinct roots of broadcasts in order of first
// appearance: the k that broadcastRing takes.
type rootOrder map[int]int

// Of returns the root's number, giving it the next one if new.
func (o rootOrder) Of(root int) int {
	if k, ok := o[root]; ok {
		return k
	}
	o[root] = len(o)
	return o[root]
}

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
	node    map[int]int // rank -> node index: 0 the leader, i+1 hop i's receiver
	depth   []int       // per node: transfers from the supplier to it
	deepest int
	held    [][]holding // per chunk, per node
}

func (b *builder) paths(ds []delivery) []path {
	paths := make([]path, len(ds))
	for i := range ds {
		d := &ds[i]
		p := path{node: map[int]int{d.leader: 0}, depth: make([]int, len(d.hops)+1)}
		if !d.local {
			p.depth[0] = 1
		}
		p.deepest = p.depth[0]
		for h, hp := range d.hops {
			from, ok := p.node[hp.from]
			if !ok {
				panic("plan: a hop from a rank that does not hold the chunk")
			}
			p.node[hp.to] = h + 1
			p.depth[h+1] = p.depth[from] + 1
			p.deepest = max(p.deepest, p.depth[h+1])
		}
		p.held = make([][]holding, len(d.chunks))
		paths[i] = p
	}
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
				from := p.node[hp.from]
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

// agbcast is the legacy path: gather the whole tensor at a root of the
// source group (the first rank of the source mesh), then broadcast it along
// a ring of every destination rank, chunk by chunk as NCCL's ring broadcast
// pipelines it; each destination keeps its slice. A chunk's broadcast starts
// once the gathered shards it covers have arrived at the root (a packed
// gather feeding the broadcast). The ring visits the root's domain first,
// then the other domains in order, so only the root's hop and
// domain-to-domain hops cross the network.
func (b *builder) agbcast(ti int) {
	r := b.regions[ti]
	t := &b.mv[ti]
	elem := b.elem(ti)
	root := t.Src.Mesh.Ranks[0]
	full := layout.Box{Start: make([]int64, len(t.Src.Shape)), Size: append([]int64(nil), t.Src.Shape...)}
	rootBuf := b.placed(ir.Staging, ti, root, full)

	// Gather: each source slot once, from the root itself, a replica in the
	// root's domain, or its first replica.
	var gather []int32 // the op that completes each source slot at the root
	for _, sl := range r.SrcSlots {
		s := gatherSource(sl, root, b.tp)
		dst, direct := b.boxIn(rootBuf, sl.Box)
		if s == root {
			src, _ := b.boxIn(b.input(ti, s), sl.Box)
			if !direct {
				dst = b.boxAsBox(rootBuf, sl.Box)
				src = b.boxAsBox(b.input(ti, s), sl.Box)
			}
			gather = append(gather, b.op(ir.Copy, root, nil, src, dst))
			continue
		}
		in := b.input(ti, s)
		src := ir.Region{Buf: in, Bytes: b.s.Buffers[in].Bytes}
		if direct {
			_, recv := b.xfer(s, root, src, dst, nil, nil)
			gather = append(gather, recv)
			continue
		}
		stg := b.alloc(root, src.Bytes)
		_, recv := b.xfer(s, root, src, stg, nil, nil)
		gather = append(gather, b.op(ir.Unpack, root, []int32{recv}, stg, b.boxAsBox(rootBuf, sl.Box)))
	}

	ring := broadcastRing(t.Dst.Mesh.Ranks, root, b.tp, b.bcastRoots.Of(root))
	chunks := Chunks(full, elem, b.s.ChunkBytes)
	bufs := make([]int32, len(ring))
	for i, d := range ring {
		bufs[i] = b.placed(ir.Staging, ti, d, full)
	}
	// A keep's boxes depend on the chunk and the rank's destination slot
	// only: every copy of the tensor holds it whole, every output of a slot
	// the slot's box. They are stored once per chunk and slot, and shared
	// by the slot's replicas.
	type kept struct {
		chunk    int       // 1 + the chunk; 0: none yet
		meets    bool      // the chunk meets the slot
		src, dst ir.Region // the keep's regions, their buffers those of the first replica
	}
	keeps := make([]kept, len(r.DstSlots))
	keep := func(c, rank int, buf int32, g layout.Box, deps []int32) {
		k, _ := r.DstSlotOf(rank)
		if k < 0 {
			return
		}
		kp := &keeps[k]
		if kp.chunk != c+1 {
			kp.chunk = c + 1
			part, ok := b.intersect(g, r.DstSlots[k].Box)
			if kp.meets = ok; ok {
				kp.src = b.boxAsBox(buf, part)
				kp.dst = b.boxAsBox(b.output(ti, rank), part)
			}
		}
		if !kp.meets {
			return
		}
		src, dst := kp.src, kp.dst
		src.Buf, dst.Buf = buf, b.output(ti, rank)
		b.laneOp(b.unpackLast, ir.Copy, rank, deps, src, dst)
	}
	var one [1]int32
	var need []int32
	for c, g := range chunks {
		prev, _ := b.boxIn(rootBuf, g)
		need = need[:0]
		for k, sl := range r.SrcSlots {
			if _, ok := g.Intersect(sl.Box); ok {
				need = append(need, gather[k])
			}
		}
		from, deps := root, need
		keep(c, root, rootBuf, g, need)
		for i, d := range ring {
			dst, _ := b.boxIn(bufs[i], g)
			_, recv := b.xfer(from, d, prev, dst, deps, nil)
			one[0] = recv
			keep(c, d, bufs[i], g, one[:])
			prev, from, deps = dst, d, one[:]
		}
	}
}

// agbcastOps is the number of ops agbcast emits for tensor ti, but for
// quantize ops and a quantized tensor's spread: the gather (a copy at the
// root, else a transfer, into staging followed by an unpack where the
// slot is strided in the gathered copy), and per chunk a transfer to each
// ring rank and a keep on each rank whose destination slot it meets.
func (b *builder) agbcastOps(ti int) int64 {
	r := b.regions[ti]
	t := &b.mv[ti]
	root := t.Src.Mesh.Ranks[0]
	full := layout.Box{Start: make([]int64, len(t.Src.Shape)), Size: t.Src.Shape}
	var n int64
	for _, sl := range r.SrcSlots {
		count, _ := sl.Box.Runs(full.Size)
		switch {
		case gatherSource(sl, root, b.tp) == root:
			n++
		case count == 1:
			n += 2
		default:
			n += 3
		}
	}
	chunks := Chunks(full, b.elem(ti), b.s.ChunkBytes)
	ring := int64(len(t.Dst.Mesh.Ranks))
	if r.dstPos.Pos(root) >= 0 {
		ring-- // the ring is the destination ranks but the root
	}
	n += 2 * ring * int64(len(chunks))
	for _, sl := range r.DstSlots {
		for _, g := range chunks {
			if meets(g, sl.Box) {
				n += int64(len(sl.Ranks))
			}
		}
	}
	return n
}

package plan

import (
	"fmt"
	"sort"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
)

// NemoLegacy is the whole-model refit as NeMo-RL runs it without M2N: per
// trainer pipeline stage, an all-gather over the stage's ranks, then a
// broadcast from the stage's root to every generator rank.
const NemoLegacy = "nemo-legacy"

type legacyRoute struct{}

func (legacyRoute) name() string           { return NemoLegacy }
func (legacyRoute) gathers() bool          { return true }
func (legacyRoute) quantizesAtEntry() bool { return false }
func (legacyRoute) builder(b *builder) routeBuilder {
	return &legacyBuild{builder: b}
}
func (legacyRoute) bounder(tensors []ir.Tensor, tp *topo.Topology) routeBounder {
	return &legacyBound{tp: tp, roots: stageRoots(tensors)}
}

// legacyBuild builds the nemo-legacy route: the batch's broadcast roots,
// computed on first use.
type legacyBuild struct {
	*builder
	roots []int
}

// minOps counts the broadcast and the all-gather: each source rank
// receives every slot it lacks.
func (b *legacyBuild) minOps(ti int, _ int64) int64 {
	r := b.regions[ti]
	t := &b.mv[ti]
	elem, cb := b.elem(ti), b.s.ChunkBytes
	full := layout.Box{Start: make([]int64, len(t.Src.Shape)), Size: t.Src.Shape}
	var n int64
	// The broadcast, and the all-gather: each source rank receives
	// every slot it lacks.
	n = mulSat(2*int64(len(t.Dst.Mesh.Ranks)-1), ChunkCount(full, elem, cb))
	for _, sl := range r.SrcSlots {
		lack := int64(len(t.Src.Mesh.Ranks) - len(sl.Ranks))
		n = addSat(n, mulSat(2*lack, ChunkCount(sl.Box, elem, cb)))
	}
	return n
}

// emit builds one tensor of the nemo-legacy route.
//
//  1. All-gather: every source rank ends with the whole tensor, as NCCL's
//     ring all-gather over the source mesh (in mesh order) leaves it. Each
//     source slot travels the ring from each of its holders to the ranks
//     after it, up to the next holder, chunk by chunk, so every rank
//     receives each block it lacks once, from its predecessor. A rank that
//     holds part of the tensor copies its own block into its gathered copy
//     (an out-of-place all-gather); a rank that holds it all gathers nothing.
//  2. Broadcast: once the root (the first source rank) has finished its part
//     of the all-gather, it broadcasts the whole tensor along a ring of the
//     destination ranks ([legacyRing]), chunk by chunk; each rank keeps its
//     slice (a replicated destination receives straight into its output).
//
// Tensors of different stages have different roots and run concurrently;
// one stage's tensors follow each other on every pair of ranks.
func (b *legacyBuild) emit(ti int) {
	r := b.regions[ti]
	t := &b.mv[ti]
	elem := b.elem(ti)
	full := layout.Box{Start: make([]int64, len(t.Src.Shape)), Size: append([]int64(nil), t.Src.Shape...)}
	ring := t.Src.Mesh.Ranks
	root := ring[0]
	n := len(ring)

	// The buffer each source rank gathers into (its input when it holds the
	// whole tensor), and the ops of the root's part of the all-gather.
	hold := make([]int32, n)
	pos := make(map[int]int, n)
	var rootOps []int32
	for i, rk := range ring {
		pos[rk] = i
		s := r.SrcSlotOf(rk)
		if s >= 0 && r.SrcSlots[s].Box.Equal(full) {
			hold[i] = b.input(ti, rk)
			continue
		}
		hold[i] = b.placed(ir.Staging, ti, rk, full)
		if s < 0 {
			continue
		}
		g := r.SrcSlots[s].Box
		in := b.input(ti, rk)
		src := ir.Region{Buf: in, Bytes: b.s.Buffers[in].Bytes}
		dst, direct := b.boxIn(hold[i], g)
		if !direct {
			src, dst = b.boxAsBox(in, g), b.boxAsBox(hold[i], g)
		}
		id := b.laneOp(b.copyLast, ir.Copy, rk, nil, src, dst)
		if rk == root {
			rootOps = append(rootOps, id)
		}
	}

	// Ring segments: each holder of a slot passes it on to the ranks after
	// it, up to the next holder.
	type segment struct {
		ringSegment
		chunks []layout.Box
	}
	var segs []segment
	longest := 0
	for _, sl := range r.SrcSlots {
		var chunks []layout.Box
		for _, sg := range ringSegments(sl, pos, n) {
			if chunks == nil {
				chunks = Chunks(sl.Box, elem, b.s.ChunkBytes)
			}
			segs = append(segs, segment{sg, chunks})
			longest = max(longest, len(sg.to))
		}
	}

	// at[seg][chunk] is where the chunk is held now and the op that put it there.
	type held struct {
		rank   int
		region ir.Region
		dep    int32
	}
	at := make([][]held, len(segs))
	for si, sg := range segs {
		at[si] = make([]held, len(sg.chunks))
		holder := ring[sg.from]
		in := b.input(ti, holder)
		for c, g := range sg.chunks {
			// A chunk of a slot is contiguous in the holder's input, whose box
			// is the slot.
			reg, _ := b.boxIn(in, g)
			at[si][c] = held{holder, reg, -1}
		}
	}
	// Hop by hop around the ring, every segment's chunks at each step.
	for step := range longest {
		for si, sg := range segs {
			if step >= len(sg.to) {
				continue
			}
			p := sg.to[step]
			d := ring[p]
			for c, g := range sg.chunks {
				h := at[si][c]
				dst, direct := b.boxIn(hold[p], g)
				if !direct {
					dst = b.alloc(d, g.Elems()*elem)
				}
				send, recv := b.xfer(h.rank, d, h.region, dst, b.dep(h.dep), nil)
				if h.rank == root {
					rootOps = append(rootOps, send)
				}
				done := recv
				if !direct {
					done = b.laneOp(b.unpackLast, ir.Unpack, d, []int32{recv}, dst, b.boxAsBox(hold[p], g))
				}
				if d == root {
					rootOps = append(rootOps, recv, done)
				}
				at[si][c] = held{d, dst, recv}
			}
		}
	}

	// Broadcast from the root's gathered copy along the ring.
	bring := legacyRing(root, b.legacyRoots(), t.Dst.Mesh.Ranks, b.tp)
	chunks := Chunks(full, elem, b.s.ChunkBytes)
	bufs := make([]int32, len(bring))
	direct := make([]bool, len(bring))
	for i, d := range bring {
		if k, _ := r.DstSlotOf(d); k >= 0 && r.DstSlots[k].Box.Equal(full) {
			bufs[i], direct[i] = b.output(ti, d), true
			continue
		}
		bufs[i] = b.placed(ir.Staging, ti, d, full)
	}
	// keep copies a rank's slice out of its copy of the whole tensor, once
	// every chunk is in, as the generator's weight loader narrows the
	// broadcast tensor into its parameter.
	keep := func(rank int, buf int32, deps []int32) {
		k, _ := r.DstSlotOf(rank)
		if k < 0 {
			return
		}
		box := r.DstSlots[k].Box
		b.laneOp(b.unpackLast, ir.Copy, rank, deps, b.boxAsBox(buf, box), b.boxAsBox(b.output(ti, rank), box))
	}
	recvs := make([][]int32, len(bring)) // per ring rank, its recvs of this tensor
	for c, g := range chunks {
		// The first chunk waits for the root's all-gather; later chunks
		// follow it on the root's stream to its ring successor.
		var after []int32
		if c == 0 {
			after = rootOps
		}
		prev, _ := b.boxIn(hold[0], g)
		from, deps := root, after
		for i, d := range bring {
			dst, _ := b.boxIn(bufs[i], g)
			_, recv := b.xfer(from, d, prev, dst, deps, nil)
			if !direct[i] {
				recvs[i] = append(recvs[i], recv)
			}
			b.one[0] = recv
			prev, from, deps = dst, d, b.one[:]
		}
	}
	keep(root, hold[0], rootOps)
	for i, d := range bring {
		if !direct[i] {
			keep(d, bufs[i], recvs[i])
		}
	}
}

// count is the number of ops legacy emits for tensor ti, but for
// quantize ops and a quantized tensor's spread: each source rank's copy of
// its block into its gathered copy, the all-gather's transfers (each
// followed by an unpack where the chunk is strided in the gathered copy),
// the broadcast's transfers, and the keeps of the root and of each ring
// rank that needs less than the whole tensor.
func (b *legacyBuild) count(ti int) int64 {
	r := b.regions[ti]
	t := &b.mv[ti]
	elem := b.elem(ti)
	full := layout.Box{Start: make([]int64, len(t.Src.Shape)), Size: t.Src.Shape}
	ring := t.Src.Mesh.Ranks
	root := ring[0]
	pos := make(map[int]int, len(ring))
	var n int64
	for i, rk := range ring {
		pos[rk] = i
		if s := r.SrcSlotOf(rk); s >= 0 && !r.SrcSlots[s].Box.Equal(full) {
			n++
		}
	}
	for _, sl := range r.SrcSlots {
		var pass int64 // the ops of the slot's chunks reaching one rank
		for _, sg := range ringSegments(sl, pos, len(ring)) {
			if pass == 0 {
				for _, g := range Chunks(sl.Box, elem, b.s.ChunkBytes) {
					pass += 2
					if count, _ := g.Runs(full.Size); count != 1 {
						pass++
					}
				}
			}
			n += pass * int64(len(sg.to))
		}
	}
	if k, _ := r.DstSlotOf(root); k >= 0 {
		n++
	}
	var bring int64
	for _, d := range t.Dst.Mesh.Ranks {
		if d == root {
			continue
		}
		bring++
		if k, _ := r.DstSlotOf(d); k >= 0 && !r.DstSlots[k].Box.Equal(full) {
			n++
		}
	}
	return n + 2*bring*ChunkCount(full, elem, b.s.ChunkBytes)
}

// ringSegment is the part of the source ring one holder of a source slot
// passes the slot along in the all-gather: from the holder's ring position
// to the positions after it, in order, up to the next holder.
type ringSegment struct {
	from int
	to   []int
}

// ringSegments lists the non-empty segments of a source slot on the ring of
// n ranks whose positions pos gives; a lone holder's segment is the whole
// ring.
func ringSegments(sl Slot, pos map[int]int, n int) []ringSegment {
	holders := make([]int, 0, len(sl.Ranks))
	for _, rk := range sl.Ranks {
		holders = append(holders, pos[rk])
	}
	sort.Ints(holders)
	var out []ringSegment
	for h, p := range holders {
		next := holders[(h+1)%len(holders)]
		seg := ringSegment{from: p}
		for q := (p + 1) % n; q != next; q = (q + 1) % n {
			seg.to = append(seg.to, q)
		}
		if len(seg.to) > 0 {
			out = append(out, seg)
		}
	}
	return out
}

// legacyRoots returns the distinct roots (first source ranks) of the
// schedule's tensors, ascending, computed once.
func (b *legacyBuild) legacyRoots() []int {
	if b.roots == nil {
		b.roots = stageRoots(b.mv)
	}
	return b.roots
}

// stageRoots lists the distinct broadcast roots of the nemo-legacy route
// (each tensor's first source rank: one per trainer pipeline stage),
// ascending.
func stageRoots(tensors []ir.Tensor) []int {
	seen := map[int]bool{}
	var out []int
	for _, t := range tensors {
		if r := t.Src.Mesh.Ranks[0]; !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	sort.Ints(out)
	return out
}

// legacyRing orders the destination ranks (all but root) for root's ring
// broadcast in the nemo-legacy route. Ranks go domain by domain, so only
// the first hop and the hops between domains cross the network.
//
// Several roots broadcast at once, one per pipeline stage, each on its own
// NCCL communicator. A schedule orders the transfers of one pair of ranks
// (one stream per peer), so rings sharing a pair would queue behind each
// other; the rings of different roots therefore use different pairs: root
// number k of R starts at destination domain k mod D (the root's own domain
// first when it holds destination ranks), enters each domain of n ranks at
// rank k x n / R, and walks the domain with the k-th stride coprime to n
// (1, 3, 5, ... for n = 64). The stages' rings then enter and leave the
// domains through different GPUs, as NCCL spreads its rings over NICs, and
// share no pair; NVLink is a full crossbar, so the stride costs nothing.
func legacyRing(root int, roots []int, dst []int, tp *topo.Topology) []int {
	k := sort.SearchInts(roots, root)
	R := max(len(roots), 1)
	byDom := map[int][]int{}
	var doms []int
	for _, d := range dst {
		if d == root {
			continue
		}
		dom := tp.Domain(d)
		if _, ok := byDom[dom]; !ok {
			doms = append(doms, dom)
		}
		byDom[dom] = append(byDom[dom], d)
	}
	sort.Ints(doms)
	start := 0
	if len(doms) > 0 {
		start = k % len(doms)
	}
	if i := sort.SearchInts(doms, tp.Domain(root)); i < len(doms) && doms[i] == tp.Domain(root) {
		start = i
	}
	out := make([]int, 0, len(dst))
	for j := range doms {
		ranks := byDom[doms[(start+j)%len(doms)]]
		sort.Ints(ranks)
		n := len(ranks)
		off, stride := k*n/R%n, coprime(n, k)
		for i := range n {
			out = append(out, ranks[(off+i*stride)%n])
		}
	}
	return out
}

// coprime returns the k-th positive integer below n coprime to n (cycling
// when there are fewer), or 1 for n <= 2.
func coprime(n, k int) int {
	if n <= 2 {
		return 1
	}
	var cs []int
	for s := 1; s < n; s++ {
		if gcd(s, n) == 1 {
			cs = append(cs, s)
		}
	}
	return cs[k%len(cs)]
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// legacyBound bounds the nemo-legacy route: the port loads of every
// tensor, and the longest single tensor's all-gather then broadcast.
type legacyBound struct {
	tp       *topo.Topology
	roots    []int
	best     float64
	bestTerm string
}

func (l *legacyBound) add(t *ir.Tensor, r *Regions, move func(a, b int, bytes float64)) {
	boundLegacy(r, l.roots, l.tp, move, move)
	if c, term := legacyChain(r, l.roots, l.tp); c > l.best {
		l.best, l.bestTerm = c, fmt.Sprintf("all-gather then broadcast of %s (%s)", t.Name, term)
	}
}
func (l *legacyBound) chain() (float64, string) { return l.best, l.bestTerm }

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
	a, at := maxPort(agLoad.only(r.Src.Mesh.Ranks[0]), tp)
	b, bt := maxPort(bcLoad, tp)
	switch {
	case a == 0:
		return b, bt
	case b == 0:
		return a, at
	}
	return a + b, at + ", then " + bt
}

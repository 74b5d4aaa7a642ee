package plan

import (
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"sort"
)

// AGBcast is the legacy path of one tensor at a time: gather it whole at a
// source rank, then broadcast it along a ring of the destination ranks.
const AGBcast = "agbcast"

type agbcastRoute struct{}

func (agbcastRoute) name() string           { return AGBcast }
func (agbcastRoute) gathers() bool          { return true }
func (agbcastRoute) quantizesAtEntry() bool { return false }
func (agbcastRoute) builder(b *builder) routeBuilder {
	return &agbcastBuild{b, rootOrder{}}
}
func (agbcastRoute) bounder(_ []ir.Tensor, tp *topo.Topology) routeBounder {
	return &agbcastBound{tp, rootOrder{}}
}

// agbcastBuild builds the agbcast route: its broadcast roots, numbered in
// order of appearance, set where each ring starts.
type agbcastBuild struct {
	*builder
	roots rootOrder
}

// minOps counts the broadcast: each chunk to every destination rank but
// the root.
func (b *agbcastBuild) minOps(ti int, _ int64) int64 {
	t := &b.mv[ti]
	elem, cb := b.elem(ti), b.s.ChunkBytes
	full := layout.Box{Start: make([]int64, len(t.Src.Shape)), Size: t.Src.Shape}
	return mulSat(2*int64(len(t.Dst.Mesh.Ranks)-1), ChunkCount(full, elem, cb))
}

// agbcast is the legacy path: gather the whole tensor at a root of the
// source group (the first rank of the source mesh), then broadcast it along
// a ring of every destination rank, chunk by chunk as NCCL's ring broadcast
// pipelines it; each destination keeps its slice. A chunk's broadcast starts
// once the gathered shards it covers have arrived at the root (a packed
// gather feeding the broadcast). The ring visits the root's domain first,
// then the other domains in order, so only the root's hop and
// domain-to-domain hops cross the network.
func (b *agbcastBuild) emit(ti int) {
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

	ring := broadcastRing(t.Dst.Mesh.Ranks, root, b.tp, b.roots.Of(root))
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

// count is the number of ops agbcast emits for tensor ti, but for
// quantize ops and a quantized tensor's spread: the gather (a copy at the
// root, else a transfer, into staging followed by an unpack where the
// slot is strided in the gathered copy), and per chunk a transfer to each
// ring rank and a keep on each rank whose destination slot it meets.
func (b *agbcastBuild) count(ti int) int64 {
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

// agbcastBound bounds the agbcast route, numbering its roots as the
// builder does.
type agbcastBound struct {
	tp    *topo.Topology
	roots rootOrder
}

func (a *agbcastBound) add(_ *ir.Tensor, r *Regions, move func(a, b int, bytes float64)) {
	boundAGBcast(r, a.tp, a.roots, move)
}
func (a *agbcastBound) chain() (float64, string) { return 0, "" }

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

package plan

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/m2n-project/m2n/model/layout"
)

// Slot is one distinct non-empty box of a layout and the ranks that hold it
// (a source slot) or need it (a destination slot). Ranks are global, in mesh
// order; ranks of one slot are replicas of each other.
type Slot struct {
	Box   layout.Box
	Ranks []int
}

// Contribution is the part of one destination slot that one source slot
// supplies: the intersection of their boxes, in global tensor coordinates.
type Contribution struct {
	Box layout.Box
	Src int // index into Regions.SrcSlots
	Dst int // index into Regions.DstSlots

	// base is the source replica that supplies destination replica 0; replica i
	// is supplied by source replica (base+i) mod len(SrcSlots[Src].Ranks),
	// unless it holds the bytes itself.
	base int
}

// Regions is the exact answer to "which bytes does each destination rank
// need, and who supplies them" for one tensor. It is derived from the two
// layouts alone, so every rank that derives it gets the same value; compare
// [Regions.Digest] to check.
//
// Contributions are stored once per destination slot, not per destination
// rank: the replicas of a slot need the same bytes and differ only in their
// suppliers, which [Regions.Supplier] computes.
type Regions struct {
	Src, Dst layout.Layout
	SrcSlots []Slot
	DstSlots []Slot
	// Contribs are grouped by destination slot (ascending) and, within a slot,
	// ordered by source slot (ascending).
	Contribs []Contribution

	dstFirst []int // Contribs[dstFirst[k]:dstFirst[k+1]] belong to DstSlots[k]
	// Rank lookups: a rank's mesh position, then per position its slot
	// (-1: an empty box) and, in the destination, its replica index.
	srcPos, dstPos   *layout.RankIndex
	srcSlot, dstSlot []int32
	dstRep           []int32
}

// Elem is the element size in bytes.
func (r *Regions) Elem() int64 { return r.Src.DType.Size() }

// Bytes is the size of contribution j in bytes.
func (r *Regions) Bytes(j int) int64 { return r.Contribs[j].Box.Elems() * r.Elem() }

// SlotContribs returns the index range [lo, hi) of the contributions of
// destination slot k.
func (r *Regions) SlotContribs(k int) (lo, hi int) { return r.dstFirst[k], r.dstFirst[k+1] }

// SrcSlotOf returns the source slot a global rank holds, or -1 when the rank
// holds nothing of the tensor.
func (r *Regions) SrcSlotOf(rank int) int {
	if p := r.srcPos.Pos(rank); p >= 0 {
		return int(r.srcSlot[p])
	}
	return -1
}

// DstSlotOf returns the destination slot a global rank needs and its replica
// index in that slot, or (-1, -1) when it needs nothing.
func (r *Regions) DstSlotOf(rank int) (slot, replica int) {
	if p := r.dstPos.Pos(rank); p >= 0 && r.dstSlot[p] >= 0 {
		return int(r.dstSlot[p]), int(r.dstRep[p])
	}
	return -1, -1
}

// Supplier returns the global rank that supplies contribution j to replica i
// of its destination slot. A destination rank that holds the source slot
// itself supplies itself (a local copy); otherwise the choice rotates over the
// source replicas so that their loads stay balanced.
func (r *Regions) Supplier(j, i int) int {
	c := &r.Contribs[j]
	dst := r.DstSlots[c.Dst].Ranks[i]
	if r.SrcSlotOf(dst) == c.Src {
		return dst
	}
	reps := r.SrcSlots[c.Src].Ranks
	return reps[(c.base+i)%len(reps)]
}

// Need is one box a destination rank needs and where it comes from.
type Need struct {
	Contrib  int        // index into Regions.Contribs
	Box      layout.Box // global tensor coordinates
	Supplier int        // global rank that supplies it
	Local    bool       // the supplier is the rank itself: a local copy
}

// Needs lists what a global rank needs, ordered by source slot. It is empty
// for a rank outside the destination mesh or holding an empty shard.
func (r *Regions) Needs(rank int) []Need {
	k, i := r.DstSlotOf(rank)
	if k < 0 {
		return nil
	}
	lo, hi := r.SlotContribs(k)
	out := make([]Need, 0, hi-lo)
	for j := lo; j < hi; j++ {
		s := r.Supplier(j, i)
		out = append(out, Need{Contrib: j, Box: r.Contribs[j].Box, Supplier: s, Local: s == rank})
	}
	return out
}

// Derive computes the regions for resharding a tensor from layout src to
// layout dst. The layouts must describe the same global tensor (shape and
// dtype); their meshes may be disjoint or overlap.
//
// Cost: linear in the mesh sizes plus the number of contributions (one per
// overlapping pair of distinct source and destination boxes); it never
// visits every pair of ranks.
//
// A pair of layouts that meet in more than [DefaultMaxOps] contributions is
// refused with an [*OpsLimitError] before any is built: every contribution
// is at least one op of any schedule.
func Derive(src, dst layout.Layout) (*Regions, error) {
	return derive(src, dst, DefaultMaxOps)
}

// DeriveLimit is Derive with another limit on the contributions (the
// Options.MaxOps of the schedules to come); limit <= 0 means DefaultMaxOps.
func DeriveLimit(src, dst layout.Layout, limit int64) (*Regions, error) {
	if limit <= 0 {
		limit = DefaultMaxOps
	}
	return derive(src, dst, limit)
}

// derive is Derive with a limit on the number of contributions.
func derive(src, dst layout.Layout, limit int64) (*Regions, error) {
	if err := src.Validate(); err != nil {
		return nil, fmt.Errorf("source layout: %w", err)
	}
	if err := dst.Validate(); err != nil {
		return nil, fmt.Errorf("destination layout: %w", err)
	}
	if !slices.Equal(src.Shape, dst.Shape) {
		return nil, fmt.Errorf("source shape %v and destination shape %v differ", src.Shape, dst.Shape)
	}
	if src.DType != dst.DType {
		return nil, fmt.Errorf("source dtype %v and destination dtype %v differ", src.DType, dst.DType)
	}
	r := &Regions{Src: src, Dst: dst}
	srcParts, srcIDs, srcSlots := slots(src)
	_, _, dstSlots := slots(dst)
	r.SrcSlots, r.DstSlots = srcSlots, dstSlots
	r.srcPos, r.dstPos = layout.NewRankIndex(src.Mesh.Ranks), layout.NewRankIndex(dst.Mesh.Ranks)
	r.srcSlot = make([]int32, len(src.Mesh.Ranks))
	for i := range r.srcSlot {
		r.srcSlot[i] = -1
	}
	for s, sl := range srcSlots {
		for _, rk := range sl.Ranks {
			r.srcSlot[r.srcPos.Pos(rk)] = int32(s)
		}
	}
	r.dstSlot, r.dstRep = make([]int32, len(dst.Mesh.Ranks)), make([]int32, len(dst.Mesh.Ranks))
	for i := range r.dstSlot {
		r.dstSlot[i] = -1
	}
	for k, sl := range dstSlots {
		for i, rk := range sl.Ranks {
			p := r.dstPos.Pos(rk)
			r.dstSlot[p], r.dstRep[p] = int32(k), int32(i)
		}
	}

	nd := len(src.Shape)
	// Non-empty source intervals per dim, with their partition index.
	type ivx struct {
		layout.Interval
		idx int
	}
	nonEmpty := make([][]ivx, nd)
	radix := make([]int, nd)
	for d := range nd {
		radix[d] = len(srcParts[d].Intervals)
		for i, iv := range srcParts[d].Intervals {
			if iv.Size > 0 {
				nonEmpty[d] = append(nonEmpty[d], ivx{iv, i})
			}
		}
	}
	// overlaps returns the index range in nonEmpty[d] meeting [a, b).
	overlaps := func(d int, a, b int64) (int, int) {
		ne := nonEmpty[d]
		lo := sort.Search(len(ne), func(i int) bool { return ne[i].Start+ne[i].Size > a })
		hi := lo
		for hi < len(ne) && ne[hi].Start < b {
			hi++
		}
		return lo, hi
	}

	// First pass: count contributions, to allocate their boxes in one block.
	var total int64
	ranges := make([][2]int, len(dstSlots)*nd)
	for k, sl := range dstSlots {
		n := int64(1)
		for d := range nd {
			lo, hi := overlaps(d, sl.Box.Start[d], sl.Box.Start[d]+sl.Box.Size[d])
			ranges[k*nd+d] = [2]int{lo, hi}
			n = mulSat(n, int64(hi-lo))
		}
		total = addSat(total, n)
	}
	if total > limit {
		return nil, &OpsLimitError{Ops: total, Limit: limit}
	}
	r.Contribs = make([]Contribution, 0, total)
	r.dstFirst = make([]int, len(dstSlots)+1)
	backing := make([]int64, 2*int64(nd)*total)
	cur := make([]int, nd)
	for k, sl := range dstSlots {
		r.dstFirst[k] = len(r.Contribs)
		rg := ranges[k*nd : (k+1)*nd]
		empty := false
		for d := range nd {
			cur[d] = rg[d][0]
			if rg[d][0] == rg[d][1] {
				empty = true
			}
		}
		for !empty {
			b := layout.Box{Start: backing[:nd:nd], Size: backing[nd : 2*nd : 2*nd]}
			backing = backing[2*nd:]
			id := 0
			for d := range nd {
				iv := nonEmpty[d][cur[d]]
				lo := max(iv.Start, sl.Box.Start[d])
				hi := min(iv.Start+iv.Size, sl.Box.Start[d]+sl.Box.Size[d])
				b.Start[d], b.Size[d] = lo, hi-lo
				id = id*radix[d] + iv.idx
			}
			r.Contribs = append(r.Contribs, Contribution{Box: b, Src: srcIDs[id], Dst: k})
			// Advance the mixed-radix counter, last dim fastest.
			d := nd - 1
			for ; d >= 0; d-- {
				cur[d]++
				if cur[d] < rg[d][1] {
					break
				}
				cur[d] = rg[d][0]
			}
			empty = d < 0
		}
	}
	r.dstFirst[len(dstSlots)] = len(r.Contribs)
	r.balance()
	return r, nil
}

// balance chooses, for each contribution from a replicated source slot, the
// source replica that serves destination replica 0, greedily by bytes so the
// replicas' egress stays even. Destination replica i is then served by the
// next replica in turn, so the rotation spreads a replicated destination too.
func (r *Regions) balance() {
	load := make([][]int64, len(r.SrcSlots))
	for j := range r.Contribs {
		c := &r.Contribs[j]
		m := len(r.SrcSlots[c.Src].Ranks)
		if m == 1 {
			continue
		}
		if load[c.Src] == nil {
			load[c.Src] = make([]int64, m)
		}
		l := load[c.Src]
		best := 0
		for q := 1; q < m; q++ {
			if l[q] < l[best] {
				best = q
			}
		}
		c.base = best
		rho := len(r.DstSlots[c.Dst].Ranks)
		b := r.Bytes(j)
		for i := 0; i < min(rho, m); i++ {
			l[(best+i)%m] += b * int64((rho-i+m-1)/m)
		}
	}
}

// slots splits a layout's mesh into its distinct non-empty boxes. It returns
// the per-dim partitions, a map from slot id (mixed radix over dims of
// partition indices, dim 0 most significant) to index in the returned slots
// (-1 where the box is empty), and the slots in ascending id order.
func slots(l layout.Layout) ([]layout.DimPartition, []int, []Slot) {
	nd := len(l.Shape)
	parts := make([]layout.DimPartition, nd)
	nIDs := 1
	for d := range nd {
		parts[d] = l.Partition(d)
		nIDs *= len(parts[d].Intervals)
	}
	// Each position's slot id, then the ranks of every id carved from one
	// array, in mesh order.
	idOf := make([]int, len(l.Mesh.Ranks))
	count := make([]int, nIDs+1)
	c := make([]int, len(l.Mesh.Shape))
	for pos := range l.Mesh.Ranks {
		l.Mesh.Coord(pos, c)
		id := 0
		for d := range nd {
			id = id*len(parts[d].Intervals) + parts[d].Index(l.Mesh.Shape, c)
		}
		idOf[pos] = id
		count[id+1]++
	}
	for id := range nIDs {
		count[id+1] += count[id]
	}
	all := make([]int, len(l.Mesh.Ranks))
	ranksByID := make([][]int, nIDs)
	for id := range nIDs {
		ranksByID[id] = all[count[id]:count[id]:count[id+1]]
	}
	for pos, rk := range l.Mesh.Ranks {
		ranksByID[idOf[pos]] = append(ranksByID[idOf[pos]], rk)
	}
	ids := make([]int, nIDs)
	var out []Slot
	idx := make([]int, nd)
	for id := range nIDs {
		ids[id] = -1
		// Decode the id into per-dim partition indices.
		v := id
		for d := nd - 1; d >= 0; d-- {
			n := len(parts[d].Intervals)
			idx[d] = v % n
			v /= n
		}
		b := layout.NewBox(nd)
		empty := false
		for d := range nd {
			iv := parts[d].Intervals[idx[d]]
			b.Start[d], b.Size[d] = iv.Start, iv.Size
			if iv.Size == 0 {
				empty = true
			}
		}
		if empty || len(ranksByID[id]) == 0 {
			continue
		}
		ids[id] = len(out)
		out = append(out, Slot{Box: b, Ranks: ranksByID[id]})
	}
	return parts, ids, out
}

// Digest is a SHA-256 over a canonical encoding of the layouts and every
// contribution with its supplier choice. Equal inputs give equal digests on
// every machine, so ranks can compare digests to confirm they derived the
// same plan without exchanging it.
func (r *Regions) Digest() [32]byte {
	h := sha256.New()
	var buf [8]byte
	put := func(v int64) {
		binary.LittleEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	h.Write([]byte("m2n.regions/v1"))
	for _, l := range []layout.Layout{r.Src, r.Dst} {
		put(int64(len(l.Shape)))
		for _, s := range l.Shape {
			put(s)
		}
		put(int64(l.DType))
		put(int64(len(l.Mesh.Shape)))
		for _, s := range l.Mesh.Shape {
			put(int64(s))
		}
		for _, rk := range l.Mesh.Ranks {
			put(int64(rk))
		}
		for _, p := range l.Placements {
			if p.Shard {
				put(int64(p.Dim))
			} else {
				put(-1)
			}
		}
	}
	put(int64(len(r.Contribs)))
	for _, c := range r.Contribs {
		for d := range c.Box.Size {
			put(c.Box.Start[d])
			put(c.Box.Size[d])
		}
		put(int64(c.Src))
		put(int64(c.Dst))
		put(int64(c.base))
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

package plan

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/units"
)

// Memory-bounded staging (Options.StagingCapBytes).
//
// Every staging buffer of a capped schedule lives in its rank's staging
// arena ([ir.Buffer.InArena]): one raw buffer per rank at offset 0 for
// packed and received chunks, and the placed copies at offsets of their
// own. The builder emits ops in waves: a wave is a set of chunks of one
// tensor's deliveries (flat, hierarchical) or one whole tensor (agbcast,
// nemo-legacy), and every op that reads a wave's staging is in the wave.
// Within a wave, staging is allocated afresh per rank, so it must fit in
// the cap; when the wave is done, its staging is placed in the arena (after
// the previous wave's, or from offset 0 when that does not fit), and each op
// that writes staging depends on the ops that last used the bytes it
// overwrites. Staging is thus reused once consumed, at the cost of the
// ordering those dependencies add.

// capper allocates staging under a cap.
type capper struct {
	limit int64
	op0   int           // the wave's first op
	buf0  int           // the wave's first buffer
	used  map[int]int64 // per rank, the wave's staging so far (offsets relative to the wave)
	inPl  map[int]int64 // per rank, the wave's placed staging
	top   map[int]int64 // per rank, where the last wave ended in the arena
	occ   map[int]*occupancy
	base  map[int]int64 // scratch: per rank, where the wave goes
	fail  *capFailure
	old   []int32 // scratch: the wave's dependency lists
	extra []int32 // scratch: dependencies added to one op
}

// occupancy is, per rank, the ops that use the current contents of the
// arena: (byte range, op) sorted by start, with reach[k] the largest end
// among the first k+1.
type occupancy struct {
	uses  []use
	reach []int64
}

type use struct {
	lo, hi int64
	op     int32
}

// capFailure is the largest staging one indivisible unit needs.
type capFailure struct {
	need, placed int64
	rank, tensor int
	chunk        bool // the unit is one chunk, not one tensor
}

func newCapper(limit int64) *capper {
	return &capper{limit: limit, used: map[int]int64{}, inPl: map[int]int64{}, top: map[int]int64{},
		occ: map[int]*occupancy{}, base: map[int]int64{}}
}

// take reserves n bytes of rank's staging in the current wave, returning
// their offset relative to the wave.
func (c *capper) take(rank int, n int64, placed bool) int64 {
	off := c.used[rank]
	c.used[rank] += n
	if placed {
		c.inPl[rank] += n
	}
	return off
}

// failed records a unit that needs more than the cap, keeping the largest.
func (c *capper) failed(f capFailure) {
	if c.fail == nil || f.need > c.fail.need {
		c.fail = &f
	}
}

// StagingCapError is the error of a staging cap too small for a route: Need
// is the least cap that would work, which the unit What (one chunk, or a
// tensor's placed copies) needs on Rank.
type StagingCapError struct {
	Cap, Need int64
	Route     string
	Rank      int
	What      string
}

func (e *StagingCapError) Error() string {
	return fmt.Sprintf("staging cap %s: route %s needs at least %s on rank %d (%s)",
		units.Bytes(e.Cap).Human(), e.Route, units.Bytes(e.Need).Human(), e.Rank, e.What)
}

// capErr is the cap's error, naming the least cap that would work.
func (b *builder) capErr() error {
	f := b.cap.fail
	if f == nil {
		return nil
	}
	t := &b.s.Tensors[f.tensor]
	what := "one chunk of tensor " + t.Name
	if !f.chunk {
		tb := layoutBytes(t)
		switch copies := f.placed / max(tb, 1); {
		case f.placed == 0:
			what = "the staged chunks of tensor " + t.Name
		case copies <= 1:
			what = "one placed copy of tensor " + t.Name
		default:
			what = fmt.Sprintf("%d placed copies of tensor %s", copies, t.Name)
		}
		if f.placed > 0 && f.need > f.placed {
			what += " and " + units.Bytes(f.need-f.placed).Human() + " of staged chunks"
		}
	}
	return &StagingCapError{Cap: b.cap.limit, Need: f.need, Route: b.s.Route, Rank: f.rank, What: what}
}

func layoutBytes(t *ir.Tensor) int64 {
	n := t.Src.DType.Size()
	for _, d := range t.Src.Shape {
		n *= d
	}
	return n
}

// wave emits f's ops as one wave when the schedule is capped.
func (b *builder) wave(ti int, f func(int)) {
	if b.cap == nil {
		f(ti)
		return
	}
	b.waveBegin()
	f(ti)
	b.waveEnd(ti, false)
}

func (b *builder) waveBegin() {
	c := b.cap
	c.op0, c.buf0 = len(b.s.Ops), len(b.s.Buffers)
	clear(c.used)
	clear(c.inPl)
}

// waveEnd places the wave's staging in the arenas and makes each op that
// overwrites staging depend on the last users of those bytes.
func (b *builder) waveEnd(ti int, chunk bool) {
	c, s := b.cap, b.s
	ranks := make([]int, 0, len(c.used))
	for r, n := range c.used {
		if n > 0 {
			ranks = append(ranks, r)
		}
	}
	slices.Sort(ranks)
	for _, r := range ranks {
		if n := c.used[r]; n > c.limit {
			c.failed(capFailure{need: n, placed: c.inPl[r], rank: r, tensor: ti, chunk: chunk})
		}
	}
	if c.fail != nil {
		return // the schedule is not returned
	}
	for _, r := range ranks {
		need := c.used[r]
		base := c.top[r]
		if base+need > c.limit {
			base = 0
		}
		c.base[r], c.top[r] = base, base+need
	}
	// Place: raw regions and placed buffers move by their rank's base.
	relocate := func(rg *ir.Region) {
		buf := &s.Buffers[rg.Buf]
		if !buf.InArena || buf.Placed() {
			return
		}
		rg.Offset += c.base[buf.Rank]
		buf.Bytes = max(buf.Bytes, rg.Offset+rg.Bytes)
	}
	for i := c.op0; i < len(s.Ops); i++ {
		op := &s.Ops[i]
		if op.Kind != ir.Recv {
			relocate(&op.Src)
		}
		if op.Kind != ir.Send {
			relocate(&op.Dst)
		}
	}
	for i := c.buf0; i < len(s.Buffers); i++ {
		if buf := &s.Buffers[i]; buf.InArena && buf.Placed() {
			buf.ArenaOffset += c.base[buf.Rank]
		}
	}
	if c.op0 == len(s.Ops) {
		return
	}
	// Dependencies: rewrite the wave's lists, the tail of the pool, adding
	// the last users of every byte an op overwrites.
	start := s.Ops[c.op0].DepOff
	c.old = append(c.old[:0], s.DepPool[start:]...)
	s.DepPool = s.DepPool[:start]
	for i := c.op0; i < len(s.Ops); i++ {
		op := &s.Ops[i]
		deps := c.old[op.DepOff-start : op.DepOff-start+op.DepLen]
		c.extra = c.extra[:0]
		if op.Kind != ir.Send {
			if lo, hi, ok := b.arenaSpan(op.Dst); ok {
				if o := c.occ[int(op.Rank)]; o != nil {
					c.extra = o.users(lo, hi, c.extra)
				}
			}
		}
		op.DepOff = int32(len(s.DepPool))
		if len(c.extra) == 0 {
			s.DepPool = append(s.DepPool, deps...)
			continue
		}
		c.extra = append(c.extra, deps...)
		slices.Sort(c.extra)
		c.extra = slices.Compact(c.extra)
		op.DepLen = int32(len(c.extra))
		s.DepPool = append(s.DepPool, c.extra...)
	}
	// The wave's uses replace the old ones of the bytes it wrote.
	waveUses := map[int][]use{}
	written := map[int][]use{}
	for i := c.op0; i < len(s.Ops); i++ {
		op := &s.Ops[i]
		r := int(op.Rank)
		if op.Kind != ir.Recv {
			if lo, hi, ok := b.arenaSpan(op.Src); ok {
				waveUses[r] = append(waveUses[r], use{lo, hi, int32(i)})
			}
		}
		if op.Kind != ir.Send {
			if lo, hi, ok := b.arenaSpan(op.Dst); ok {
				waveUses[r] = append(waveUses[r], use{lo, hi, int32(i)})
				// What it writes exactly: a box's span has holes.
				if !op.Dst.IsBox() {
					written[r] = append(written[r], use{lo, hi, int32(i)})
					continue
				}
				buf := &s.Buffers[op.Dst.Buf]
				elem := b.elem(buf.Tensor)
				s.Box(op.Dst).ForEachRun(buf.Box.Size, func(first, n int64) {
					o := buf.ArenaOffset + first*elem
					written[r] = append(written[r], use{o, o + n*elem, int32(i)})
				})
			}
		}
	}
	for _, r := range ranks {
		o := c.occ[r]
		if o == nil {
			o = &occupancy{}
			c.occ[r] = o
		}
		o.replace(written[r], waveUses[r])
	}
}

// arenaSpan returns the arena bytes a region of an arena buffer covers (for
// a box, from its first byte to its last).
func (b *builder) arenaSpan(rg ir.Region) (lo, hi int64, ok bool) {
	buf := &b.s.Buffers[rg.Buf]
	if !buf.InArena {
		return 0, 0, false
	}
	if !rg.IsBox() {
		return buf.ArenaOffset + rg.Offset, buf.ArenaOffset + rg.Offset + rg.Bytes, true
	}
	box, elem := b.s.Box(rg), b.elem(buf.Tensor)
	var first, last int64
	for d, n := range buf.Box.Size {
		first = first*n + box.Start[d]
		last = last*n + box.Start[d] + box.Size[d] - 1
	}
	return buf.ArenaOffset + first*elem, buf.ArenaOffset + (last+1)*elem, true
}

// users appends the ops using any byte of [lo, hi).
func (o *occupancy) users(lo, hi int64, out []int32) []int32 {
	k := sort.Search(len(o.uses), func(i int) bool { return o.uses[i].lo >= hi })
	for j := k - 1; j >= 0 && o.reach[j] > lo; j-- {
		if o.uses[j].hi > lo {
			out = append(out, o.uses[j].op)
		}
	}
	return out
}

// replace drops the uses of the bytes in written and adds uses. Only the
// uses that reach into the window the new ones span are touched.
func (o *occupancy) replace(written, uses []use) {
	if len(uses) == 0 {
		return
	}
	slices.SortFunc(written, func(a, b use) int { return cmp.Compare(a.lo, b.lo) })
	// Merge written into disjoint ranges.
	var un []use
	for _, w := range written {
		if n := len(un); n > 0 && w.lo <= un[n-1].hi {
			un[n-1].hi = max(un[n-1].hi, w.hi)
			continue
		}
		un = append(un, w)
	}
	wlo, whi := uses[0].lo, uses[0].hi
	for _, u := range uses {
		wlo, whi = min(wlo, u.lo), max(whi, u.hi)
	}
	k1 := sort.Search(len(o.uses), func(i int) bool { return o.uses[i].lo >= whi })
	k0 := k1 // uses[:k0] end by wlo
	for k0 > 0 && o.reach[k0-1] > wlo {
		k0--
	}
	mid := slices.Clone(uses)
	var head []use
	for _, u := range o.uses[k0:k1] {
		if u.hi <= wlo {
			head = append(head, u)
			continue
		}
		k := sort.Search(len(un), func(i int) bool { return un[i].hi > u.lo })
		at := u.lo
		for ; k < len(un) && un[k].lo < u.hi; k++ {
			if un[k].lo > at {
				mid = append(mid, use{at, un[k].lo, u.op})
			}
			at = un[k].hi
		}
		if at < u.hi {
			mid = append(mid, use{at, u.hi, u.op})
		}
	}
	byLo := func(a, b use) int { return cmp.Compare(a.lo, b.lo) }
	slices.SortStableFunc(mid, byLo)
	// head and mid are sorted and start before whi; uses[k1:] start after.
	merged := make([]use, 0, k0+len(head)+len(mid)+len(o.uses)-k1)
	merged = append(merged, o.uses[:k0]...)
	i, j := 0, 0
	for i < len(head) || j < len(mid) {
		if j == len(mid) || (i < len(head) && head[i].lo <= mid[j].lo) {
			merged = append(merged, head[i])
			i++
		} else {
			merged = append(merged, mid[j])
			j++
		}
	}
	merged = append(merged, o.uses[k1:]...)
	o.uses = merged
	o.reach = o.reach[:0]
	var m int64
	for _, u := range merged {
		m = max(m, u.hi)
		o.reach = append(o.reach, m)
	}
}

package ir

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/m2n-project/m2n/model/layout"
)

// seg is part of the content of a byte range: the elements of a global box
// of a tensor, in row-major order, in dtype dt (a quantized tensor's
// source dtype, or its fp8 destination dtype once quantized).
type seg struct {
	tensor int
	box    layout.Box
	dt     layout.DType
}

func (v *validator) segBytes(g seg) int64 { return g.box.Elems() * g.dt.Size() }

// writes calls f with each region op i writes: a recv's, copy's, pack's or
// unpack's dst; a quantize's dst and scale region; nothing for a send.
func (v *validator) writesOf(i int32, f func(r Region)) {
	op := &v.s.Ops[i]
	switch op.Kind {
	case Send:
	case Quantize:
		f(op.Dst)
		f(v.s.QuantScale[i])
	default:
		f(op.Dst)
	}
}

// dataflow checks, op by op in a topological order, where every byte comes
// from.
//
// Inputs, outputs and staging that no op writes twice are static: all their
// writes are known up front as sorted spans. Staging in an arena, and
// staging whose writes overlap, is dynamic: each space (a rank's arena, or
// one buffer) keeps the generation of every byte (the op that wrote it last,
// through which buffer, and the ops that read it since), and a new writer
// must happen after every op that read or wrote the generation it replaces.
func (v *validator) dataflow() error {
	s := v.s
	v.spaceOf = make([]int32, len(s.Buffers))
	arenas := map[int]int32{} // rank -> its arena's space
	for i := range s.Buffers {
		v.spaceOf[i] = -1
		if b := &s.Buffers[i]; b.InArena {
			sp, ok := arenas[b.Rank]
			if !ok {
				sp = int32(len(v.spaces))
				v.spaces = append(v.spaces, space{})
				arenas[b.Rank] = sp
			}
			v.spaceOf[i] = sp
		}
	}
	// A static placed buffer whose every write is a box (a byte range
	// forming one counts), and whose writes are mostly strided (four runs a
	// write or more), keeps its writes as boxes: one entry a write instead
	// of one a run. Other static buffers keep every write as byte spans of
	// the buffer (count them first, so each buffer's list is carved from
	// one allocation).
	v.boxw = make([][]boxWrite, len(s.Buffers))
	boxed := make([]bool, len(s.Buffers))
	nw := make([]int64, len(s.Buffers))
	count := make([]int, len(s.Buffers)+1) // runs per static buffer
	for i := range s.Buffers {
		boxed[i] = v.spaceOf[i] < 0 && s.Buffers[i].Placed() && !spansOnly
	}
	var scratch layout.BoxArena
	for i := range int32(len(s.Ops)) {
		v.writesOf(i, func(r Region) {
			if v.spaceOf[r.Buf] >= 0 {
				return
			}
			nw[r.Buf]++
			if !r.IsBox() {
				count[r.Buf+1]++
				if boxed[r.Buf] {
					scratch.Reset()
					if _, ok := v.localBoxIn(&scratch, r); !ok {
						boxed[r.Buf] = false
					}
				}
				return
			}
			n, _ := s.Box(r).Runs(s.Buffers[r.Buf].Box.Size)
			count[r.Buf+1] += int(n)
		})
	}
	for i := range boxed {
		boxed[i] = boxed[i] && int64(count[i+1]) >= 4*nw[i]
		if boxed[i] {
			count[i+1] = 0
		}
	}
	for i := range int32(len(s.Ops)) {
		v.writesOf(i, func(r Region) {
			if boxed[r.Buf] {
				box, _ := v.localBox(r)
				v.boxw[r.Buf] = append(v.boxw[r.Buf], boxWrite{box: box, r: r, op: i})
			}
		})
	}
	for b := range s.Buffers {
		count[b+1] += count[b]
	}
	all := make([]span, count[len(s.Buffers)])
	writes := make([][]span, len(s.Buffers))
	for b := range writes {
		writes[b] = all[count[b]:count[b]:count[b+1]]
	}
	for i := range int32(len(s.Ops)) {
		v.writesOf(i, func(r Region) {
			if v.spaceOf[r.Buf] < 0 && !boxed[r.Buf] {
				v.runs(&s.Buffers[r.Buf], r, func(lo, hi int64) {
					writes[r.Buf] = append(writes[r.Buf], span{lo, hi, i})
				})
			}
		})
	}
	v.writes = writes
	v.reach = make([][]int64, len(s.Buffers))
	for bi := range s.Buffers {
		if boxed[bi] && !v.boxesDisjointCover(bi) {
			// Something to report, or a staging buffer written twice:
			// the spans' check says which, as it always has.
			writes[bi] = v.spansOf(bi)
			v.boxw[bi], v.reach[bi] = nil, nil
		}
		if v.boxw[bi] != nil {
			continue
		}
		ws := writes[bi]
		sortSpans(ws)
		b := &s.Buffers[bi]
		for k := 1; k < len(ws); k++ {
			if ws[k].lo < ws[k-1].hi {
				if b.Kind == Staging { // rewritten: track its generations
					v.spaceOf[bi] = int32(len(v.spaces))
					v.spaces = append(v.spaces, space{})
					writes[bi] = nil
					break
				}
				return v.opErr(ws[k].op, "writes bytes [%d, %d) of buffer %d (%s, rank %d) that op %d also writes",
					ws[k].lo, min(ws[k].hi, ws[k-1].hi), bi, b.Kind, b.Rank, ws[k-1].op)
			}
		}
		if b.Kind == Output {
			var at int64
			for _, w := range ws {
				if w.lo != at {
					break
				}
				at = w.hi
			}
			if at != b.Bytes {
				return fmt.Errorf("buffer %d (output of %s on rank %d): bytes from %d on are never written", bi, s.Tensors[b.Tensor].Name, b.Rank, at)
			}
		}
	}
	v.content = map[int32][]seg{}
	v.stamp = make([]int32, len(s.Ops))
	if len(v.spaces) > 0 {
		v.memo = make([]int32, len(s.Ops))
		v.seen = make([]int32, len(s.Ops))
	}
	step := func(i int32) error {
		v.tmp.Reset()
		op := &s.Ops[i]
		switch op.Kind {
		case Copy, Pack, Unpack:
			c, err := v.read(i, op.Src, v.arenaFor(op.Dst))
			if err != nil {
				return err
			}
			return v.write(i, op.Dst, c)
		case Quantize:
			return v.quantize(i)
		case Send, Recv:
			snd, rcv := op.Match, i
			if op.Kind == Send {
				snd, rcv = i, op.Match
			}
			c, err := v.read(snd, s.Ops[snd].Src, v.arenaFor(s.Ops[rcv].Dst))
			if err != nil {
				return err
			}
			return v.write(rcv, s.Ops[rcv].Dst, c)
		}
		return nil
	}
	// Visit the nodes of the graph with each send/recv pair merged (a
	// transfer at its smaller ID) in topological order: the ID order when it
	// is one, else the order acyclic found.
	if v.order == nil {
		for i := range int32(len(s.Ops)) {
			if v.node[i] == i {
				if err := step(i); err != nil {
					return err
				}
			}
		}
		return nil
	}
	seq := make([]int32, 0, len(s.Ops))
	for i := range int32(len(s.Ops)) {
		if v.node[i] == i {
			seq = append(seq, i)
		}
	}
	slices.SortFunc(seq, func(a, b int32) int { return cmp.Compare(v.order[a], v.order[b]) })
	for _, i := range seq {
		if err := step(i); err != nil {
			return err
		}
	}
	return nil
}

// space is the memory of a rank's staging arena, or of one staging buffer
// written more than once: the generation of every written byte, sorted.
type space struct{ gens []gen }

// gen is a run of bytes of a space as its last writer left them.
type gen struct {
	lo, hi int64  // the bytes, in the space
	org    int64  // where the writer's region starts in the space
	w      int32  // the writer
	buf    int32  // the buffer it wrote through
	rd     []read // the reads of these bytes since
}

// read is an op that read the bytes [lo, hi) of a space.
type read struct {
	lo, hi int64
	x      int32
}

// within returns the reads of rd that touch [lo, hi), in a new slice.
func within(rd []read, lo, hi int64) []read {
	var out []read
	for _, r := range rd {
		if r.lo < hi && r.hi > lo {
			out = append(out, r)
		}
	}
	return out
}

// base is where a buffer's byte 0 lies in its space.
func (v *validator) base(buf int32) int64 { return v.s.Buffers[buf].Base() }

// span returns the bytes of a region's buffer from its first to its last
// (for a byte range, the range).
func (v *validator) span(r Region) (lo, hi int64) {
	if !r.IsBox() {
		return r.Offset, r.Offset + r.Bytes
	}
	b := &v.s.Buffers[r.Buf]
	box, elem := v.s.Box(r), v.s.BufElem(r.Buf)
	var first, last int64
	for d, n := range b.Box.Size {
		first = first*n + box.Start[d]
		last = last*n + box.Start[d] + box.Size[d] - 1
	}
	return first * elem, (last + 1) * elem
}

// checkOverwrite checks that every op that read or wrote the current
// contents of bytes [a, z) of buffer buf happens before op w.
func (v *validator) checkOverwrite(w, buf int32, a, z int64) error {
	sp := &v.spaces[v.spaceOf[buf]]
	base := v.base(buf)
	gs := sp.gens
	k := sort.Search(len(gs), func(i int) bool { return gs[i].hi > a+base })
	for ; k < len(gs) && gs[k].lo < z+base; k++ {
		g := &gs[k]
		checked := false
		for _, rd := range g.rd {
			if rd.lo >= z+base || rd.hi <= a+base {
				continue
			}
			x := rd.x
			if x == w {
				return v.opErr(w, "reads and writes bytes [%d, %d) of buffer %d", max(a+base, rd.lo)-base, min(z+base, rd.hi)-base, buf)
			}
			if v.memo[x] != w+1 {
				if !v.before(x, w) {
					o := &v.s.Ops[x]
					return v.opErr(w, "overwrites bytes [%d, %d) of buffer %d (staging, rank %d) that op %d (%s on rank %d) reads, which does not happen before it",
						max(a+base, rd.lo)-base, min(z+base, rd.hi)-base, buf, v.s.Buffers[buf].Rank, x, o.Kind, o.Rank)
				}
				v.memo[x] = w + 1
			}
			checked = true // and so g.w happens before w too
		}
		if !checked && !v.before(g.w, w) {
			o := &v.s.Ops[g.w]
			return v.opErr(w, "overwrites bytes [%d, %d) of buffer %d (staging, rank %d) that op %d (%s on rank %d) writes, which does not happen before it",
				max(a+base, g.lo)-base, min(z+base, g.hi)-base, buf, v.s.Buffers[buf].Rank, g.w, o.Kind, o.Rank)
		}
	}
	return nil
}

// overwrite records that op w wrote bytes [a, z) of buffer buf, whose
// region starts at byte org.
func (v *validator) overwrite(w, buf int32, a, z, org int64) {
	sp := &v.spaces[v.spaceOf[buf]]
	base := v.base(buf)
	a, z, org = a+base, z+base, org+base
	gs := sp.gens
	k0 := sort.Search(len(gs), func(i int) bool { return gs[i].hi > a })
	k1 := k0
	for k1 < len(gs) && gs[k1].lo < z {
		k1++
	}
	var repl [3]gen
	n := 0
	if k0 < k1 && gs[k0].lo < a {
		l := gs[k0]
		l.hi, l.rd = a, within(l.rd, l.lo, a)
		repl[n], n = l, n+1
	}
	repl[n], n = gen{lo: a, hi: z, org: org, w: w, buf: buf}, n+1
	if k0 < k1 && gs[k1-1].hi > z {
		r := gs[k1-1]
		r.lo, r.rd = z, within(r.rd, z, r.hi)
		repl[n], n = r, n+1
	}
	sp.gens = slices.Replace(gs, k0, k1, repl[:n]...)
}

// checkGens checks that the bytes [lo, hi) of buffer buf hold contents op
// x may read: written through buf, by ops that happen before x.
func (v *validator) checkGens(x, buf int32, lo, hi int64) error {
	base := v.base(buf)
	gs := v.spaces[v.spaceOf[buf]].gens
	k := sort.Search(len(gs), func(i int) bool { return gs[i].hi > lo+base })
	at := lo + base
	for ; k < len(gs) && gs[k].lo < hi+base; k++ {
		g := &gs[k]
		if g.lo > at {
			break
		}
		if g.buf != buf {
			return v.opErr(x, "reads bytes [%d, %d) of buffer %d that op %d last wrote through buffer %d", max(at, g.lo)-base, min(hi+base, g.hi)-base, buf, g.w, g.buf)
		}
		if v.seen[g.w] != x+1 {
			if !v.before(g.w, x) {
				w := &v.s.Ops[g.w]
				return v.opErr(x, "reads bytes [%d, %d) of buffer %d written by op %d (%s on rank %d), which does not happen before it", max(at, g.lo)-base, min(hi+base, g.hi)-base, buf, g.w, w.Kind, w.Rank)
			}
			v.seen[g.w] = x + 1
		}
		at = g.hi
	}
	if at < hi+base {
		return v.opErr(x, "reads bytes [%d, %d) of buffer %d that nothing writes", at-base, hi, buf)
	}
	return nil
}

// noteRead records that op x read the bytes [lo, hi) of buffer buf.
func (v *validator) noteRead(x, buf int32, lo, hi int64) {
	base := v.base(buf)
	gs := v.spaces[v.spaceOf[buf]].gens
	k := sort.Search(len(gs), func(i int) bool { return gs[i].hi > lo+base })
	for ; k < len(gs) && gs[k].lo < hi+base; k++ {
		g := &gs[k]
		a, z := max(lo+base, g.lo), min(hi+base, g.hi)
		if n := len(g.rd); n > 0 && g.rd[n-1].x == x && g.rd[n-1].hi >= a {
			g.rd[n-1].hi = max(g.rd[n-1].hi, z)
		} else {
			g.rd = append(g.rd, read{a, z, x})
		}
	}
}

// runs calls f with the byte spans a region covers in its buffer.
func (v *validator) runs(b *Buffer, r Region, f func(lo, hi int64)) {
	if !r.IsBox() {
		f(r.Offset, r.Offset+r.Bytes)
		return
	}
	elem := v.s.BufElem(r.Buf)
	v.s.Box(r).ForEachRun(b.Box.Size, func(lo, n int64) { f(lo*elem, (lo+n)*elem) })
}

// arenaFor returns the arena for the boxes of what an op reads to write
// into region r: tmp when r's buffer is placed (write checks them and keeps
// none), else boxes (the content of unplaced staging is kept).
func (v *validator) arenaFor(r Region) *layout.BoxArena {
	if v.s.Buffers[r.Buf].Placed() {
		return &v.tmp
	}
	return &v.boxes
}

// globalBox returns the global box a region of a placed buffer covers,
// from arena a; a byte range must cover whole elements that form a box.
func (v *validator) globalBox(a *layout.BoxArena, op int32, b *Buffer, r Region) (layout.Box, error) {
	if r.IsBox() {
		g := a.Clone(v.s.Box(r))
		for d := range g.Start {
			g.Start[d] += b.Box.Start[d]
		}
		return g, nil
	}
	elem := v.s.BufElem(r.Buf)
	if r.Offset%elem != 0 || r.Bytes%elem != 0 {
		return layout.Box{}, v.opErr(op, "byte range [%d, %d) of buffer %d splits an element", r.Offset, r.Offset+r.Bytes, r.Buf)
	}
	g, ok := rangeBox(a, b.Box, r.Offset/elem, r.Bytes/elem)
	if !ok {
		return layout.Box{}, v.opErr(op, "byte range [%d, %d) of buffer %d is not a box of %s", r.Offset, r.Offset+r.Bytes, r.Buf, v.s.Tensors[b.Tensor].Name)
	}
	return g, nil
}

// rangeBox returns the elements [start, start+n) of box b in row-major
// order as a box from arena a, if they form one.
func rangeBox(a *layout.BoxArena, b layout.Box, start, n int64) (layout.Box, bool) {
	nd := len(b.Size)
	if n <= 0 || start < 0 || start+n > b.Elems() {
		return layout.Box{}, false
	}
	var strides [9]int64
	stride := strides[:]
	if nd+1 > len(strides) {
		stride = make([]int64, nd+1)
	}
	stride[nd] = 1
	for d := nd - 1; d >= 0; d-- {
		stride[d] = stride[d+1] * b.Size[d]
	}
	// stride[d] is the element count of one index step of dim d-1: stride[0]
	// is the whole box, stride[nd] one element.
	for d := 0; d < nd; d++ {
		st := stride[d+1]
		if start%st != 0 || n%st != 0 {
			continue
		}
		if start/stride[d] != (start+n-1)/stride[d] {
			return layout.Box{}, false
		}
		out := a.New(nd)
		for k := 0; k < nd; k++ {
			switch {
			case k < d:
				out.Start[k] = b.Start[k] + (start/stride[k+1])%b.Size[k]
				out.Size[k] = 1
			case k == d:
				out.Start[k] = b.Start[k] + (start/st)%b.Size[k]
				out.Size[k] = n / st
			default:
				out.Start[k] = b.Start[k]
				out.Size[k] = b.Size[k]
			}
		}
		return out, true
	}
	return layout.Box{}, false
}

// read returns the content of a region as op reads it, after checking that
// every byte was written by an op that happens before op. The boxes it
// makes come from arena a.
func (v *validator) read(op int32, r Region, a *layout.BoxArena) ([]seg, error) {
	s := v.s
	b := &s.Buffers[r.Buf]
	dyn := v.spaceOf[r.Buf] >= 0
	if dyn {
		// Check the span from the box's first byte to its last at once, and
		// only when that fails (a hole written by no op, or not yet), run by
		// run. For reuse, the op uses the whole span.
		lo, hi := v.span(r)
		if err := v.checkGens(op, r.Buf, lo, hi); err != nil {
			if !r.IsBox() {
				return nil, err
			}
			var err2 error
			v.runs(b, r, func(a, z int64) {
				if err2 == nil {
					err2 = v.checkGens(op, r.Buf, a, z)
				}
			})
			if err2 != nil {
				return nil, err2
			}
		}
		v.noteRead(op, r.Buf, lo, hi)
	} else if b.Kind != Input {
		// Every byte read must be written, by ops that happen before op. A
		// strided box has many runs: when the writes cover the span from its
		// first to its last byte without a gap, and all happen before op,
		// every run is covered; only otherwise check run by run.
		lo, hi := r.Offset, r.Offset+r.Bytes
		if r.IsBox() {
			// The box's first and last elements bound its runs.
			box, elem := v.s.Box(r), v.s.BufElem(r.Buf)
			var first, last int64
			for d, n := range b.Box.Size {
				first = first*n + box.Start[d]
				last = last*n + box.Start[d] + box.Size[d] - 1
			}
			lo, hi = first*elem, (last+1)*elem
		}
		if v.boxw[r.Buf] != nil {
			if box, ok := v.localBox(r); ok && v.boxWritersBefore(op, int(r.Buf), box) {
				goto checked
			}
			// Not the common case: the spans say what is wrong.
			v.writes[r.Buf] = v.spansOf(int(r.Buf))
			v.boxw[r.Buf], v.reach[r.Buf] = nil, nil
		}
		if err := v.writersBefore(op, int(r.Buf), lo, hi); err != nil {
			var err2 error
			v.runs(b, r, func(a, z int64) {
				if err2 == nil {
					err2 = v.writersBefore(op, int(r.Buf), a, z)
				}
			})
			if err2 != nil {
				return nil, err2
			}
		}
	}
checked:
	if b.Placed() {
		g, err := v.globalBox(a, op, b, r)
		if err != nil {
			return nil, err
		}
		v.one[0] = seg{b.Tensor, g, s.BufDType(r.Buf)}
		return v.one[:], nil
	}
	// Unplaced staging: the content its writers left.
	lo, hi := r.Offset, r.Offset+r.Bytes
	var out []seg
	if dyn {
		base := v.base(r.Buf)
		gs := v.spaces[v.spaceOf[r.Buf]].gens
		k := sort.Search(len(gs), func(i int) bool { return gs[i].hi > lo+base })
		for ; k < len(gs) && gs[k].lo < hi+base; k++ {
			g := &gs[k]
			var err error
			if out, err = v.cut(a, op, r, out, v.content[g.w], g.org-base, max(lo, g.lo-base), min(hi, g.hi-base)); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	ws := v.writes[r.Buf]
	k := sort.Search(len(ws), func(i int) bool { return ws[i].hi > lo })
	for ; k < len(ws) && ws[k].lo < hi; k++ {
		var err error
		if out, err = v.cut(a, op, r, out, v.content[ws[k].op], ws[k].lo, lo, hi); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// cut appends to out the part of content c, which starts at byte pos, that
// lies in the bytes [lo, hi) that op reads of region r; the boxes it cuts
// come from arena.
func (v *validator) cut(arena *layout.BoxArena, op int32, r Region, out, c []seg, pos, lo, hi int64) ([]seg, error) {
	s := v.s
	for _, g := range c {
		n := v.segBytes(g)
		a, z := max(pos, lo), min(pos+n, hi)
		if a < z {
			if a == pos && z == pos+n {
				out = append(out, g)
			} else {
				elem := g.dt.Size()
				if (a-pos)%elem != 0 || (z-a)%elem != 0 {
					return nil, v.opErr(op, "reads bytes [%d, %d) of buffer %d, splitting an element", r.Offset, r.Offset+r.Bytes, r.Buf)
				}
				sub, ok := rangeBox(arena, g.box, (a-pos)/elem, (z-a)/elem)
				if !ok {
					return nil, v.opErr(op, "reads bytes [%d, %d) of buffer %d, which cut %s's box %v into a non-box", r.Offset, r.Offset+r.Bytes, r.Buf, s.Tensors[g.tensor].Name, g.box)
				}
				out = append(out, seg{g.tensor, sub, g.dt})
			}
		}
		pos += n
	}
	return out, nil
}

// write checks content against a placed destination, or records it for an
// unplaced one.
func (v *validator) write(op int32, r Region, c []seg) error {
	s := v.s
	b := &s.Buffers[r.Buf]
	var total int64
	for _, g := range c {
		total += v.segBytes(g)
	}
	if total != r.Bytes {
		return v.opErr(op, "writes %d bytes of content into a region of %d", total, r.Bytes)
	}
	if v.spaceOf[r.Buf] >= 0 {
		var err error
		v.runs(b, r, func(a, z int64) {
			if err == nil {
				err = v.checkOverwrite(op, r.Buf, a, z)
			}
		})
		if err != nil {
			return err
		}
		v.runs(b, r, func(a, z int64) { v.overwrite(op, r.Buf, a, z, r.Offset) })
	}
	if !b.Placed() {
		v.content[op] = append([]seg(nil), c...)
		return nil
	}
	want, err := v.globalBox(&v.tmp, op, b, r)
	if err != nil {
		return err
	}
	var at int64 // elements of want covered so far
	whole := want.Elems()
	for _, g := range c {
		if g.tensor != b.Tensor {
			return v.opErr(op, "writes elements of %s into buffer %d of %s", s.Tensors[g.tensor].Name, r.Buf, s.Tensors[b.Tensor].Name)
		}
		if bd := s.BufDType(r.Buf); g.dt != bd {
			return v.opErr(op, "writes %v elements of %s into buffer %d, which holds %v", g.dt, s.Tensors[g.tensor].Name, r.Buf, bd)
		}
		n := g.box.Elems()
		exp, ok := want, true // one segment of the whole region, the common case
		if at != 0 || n != whole {
			exp, ok = rangeBox(&v.tmp, want, at, n)
		}
		if !ok || !exp.Equal(g.box) {
			return v.opErr(op, "writes %s elements %v where %v belong (buffer %d, %s of rank %d)", s.Tensors[g.tensor].Name, g.box, exp, r.Buf, b.Kind, b.Rank)
		}
		at += n
	}
	return nil
}

// writersBefore checks that the bytes [lo, hi) of buffer buf are all
// written, each by an op that happens before op.
func (v *validator) writersBefore(op int32, buf int, lo, hi int64) error {
	ws := v.writes[buf]
	k := sort.Search(len(ws), func(i int) bool { return ws[i].hi > lo })
	at := lo
	for ; k < len(ws) && ws[k].lo < hi; k++ {
		if ws[k].lo > at {
			break
		}
		if !v.before(ws[k].op, op) {
			w := &v.s.Ops[ws[k].op]
			return v.opErr(op, "reads bytes [%d, %d) of buffer %d written by op %d (%s on rank %d), which does not happen before it", max(lo, ws[k].lo), min(hi, ws[k].hi), buf, ws[k].op, w.Kind, w.Rank)
		}
		at = ws[k].hi
	}
	if at < hi {
		return v.opErr(op, "reads bytes [%d, %d) of buffer %d that nothing writes", at, hi, buf)
	}
	return nil
}

// hubHas reports whether w is a dependency of op h, marking h's
// dependencies once however many ops are asked about in turn.
func (v *validator) hubHas(h, w int32) bool {
	if v.hubMarked != h+1 {
		for _, d := range v.s.Deps(h) {
			v.hubDeps[d] = h + 1
		}
		v.hubMarked = h + 1
	}
	return v.hubDeps[w] == h+1
}

// before reports whether op w completes before op x starts: w is reachable
// backwards from x through dependencies, where a send and its recv complete
// together. The search skips ops that come before w in topological order:
// w cannot be among their ancestors.
func (v *validator) before(w, x int32) bool {
	s := v.s
	if w == s.Ops[x].Match {
		return false
	}
	// A direct dependency: x's are marked once, however many writers of
	// what x reads are asked about in turn (a copy that waits on every
	// chunk's recv).
	if v.marked != x+1 {
		if v.direct == nil {
			v.direct = make([]int32, len(s.Ops))
			v.hub = make([]int32, len(s.Ops))
			v.hubDeps = make([]int32, len(s.Ops))
		}
		for _, d := range s.Deps(x) {
			v.direct[d] = x + 1
		}
		v.marked = x + 1
	}
	if v.direct[w] == x+1 {
		v.hub[x] = x + 1
		return true
	}
	v.epoch++
	stack := v.stack[:0]
	rank := func(o int32) int32 {
		if v.order != nil {
			return v.order[v.node[o]]
		}
		return v.node[o]
	}
	floor := rank(w)
	push := func(o int32) {
		if v.stamp[o] != v.epoch {
			v.stamp[o] = v.epoch
			if rank(o) >= floor {
				stack = append(stack, o)
			}
		}
	}
	for _, d := range s.Deps(x) {
		push(d)
	}
	found := false
	for len(stack) > 0 {
		o := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if o == w {
			found = true
			break
		}
		// o's hub (o or an op before it) has w as a dependency: a chain of
		// transfers that all follow one op (a broadcast's first send, after
		// the gather) is then walked once, not once per writer.
		if h := v.hub[o]; h > 0 && v.hubHas(h-1, w) {
			v.hub[x] = h
			found = true
			break
		}
		if m := s.Ops[o].Match; m >= 0 {
			push(m)
		}
		for _, d := range s.Deps(o) {
			push(d)
		}
	}
	v.stack = stack
	return found
}

// quantize checks a quantize op: it reads whole blocks of a quantized
// tensor in its source dtype, and writes the same box in fp8 to its dst
// and the box's scales (in the scale tensor) to its scale region.
func (v *validator) quantize(i int32) error {
	s := v.s
	op := &s.Ops[i]
	c, err := v.read(i, op.Src, v.arenaFor(op.Dst))
	if err != nil {
		return err
	}
	g := c[0] // the src is in a placed buffer: one box
	t := &s.Tensors[g.tensor]
	if g.dt != t.Src.DType {
		return v.opErr(i, "quantizes %v elements of %s, not its source dtype %v", g.dt, t.Name, t.Src.DType)
	}
	br, bc := t.Quant.Blocks(t.Src.Shape)
	nd := len(t.Src.Shape)
	for k, bs := range [2]int64{br, bc} {
		d := nd - 2 + k
		lo, hi := g.box.Start[d], g.box.Start[d]+g.box.Size[d]
		if lo%bs != 0 || (hi%bs != 0 && hi != t.Src.Shape[d]) {
			return v.opErr(i, "quantizes box %v of %s, which cuts its blocks of %d in dim %d ([%d, %d))", g.box, t.Name, bs, d, lo, hi)
		}
	}
	q := seg{g.tensor, g.box, t.Dst.DType}
	if op.Dst.Bytes != v.segBytes(q) {
		return v.opErr(i, "dst is %d bytes, but box %v in %v is %d", op.Dst.Bytes, g.box, t.Dst.DType, v.segBytes(q))
	}
	if err := v.write(i, op.Dst, []seg{q}); err != nil {
		return err
	}
	st := v.scaleOf[g.tensor]
	sc := seg{st, t.Quant.ScaleBox(t.Src.Shape, g.box), layout.FP32}
	r := s.QuantScale[i]
	if r.Bytes != v.segBytes(sc) {
		return v.opErr(i, "scale region is %d bytes, but the scales of box %v are %v, %d bytes", r.Bytes, g.box, sc.box, v.segBytes(sc))
	}
	return v.write(i, r, []seg{sc})
}

// spansOnly turns the box writes off: every static buffer's writes are
// spans, as before them (a test compares the two).
var spansOnly = false

// boxWrite is a write of a static placed buffer: its box in the buffer's
// own coordinates (Start from 0), its region, and the op.
type boxWrite struct {
	box layout.Box
	r   Region
	op  int32
}

// localBox is the box a region of a placed buffer covers, in the buffer's
// coordinates; false for a byte range that is not a box.
func (v *validator) localBox(r Region) (layout.Box, bool) { return v.localBoxIn(&v.boxes, r) }

// localBoxIn is localBox with a byte range's box made in arena a.
func (v *validator) localBoxIn(a *layout.BoxArena, r Region) (layout.Box, bool) {
	b := &v.s.Buffers[r.Buf]
	if r.IsBox() {
		return v.s.Box(r), true
	}
	elem := v.s.BufElem(r.Buf)
	if r.Offset%elem != 0 || r.Bytes%elem != 0 {
		return layout.Box{}, false
	}
	whole := layout.Box{Start: make([]int64, len(b.Box.Size)), Size: b.Box.Size}
	return rangeBox(a, whole, r.Offset/elem, r.Bytes/elem)
}

// boxesDisjointCover sorts buffer bi's box writes by their first dim,
// records the running reach of that dim, and reports whether no two
// overlap and, for an output, they cover it whole.
func (v *validator) boxesDisjointCover(bi int) bool {
	ws := v.boxw[bi]
	slices.SortFunc(ws, func(a, b boxWrite) int {
		return cmp.Or(cmp.Compare(a.box.Start[0], b.box.Start[0]), cmp.Compare(a.op, b.op))
	})
	reach := make([]int64, len(ws))
	var m, vol int64
	for k := range ws {
		m = max(m, ws[k].box.Start[0]+ws[k].box.Size[0])
		reach[k] = m
		vol += ws[k].box.Elems()
		// Any earlier box still reaching this one's first row may overlap.
		for j := k - 1; j >= 0 && reach[j] > ws[k].box.Start[0]; j-- {
			if _, ok := ws[j].box.Intersect(ws[k].box); ok {
				return false
			}
		}
	}
	v.reach[bi] = reach
	b := &v.s.Buffers[bi]
	return b.Kind != Output || vol*v.s.BufElem(int32(bi)) == b.Bytes
}

// boxWritersBefore reports whether the box of buffer buf that op reads is
// covered by box writes that all happen before op (false: something to
// report, which the spans then find).
func (v *validator) boxWritersBefore(op int32, buf int, box layout.Box) bool {
	ws, reach := v.boxw[buf], v.reach[buf]
	lo0, hi0 := box.Start[0], box.Start[0]+box.Size[0]
	k := sort.Search(len(ws), func(i int) bool { return ws[i].box.Start[0] >= hi0 })
	var got int64
	for j := k - 1; j >= 0 && reach[j] > lo0; j-- {
		part, ok := ws[j].box.Intersect(box)
		if !ok {
			continue
		}
		if !v.before(ws[j].op, op) {
			return false
		}
		got += part.Elems()
	}
	return got == box.Elems()
}

// spansOf expands buffer bi's box writes into sorted byte spans, as the
// spans' checks take them.
func (v *validator) spansOf(bi int) []span {
	var ws []span
	for _, w := range v.boxw[bi] {
		v.runs(&v.s.Buffers[bi], w.r, func(lo, hi int64) { ws = append(ws, span{lo, hi, w.op}) })
	}
	sortSpans(ws)
	return ws
}

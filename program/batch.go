package program

import (
	"slices"

	"github.com/m2n-project/m2n/ir"
)

// MaxBatch is the most local ops one batch step holds.
const MaxBatch = 1024

// Batchable reports whether a local op can join a batch of box copies:
// copies, packs and unpacks are all box copies, run by one kernel over a
// descriptor list. Quantizes batch among themselves (a quantize kernel's
// batch form runs many quantize ops' blocks in one launch).
func Batchable(k ir.OpKind) bool { return k == ir.Copy || k == ir.Pack || k == ir.Unpack }

// batchLocals joins runs of local box copies of one stream into batch
// steps (Step.Batch), each issued as one kernel launch at the place of its
// last member, and runs of quantizes the same way (a batch holds box
// copies or quantizes, never both). An op joins its stream's open batch
// when
//   - it touches no byte a member writes, and writes no byte a member
//     reads (the members run concurrently in one kernel);
//   - every event it waits for was recorded before the batch's first
//     member was issued, or where an event a member waits for was recorded
//     (so joining delays no member: in waves mode, the events of one
//     group's transfers are recorded together when the group ends). Not
//     a later event of a lane the batch waits on already: the copies into
//     the scale slabs, batched across quantize events, made the first
//     slab, and the NCCL group that carries it, wait for every quantize
//     (moe-2gpu in FP8: a group ended 14 ms late; docs/native.md);
//
// and a batch closes when any later step waits for an event of one of its
// members (a member's event is recorded only after the whole batch, and a
// wait issued before its record would not wait), or when an op of another
// kind (a box copy after quantizes, or the reverse) runs on its stream.
func batchLocals(s *ir.Schedule, steps []Step, streams, events int, m Mode) []Step {
	// recPos: the step after which each event is recorded; a transfer's in
	// waves mode when its group ends.
	recPos := make([]int32, events)
	recordPoints(steps, m, func(e int32, at, _ int) { recPos[e] = int32(at) })
	type batch struct {
		members []int // step indices
		first   int
		waitPos []int32
		spans   []span
		quant   bool // quantizes, not box copies
	}
	open := make([]*batch, streams)
	owner := make([]int32, events) // event -> stream of the open batch that records it, or -1
	for i := range owner {
		owner[i] = -1
	}
	drop := make([]bool, len(steps))
	finish := func(st int) {
		b := open[st]
		open[st] = nil
		if b == nil {
			return
		}
		for _, k := range b.members {
			if e := steps[k].Record; e >= 0 {
				owner[e] = -1
			}
		}
		if len(b.members) < 2 {
			return
		}
		last := b.members[len(b.members)-1]
		out := Step{Kind: Local, Op: steps[b.members[0]].Op, Stream: st, RStream: st, Record: -1, RRecord: -1}
		for _, k := range b.members {
			m := &steps[k]
			out.Batch = append(out.Batch, m.Op)
			out.Waits = append(out.Waits, m.Waits...)
			switch {
			case m.Record < 0:
			case out.Record < 0:
				out.Record = m.Record
			default:
				out.More = append(out.More, m.Record)
			}
			drop[k] = k != last
		}
		out.Waits = dedupe(out.Waits)
		steps[last] = out
	}
	var sp [3]span
	for k := range steps {
		st := &steps[k]
		waits := append(slices.Clip(st.Waits), st.RWaits...)
		for _, e := range waits {
			if o := owner[e]; o >= 0 {
				finish(int(o))
			}
		}
		if st.Kind == Xfer {
			// Stream order carries what a transfer on a batch's stream
			// waits for: the batch must be issued before it.
			finish(st.Stream)
			finish(st.RStream)
		}
		if st.Kind != Local {
			continue
		}
		op := &s.Ops[st.Op]
		quant := op.Kind == ir.Quantize
		if !Batchable(op.Kind) && !quant {
			finish(st.Stream)
			continue
		}
		sp[0], sp[1] = spanOf(s, op.Src, false), spanOf(s, op.Dst, true)
		ops := sp[:2]
		if quant { // it writes its scales too
			sp[2] = spanOf(s, s.QuantScale[st.Op], true)
			ops = sp[:3]
		}
		if b := open[st.Stream]; b != nil && (b.quant != quant || !joins(b.members, b.first, b.waitPos, b.spans, ops, st.Waits, recPos)) {
			finish(st.Stream)
		}
		b := open[st.Stream]
		if b == nil {
			b = &batch{first: k, quant: quant}
			open[st.Stream] = b
		}
		b.members = append(b.members, k)
		b.spans = append(b.spans, ops...)
		for _, e := range st.Waits {
			b.waitPos = append(b.waitPos, recPos[e])
		}
		if st.Record >= 0 {
			owner[st.Record] = int32(st.Stream)
		}
	}
	for st := range open {
		finish(st)
	}
	out := steps[:0]
	for k := range steps {
		if !drop[k] {
			out = append(out, steps[k])
		}
	}
	return out
}

// joins reports whether a local op with spans sp and waits may join an
// open batch (see batchLocals).
func joins(members []int, first int, waitPos []int32, spans, sp []span, waits []int32, recPos []int32) bool {
	if len(members) >= MaxBatch {
		return false
	}
	for _, e := range waits {
		if p := recPos[e]; int(p) >= first && !slices.Contains(waitPos, p) {
			return false
		}
	}
	for _, m := range spans {
		for _, c := range sp {
			if (m.write || c.write) && m.space == c.space && m.lo < c.hi && c.lo < m.hi {
				return false
			}
		}
	}
	return true
}

// span is the bytes an op reads or writes: from its region's first byte to
// its last, in its buffer, or for an arena buffer in its rank's arena.
type span struct {
	space  int64 // a buffer's ID, or -1 - rank for a rank's arena
	lo, hi int64
	write  bool
}

func spanOf(s *ir.Schedule, r ir.Region, write bool) span {
	b := &s.Buffers[r.Buf]
	sp := span{space: int64(r.Buf), lo: r.Offset, hi: r.Offset + r.Bytes, write: write}
	if r.IsBox() {
		box, elem := s.Box(r), s.BufElem(r.Buf)
		var first, last int64
		for d, n := range b.Box.Size {
			first = first*n + box.Start[d]
			last = last*n + box.Start[d] + box.Size[d] - 1
		}
		sp.lo, sp.hi = first*elem, (last+1)*elem
	}
	if b.InArena {
		sp.space = -1 - int64(b.Rank)
	}
	sp.lo, sp.hi = sp.lo+b.Base(), sp.hi+b.Base()
	return sp
}

// coalesceEvents gives every set of events recorded at one point of one
// stream a single event, and keeps of a step's waits only the last event
// of each stream it waits on: events of one stream complete in the order
// they were recorded. In waves mode every transfer of a group records its
// events when the group ends, so a group costs one record per stream
// instead of one per transfer, and a batch of unpacks one wait per NCCL
// stream instead of one per receive. It renumbers the events 0..n-1 and
// returns n.
func coalesceEvents(steps []Step, events int, m Mode) int {
	type point struct{ at, stream int }
	rep := make([]int32, events) // event -> its point's first event
	pos := make([]point, events)
	for i := range rep {
		rep[i] = -1
	}
	first := map[point]int32{}
	recordPoints(steps, m, func(e int32, at, stream int) {
		p := point{at, stream}
		if r, ok := first[p]; ok {
			rep[e] = r
		} else {
			first[p], rep[e] = e, e
		}
		pos[e] = p
	})
	// Renumber the representatives.
	num := make([]int32, events)
	n := int32(0)
	for e := range rep {
		num[e] = -1
		if rep[e] == int32(e) {
			num[e] = n
			n++
		}
	}
	keep := func(list []int32) []int32 {
		out := list[:0]
		for _, e := range list {
			if rep[e] == e {
				out = append(out, num[e])
			}
		}
		return out
	}
	one := func(e int32) int32 {
		if e < 0 || rep[e] != e {
			return -1
		}
		return num[e]
	}
	waits := func(list []int32) []int32 {
		// The last event of each stream waited on.
		last := map[int]int32{}
		for _, e := range list {
			r := rep[e]
			s := pos[r].stream
			if l, ok := last[s]; !ok || pos[l].at < pos[r].at {
				last[s] = r
			}
		}
		out := list[:0]
		for _, e := range list {
			r := rep[e]
			if last[pos[r].stream] == r {
				out = append(out, num[r])
				delete(last, pos[r].stream)
			}
		}
		return out
	}
	for k := range steps {
		st := &steps[k]
		st.Waits, st.RWaits = waits(st.Waits), waits(st.RWaits)
		st.Record, st.RRecord = one(st.Record), one(st.RRecord)
		st.More, st.RMore = keep(st.More), keep(st.RMore)
	}
	return int(n)
}

// recordPoints calls f with every event the steps record, the step after
// which it is recorded (in waves mode a transfer's when its group ends, as
// the executor records them) and the stream it is recorded on.
func recordPoints(steps []Step, m Mode, f func(e int32, at, stream int)) {
	each := func(rec int32, more []int32, at, stream int) {
		if rec >= 0 {
			f(rec, at, stream)
		}
		for _, e := range more {
			f(e, at, stream)
		}
	}
	var open []int // the open group's transfer steps (waves mode)
	for k := range steps {
		st := &steps[k]
		switch {
		case st.Kind == GroupStart:
			open = open[:0]
		case st.Kind == GroupEnd:
			for _, x := range open {
				t := &steps[x]
				each(t.Record, t.More, k, t.Stream)
				each(t.RRecord, t.RMore, k, t.RStream)
			}
		case st.Kind == Xfer && m == Waves:
			open = append(open, k)
		default:
			each(st.Record, st.More, k, st.Stream)
			each(st.RRecord, st.RMore, k, st.RStream) // a pushed transfer's recv
		}
	}
}

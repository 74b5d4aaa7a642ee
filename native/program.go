package native

import (
	"container/heap"
	"fmt"
	"math"

	"github.com/m2n-project/m2n/plan/ir"
)

// A program is the order in which the host issues a schedule's ops to the
// GPU, with the stream each runs on and the events that carry dependencies
// between streams. It is computed once, without a device, and replayed for
// every iteration.
type program struct {
	steps   []step
	streams []streamKey // stream index -> its device and its role
	events  int         // events the program records (indices 0..events-1)
	waves   int         // NCCL groups (waves mode); 0 in streams mode
	waveCap int64       // the per-pair bytes groups were cut at; 0: uncut
}

type streamKey struct {
	dev  int
	lane int
}

type stepKind uint8

const (
	stepLocal      stepKind = iota // a copy, pack or unpack: op
	stepXfer                       // a send/recv pair: op is the send, match the recv
	stepGroupStart                 // waves mode: open an NCCL group
	stepGroupEnd                   // waves mode: close it
)

type step struct {
	kind    stepKind
	op      int32   // the op (for a transfer, the send)
	stream  int     // where it runs; for a transfer in waves mode, the send's stream
	rstrm   int     // waves mode: the recv's stream
	waits   []int32 // events to wait for on stream first
	rwaits  []int32 // waves mode: events the recv's stream waits for first
	record  int32   // event to record on stream after it, or -1
	rrecord int32   // waves mode: event to record on rstrm after the recv, or -1
	// A transfer step may carry several of the schedule's transfers between
	// one ordered pair whose bytes are adjacent on both sides (chunks of one
	// contiguous region): one NCCL send/recv or device copy of bytes,
	// starting at op's regions. more and rmore are the merged transfers'
	// own events, recorded with record and rrecord.
	bytes       int64
	more, rmore []int32
	comm        int // waves mode: the index of the device's communicator
}

// mode selects how transfers are issued.
type mode uint8

const (
	// streamsMode issues every op as soon as its turn comes, transfers as
	// device copies, on a pool of streams per device; dependencies across
	// streams become event waits.
	streamsMode mode = iota
	// wavesMode groups transfers by dependency level: all transfers of a
	// level go in one NCCL group, on one NCCL stream per device, as NCCL
	// serializes a communicator's operations and matches them per group.
	wavesMode
)

// compile turns a schedule into a program. dev maps a rank to its device;
// lanes is the number of local-op streams per device.
func compile(s *ir.Schedule, dev func(rank int32) int, lanes int, m mode, waveBytes int64, comms int) (*program, error) {
	if lanes < 1 {
		lanes = 1
	}
	n := int32(len(s.Ops))
	p := &program{}
	streamOf := map[streamKey]int{}
	stream := func(k streamKey) int {
		if i, ok := streamOf[k]; ok {
			return i
		}
		streamOf[k] = len(p.streams)
		p.streams = append(p.streams, k)
		return len(p.streams) - 1
	}
	// Lanes: per rank, packs on one, unpacks and copies on another; per
	// ordered pair of ranks, its transfers on a third (streams mode). Lane
	// numbers map onto the device's pool of streams.
	laneNo := map[[3]int32]int{}
	nextLane := map[int]int{}
	lane := func(d int, key [3]int32) int {
		l, ok := laneNo[key]
		if !ok {
			l = nextLane[d] % lanes
			nextLane[d]++
			laneNo[key] = l
		}
		return l
	}
	opStream := make([]int, n)
	opComm := make([]int, n)
	commNo := map[[2]int32]int{}
	commOf := func(rank, peer int32, k ir.OpKind) int {
		from, to := rank, peer
		if k == ir.Recv {
			from, to = peer, rank
		}
		c, ok := commNo[[2]int32{from, to}]
		if !ok {
			c = len(commNo) % max(comms, 1)
			commNo[[2]int32{from, to}] = c
		}
		return c
	}
	for i := range n {
		op := &s.Ops[i]
		d := dev(op.Rank)
		switch op.Kind {
		case ir.Pack, ir.Quantize:
			opStream[i] = stream(streamKey{d, lane(d, [3]int32{op.Rank, -1, 0})})
		case ir.Copy, ir.Unpack:
			opStream[i] = stream(streamKey{d, lane(d, [3]int32{op.Rank, -1, 1})})
		case ir.Send, ir.Recv:
			if m == wavesMode {
				// Each ordered pair's transfers on one of the device's
				// communicators, and its stream: several communicators
				// (loopback) run their queues concurrently.
				c := commOf(op.Rank, op.Peer, op.Kind)
				opComm[i] = c
				opStream[i] = stream(streamKey{d, -1 - c})
				continue
			}
			from, to := op.Rank, op.Peer
			if op.Kind == ir.Recv {
				from, to = op.Peer, op.Rank
			}
			// Both ends of a device copy run on the receiver's device.
			rd := dev(to)
			opStream[i] = stream(streamKey{rd, lane(rd, [3]int32{from, to, 2})})
		}
	}
	// Issue order: a topological order of the graph with each send/recv
	// pair as one node (issued when both ends are ready), lowest ID first.
	order, err := issueOrder(s)
	if err != nil {
		return nil, err
	}
	// Events: an op gets one when a dependent runs on another stream. In
	// streams mode a transfer is one copy on one stream, named by its send;
	// in waves mode each end has its own stream and event (a send may
	// complete before its recv has).
	key := func(i int32) int32 {
		if m == streamsMode {
			return rep(s, i)
		}
		return i
	}
	event := make([]int32, n)
	for i := range event {
		event[i] = -1
	}
	for i := range n {
		for _, d := range s.Deps(i) {
			k := key(d)
			if opStream[k] != opStream[i] && event[k] < 0 {
				event[k] = int32(p.events)
				p.events++
			}
		}
	}
	waitsFor := func(stream int, ops ...int32) []int32 {
		var w []int32
		for _, i := range ops {
			for _, d := range s.Deps(i) {
				k := key(d)
				if e := event[k]; e >= 0 && opStream[k] != stream {
					w = append(w, e)
				}
			}
		}
		return dedupe(w)
	}
	emit := func(i int32) step {
		op := &s.Ops[i]
		if op.Kind == ir.Send || op.Kind == ir.Recv {
			snd, rcv := i, op.Match
			if op.Kind == ir.Recv {
				snd, rcv = op.Match, i
			}
			if m == streamsMode {
				st := opStream[snd]
				return step{kind: stepXfer, op: snd, stream: st, rstrm: st, record: event[snd], rrecord: -1, waits: waitsFor(st, snd, rcv), bytes: s.Ops[snd].Src.Bytes}
			}
			return step{kind: stepXfer, op: snd, stream: opStream[snd], rstrm: opStream[rcv],
				waits: waitsFor(opStream[snd], snd), rwaits: waitsFor(opStream[rcv], rcv),
				record: event[snd], rrecord: event[rcv], bytes: s.Ops[snd].Src.Bytes, comm: opComm[snd]}
		}
		return step{kind: stepLocal, op: i, stream: opStream[i], rstrm: opStream[i], record: event[i], rrecord: -1, waits: waitsFor(opStream[i], i)}
	}
	if m == streamsMode {
		// A transfer joins the previous step of its stream when that is a
		// transfer of the same pair whose regions end where its begin, and
		// it waits for nothing: one device copy instead of several.
		last := map[int]int{} // stream -> index of its last step
		for _, i := range order {
			st := emit(i)
			if st.kind == stepXfer && len(st.waits) == 0 {
				if k, ok := last[st.stream]; ok && p.steps[k].kind == stepXfer && adjacent(s, &p.steps[k], st.op) {
					merge(s, &p.steps[k], &st)
					continue
				}
			}
			last[st.stream] = len(p.steps)
			p.steps = append(p.steps, st)
		}
		return p, nil
	}
	groups := assignGroups(s, order, waveBytes)
	p.waves, p.waveCap = groups.count, groups.capBytes
	// Steps: per group, the local ops that may run before it (every
	// transfer they wait for is in an earlier group), then the group.
	// Local ops keep the topological order within a bucket.
	byGroup := make([][]int32, groups.count+1)
	for _, i := range order {
		if k := s.Ops[i].Kind; k == ir.Send || k == ir.Recv {
			byGroup[groups.of[i]] = append(byGroup[groups.of[i]], i)
		}
	}
	locals := make([][]int32, groups.count+1)
	for _, i := range order {
		if k := s.Ops[i].Kind; k != ir.Send && k != ir.Recv {
			locals[groups.of[i]] = append(locals[groups.of[i]], i)
		}
	}
	// Local ops that no transfer waits for, even through other local ops
	// (the colocated copies, the last unpacks), are issued after their
	// bucket's group: a copy kernel launched first takes every SM, and the
	// group's NCCL kernel then waits for it to finish (paper-2gpu: 0.90 ms
	// with the copies first, docs/native.md).
	feeds := make([]bool, n)
	for i := n - 1; i >= 0; i-- {
		if k := s.Ops[i].Kind; k == ir.Send || k == ir.Recv || feeds[i] {
			for _, d := range s.Deps(i) {
				feeds[d] = true
			}
		}
	}
	for g := 0; g <= groups.count; g++ {
		var sinks []int32
		for _, i := range locals[g] {
			if !feeds[i] && g < groups.count && len(byGroup[g]) > 0 {
				sinks = append(sinks, i)
				continue
			}
			p.steps = append(p.steps, emit(i))
		}
		if g == groups.count || len(byGroup[g]) == 0 {
			continue
		}
		p.steps = append(p.steps, step{kind: stepGroupStart, record: -1, rrecord: -1})
		// Transfers of one ordered pair in a group run in order (NCCL's
		// per-peer rule), so chunks of one contiguous region that follow
		// each other on the pair merge into one send/recv: NCCL pays a fixed
		// cost per operation, about 11 us on two H200s (docs/native.md).
		lastOfPair := map[[2]int32]int{}
		for _, i := range byGroup[g] {
			st := emit(i)
			op := &s.Ops[i]
			k := [2]int32{op.Rank, op.Peer}
			if j, ok := lastOfPair[k]; ok && adjacent(s, &p.steps[j], i) {
				merge(s, &p.steps[j], &st)
				continue
			}
			lastOfPair[k] = len(p.steps)
			p.steps = append(p.steps, st)
		}
		p.steps = append(p.steps, step{kind: stepGroupEnd, record: -1, rrecord: -1})
		for _, i := range sinks {
			p.steps = append(p.steps, emit(i))
		}
	}
	return p, nil
}

// groupPlan is how waves mode cuts a schedule's transfers into NCCL
// groups. of[i] is, for a transfer's send, its group; for a local op, the
// first group it may be issued before (every transfer it waits for is in an
// earlier group).
type groupPlan struct {
	of       []int32
	count    int   // groups
	capBytes int64 // the per-pair bytes a group was cut at; 0: uncut
}

// Group cutting. NCCL executes the point-to-point calls of one group to the
// same peer in order (its documented exception to "calls within a group
// progress independently"), so a transfer whose only dependencies on other
// transfers are the previous transfer of its own ordered pair (a send on
// the previous send to the same peer, a recv on the previous recv from the
// same peer) joins that transfer's group. Any other dependency — data
// received and forwarded, a pack, an unpack — puts it in a later group than
// what it waits for. A schedule whose transfers chain across ranks (the
// hierarchical route's forwarding, a ring broadcast) needs several groups to
// pipeline: each group then holds at most capBytes per ordered pair, chosen
// to balance a group's fixed cost against the pipeline's fill (see
// autoWaveBytes).
const groupCostBytes = 6 << 20 // one group's fixed cost in bytes of link time: ~15 us at ~350 GB/s (docs/calibration.md)

// assignGroups cuts the transfers into groups; waveBytes > 0 fixes the
// per-pair cap, 0 chooses it from the schedule, < 0 means no cap.
func assignGroups(s *ir.Schedule, order []int32, waveBytes int64) groupPlan {
	if waveBytes > 0 {
		return cutGroups(s, order, waveBytes).groupPlan
	}
	g := cutGroups(s, order, 0)
	if waveBytes < 0 {
		return g.groupPlan
	}
	if c := autoWaveBytes(g.maxPairBytes, g.count, g.fedByLocal); c > 0 {
		return cutGroups(s, order, c).groupPlan
	}
	return g.groupPlan
}

// autoWaveBytes is the per-pair group size that minimises a pipeline's
// time: with B bytes per pair through a chain of D stages, groups of G
// bytes cost about (B/G + D - 1) groups' fixed cost plus (D - 1) G of fill,
// least at G = sqrt(cost x B / (D - 1)).
func autoWaveBytes(maxPair int64, depth int, fedByLocal bool) int64 {
	stages := depth - 1
	if fedByLocal {
		stages++ // a pack (or unpack) stage before the transfers
	}
	if stages <= 0 || maxPair <= 0 {
		return 0
	}
	return int64(math.Sqrt(float64(groupCostBytes) * float64(maxPair) / float64(stages)))
}

type cutResult struct {
	groupPlan
	maxPairBytes int64 // the most bytes of one ordered pair in the schedule
	fedByLocal   bool  // some transfer waits for a local op
}

// cutGroups assigns groups in the topological order, each transfer to the
// earliest group its dependencies allow, and, when capBytes > 0, later while
// its ordered pair already carries capBytes in that group.
func cutGroups(s *ir.Schedule, order []int32, capBytes int64) cutResult {
	n := len(s.Ops)
	of := make([]int32, n)
	isXfer := func(i int32) bool { k := s.Ops[i].Kind; return k == ir.Send || k == ir.Recv }
	// after is the first group a dependent of op d may join, unless it is
	// d's successor on the same pair.
	after := func(d int32) int32 {
		if isXfer(d) {
			return of[rep(s, d)] + 1
		}
		return of[d]
	}
	samePair := func(a, b *ir.Op) bool { return a.Kind == b.Kind && a.Rank == b.Rank && a.Peer == b.Peer }
	type slot struct {
		from, to int32
		group    int32
	}
	load := map[slot]int64{}
	pairBytes := map[[2]int32]int64{}
	var res cutResult
	for _, i := range order {
		op := &s.Ops[i]
		if !isXfer(i) {
			g := int32(0)
			for _, d := range s.Deps(i) {
				g = max(g, after(d))
			}
			of[i] = g
			continue
		}
		g := int32(0)
		for _, end := range [2]int32{i, op.Match} {
			e := &s.Ops[end]
			for _, d := range s.Deps(end) {
				if isXfer(d) && samePair(&s.Ops[d], e) {
					g = max(g, of[rep(s, d)])
					continue
				}
				if !isXfer(d) {
					res.fedByLocal = true
				}
				g = max(g, after(d))
			}
		}
		k := [2]int32{op.Rank, op.Peer}
		pairBytes[k] += op.Src.Bytes
		res.maxPairBytes = max(res.maxPairBytes, pairBytes[k])
		if capBytes > 0 {
			for load[slot{k[0], k[1], g}] > 0 && load[slot{k[0], k[1], g}]+op.Src.Bytes > capBytes {
				g++
			}
		}
		load[slot{k[0], k[1], g}] += op.Src.Bytes
		of[i], of[op.Match] = g, g
		res.count = max(res.count, int(g)+1)
	}
	res.of = of
	res.capBytes = capBytes
	return res
}

// adjacent reports whether transfer snd (a send) continues transfer step
// st: the same ordered pair, and byte ranges that start where st's end, in
// the same buffers on both sides.
func adjacent(s *ir.Schedule, st *step, snd int32) bool {
	a, b := &s.Ops[st.op], &s.Ops[snd]
	if a.Rank != b.Rank || a.Peer != b.Peer {
		return false
	}
	ra, rb := &s.Ops[a.Match], &s.Ops[b.Match]
	if a.Src.IsBox() || b.Src.IsBox() || ra.Dst.IsBox() || rb.Dst.IsBox() {
		return false
	}
	return a.Src.Buf == b.Src.Buf && a.Src.Offset+st.bytes == b.Src.Offset &&
		ra.Dst.Buf == rb.Dst.Buf && ra.Dst.Offset+st.bytes == rb.Dst.Offset
}

// merge adds transfer step t to step st: its bytes, waits and events.
func merge(s *ir.Schedule, st, t *step) {
	st.bytes += t.bytes
	st.waits = dedupe(append(st.waits, t.waits...))
	st.rwaits = dedupe(append(st.rwaits, t.rwaits...))
	if t.record >= 0 {
		st.more = append(st.more, t.record)
	}
	if t.rrecord >= 0 {
		st.rmore = append(st.rmore, t.rrecord)
	}
	st.more = append(st.more, t.more...)
	st.rmore = append(st.rmore, t.rmore...)
}

// rep is the op that stands for a transfer: its send.
func rep(s *ir.Schedule, i int32) int32 {
	if s.Ops[i].Kind == ir.Recv {
		return s.Ops[i].Match
	}
	return i
}

// issueOrder returns the schedule's nodes (local ops, and the send of each
// transfer) in a topological order, smallest ID first among the ready.
func issueOrder(s *ir.Schedule) ([]int32, error) {
	n := int32(len(s.Ops))
	indeg := make([]int32, n)
	succ := make([][]int32, n)
	for i := range n {
		r := rep(s, i)
		for _, d := range s.Deps(i) {
			rd := rep(s, d)
			if rd == r {
				return nil, fmt.Errorf("op %d depends on its own transfer", i)
			}
			succ[rd] = append(succ[rd], r)
			indeg[r]++
		}
	}
	h := &int32Heap{}
	for i := range n {
		if rep(s, i) == i && indeg[i] == 0 {
			heap.Push(h, i)
		}
	}
	var order []int32
	for h.Len() > 0 {
		i := heap.Pop(h).(int32)
		order = append(order, i)
		for _, j := range succ[i] {
			if indeg[j]--; indeg[j] == 0 {
				heap.Push(h, j)
			}
		}
	}
	nodes := 0
	for i := range n {
		if rep(s, i) == i {
			nodes++
		}
	}
	if len(order) != nodes {
		return nil, fmt.Errorf("the schedule has a dependency cycle through a send/recv pair")
	}
	return order, nil
}

type int32Heap []int32

func (h int32Heap) Len() int           { return len(h) }
func (h int32Heap) Less(i, j int) bool { return h[i] < h[j] }
func (h int32Heap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *int32Heap) Push(x any)        { *h = append(*h, x.(int32)) }
func (h *int32Heap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func dedupe(w []int32) []int32 {
	if len(w) < 2 {
		return w
	}
	seen := map[int32]bool{}
	out := w[:0]
	for _, e := range w {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

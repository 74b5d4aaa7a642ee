// Package program computes how the GPU executor issues a schedule: the order
// in which the host issues its ops, the stream each runs on, the events that
// carry dependencies between streams, the NCCL groups transfers are cut into,
// and the chunks of one pair merged into one send/recv or copy. It needs no
// device: native runs a program, and sim models one (docs/native.md).
package program

import (
	"container/heap"
	"fmt"
	"math"
	"slices"

	"github.com/m2n-project/m2n/ir"
)

// A Program is the order in which the host issues a schedule's ops to the
// GPU, with the stream each runs on and the events that carry dependencies
// between streams. It is computed once, without a device, and replayed for
// every iteration.
type Program struct {
	Steps   []Step
	Streams []Stream // stream index -> its device and its role
	Events  int      // events the program records (indices 0..Events-1)
	Groups  int      // NCCL groups (Waves mode); 0 in Streams mode
	// GroupCapBytes is the per-pair bytes groups were cut at; 0: uncut.
	GroupCapBytes int64
}

// Stream is one stream of a device: Lane >= 0 a pool stream for local ops
// and copies (Lane == Options.Lanes: the receiving ends of pushed
// transfers), Lane < 0 the stream of NCCL communicator -1-Lane.
type Stream struct {
	Dev  int
	Lane int
}

// StepKind is what a step issues.
type StepKind uint8

const (
	Local      StepKind = iota // a copy, pack or unpack: Op
	Xfer                       // a send/recv pair: Op is the send, its Match the recv
	GroupStart                 // Waves mode: open an NCCL group
	GroupEnd                   // Waves mode: close it
)

// Step is one thing the host issues.
type Step struct {
	Kind    StepKind
	Op      int32   // the op (for a transfer, the send)
	Stream  int     // where it runs; for a transfer in Waves mode, the send's stream
	RStream int     // Waves mode: the recv's stream
	Waits   []int32 // events to wait for on Stream first
	RWaits  []int32 // Waves mode: events the recv's stream waits for first
	Record  int32   // event to record on Stream after it, or -1
	RRecord int32   // Waves mode: event to record on RStream after the recv, or -1
	// A transfer step may carry several of the schedule's transfers between
	// one ordered pair whose bytes are adjacent on both sides (chunks of one
	// contiguous region): one NCCL send/recv or device copy of Bytes,
	// starting at Op's regions. More and RMore are the merged transfers'
	// own events, recorded with Record and RRecord; Merged lists the merged
	// transfers' sends after Op.
	Bytes       int64
	More, RMore []int32
	Merged      []int32
	Comm        int // Waves mode: the index of the device's communicator
	// Batch lists the local ops of a batch step (Op is Batch[0]): copies,
	// packs and unpacks, or quantizes, of one stream that touch disjoint
	// bytes, issued as one kernel over a descriptor list instead of a
	// launch each (quantizes of different kernels: one launch a kernel).
	// Waits is
	// the union of theirs; their events are recorded after the batch
	// (Record, then More). Nil for a single op.
	Batch []int32
}

// WaitsForReceiver reports whether a receive of transfer step st of s (its
// send's or a merged one's) waits for work of its own rank: a transfer
// pushed by its sender then waits for a ready flag the receiver sets. A
// receive's dependency on another receive of the same step is not such
// work: the step's one copy lands them both.
func (st *Step) WaitsForReceiver(s *ir.Schedule) bool {
	sends := append([]int32{st.Op}, st.Merged...)
	for _, snd := range sends {
		for _, d := range s.Deps(s.Ops[snd].Match) {
			if o := &s.Ops[d]; o.Kind != ir.Recv || !slices.Contains(sends, o.Match) {
				return true
			}
		}
	}
	return false
}

// Mode selects how transfers are issued.
type Mode uint8

const (
	// Streams issues every op as soon as its turn comes, transfers as
	// device copies, on a pool of streams per device; dependencies across
	// streams become event waits.
	Streams Mode = iota
	// Waves cuts transfers into NCCL groups on one NCCL stream per device
	// and communicator, as NCCL serializes a communicator's operations and
	// matches them per group.
	Waves
)

// Options say how to compile.
type Options struct {
	// Dev maps a rank to its device; ranks of other processes map to
	// distinct negative numbers (their streams are never created).
	Dev   func(rank int32) int
	Lanes int // local-op streams per device; below 1 means 1
	Mode  Mode
	// WaveBytes fixes the per-pair bytes of a group (> 0), chooses them
	// from the schedule (0) or leaves groups uncut (< 0); Waves mode.
	WaveBytes int64
	Comms     int // communicators per device; below 1 means 1
	// NoBatch issues every local op as its own launch, as the executor
	// did before batch steps (to measure what batching buys).
	NoBatch bool
	// Push (Streams mode) runs each transfer's copy on a stream of the
	// sender's device, its copy engine writing into the receiver, and gives
	// the recv an end of its own on the receiver's device (RStream, RWaits,
	// RRecord, as in waves mode): one process per GPU, where each process
	// issues its end and the two meet through flags in device memory
	// (docs/native.md). It runs what a pull (the receiver's copy engine
	// reading the sender's input, with no signal) cannot: sends from
	// staging or waiting for other work (FP8, agbcast, nemo-legacy).
	Push bool
}

// Compile turns a schedule into a program.
func Compile(s *ir.Schedule, o Options) (*Program, error) {
	dev, lanes, m, waveBytes, comms := o.Dev, o.Lanes, o.Mode, o.WaveBytes, o.Comms
	if lanes < 1 {
		lanes = 1
	}
	n := int32(len(s.Ops))
	p := &Program{}
	streamOf := map[Stream]int{}
	stream := func(k Stream) int {
		if i, ok := streamOf[k]; ok {
			return i
		}
		streamOf[k] = len(p.Streams)
		p.Streams = append(p.Streams, k)
		return len(p.Streams) - 1
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
			opStream[i] = stream(Stream{Dev: d, Lane: lane(d, [3]int32{op.Rank, -1, 0})})
		case ir.Copy, ir.Unpack:
			// What lands from a transfer (unpacks of received bytes) on one
			// lane, local work that waits for no transfer (a colocated
			// rank's own shard) on another: on one stream the local copies
			// would queue behind unpacks waiting for the network, or the
			// reverse.
			l := int32(1)
			if !waitsForXfer(s, i) {
				l = 3
			}
			opStream[i] = stream(Stream{Dev: d, Lane: lane(d, [3]int32{op.Rank, -1, l})})
		case ir.Send, ir.Recv:
			if m == Waves {
				// Each ordered pair's transfers on one of the device's
				// communicators, and its stream: several communicators
				// (loopback) run their queues concurrently.
				c := commOf(op.Rank, op.Peer, op.Kind)
				opComm[i] = c
				opStream[i] = stream(Stream{Dev: d, Lane: -1 - c})
				continue
			}
			from, to := op.Rank, op.Peer
			if op.Kind == ir.Recv {
				from, to = op.Peer, op.Rank
			}
			// Both ends of a device copy run on the receiver's device; each
			// end on its own rank's device when pushing.
			rd := dev(to)
			switch {
			case o.Push && op.Kind == ir.Recv:
				// A pushed transfer's receiving end (a wait for its flag)
				// on a stream of its own: on a sender's stream it would
				// hold that sender's next copies until the peer's data came.
				opStream[i] = stream(Stream{Dev: rd, Lane: lanes})
				continue
			case o.Push:
				rd = dev(from)
			}
			opStream[i] = stream(Stream{Dev: rd, Lane: lane(rd, [3]int32{from, to, 2})})
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
		if m == Streams && !o.Push {
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
				event[k] = int32(p.Events)
				p.Events++
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
	emit := func(i int32) Step {
		op := &s.Ops[i]
		if op.Kind == ir.Send || op.Kind == ir.Recv {
			snd, rcv := i, op.Match
			if op.Kind == ir.Recv {
				snd, rcv = op.Match, i
			}
			if m == Streams && !o.Push {
				st := opStream[snd]
				return Step{Kind: Xfer, Op: snd, Stream: st, RStream: st, Record: event[snd], RRecord: -1, Waits: waitsFor(st, snd, rcv), Bytes: s.Ops[snd].Src.Bytes}
			}
			return Step{Kind: Xfer, Op: snd, Stream: opStream[snd], RStream: opStream[rcv],
				Waits: waitsFor(opStream[snd], snd), RWaits: waitsFor(opStream[rcv], rcv),
				Record: event[snd], RRecord: event[rcv], Bytes: s.Ops[snd].Src.Bytes, Comm: opComm[snd]}
		}
		return Step{Kind: Local, Op: i, Stream: opStream[i], RStream: opStream[i], Record: event[i], RRecord: -1, Waits: waitsFor(opStream[i], i)}
	}
	if m == Streams {
		// A transfer joins the previous step of its stream when that is a
		// transfer of the same pair whose regions end where its begin, and
		// it waits for nothing that step does not wait for already (the
		// chunks of one quantized tensor all wait for its quantize): one
		// device copy instead of several.
		last := map[int]int{} // stream -> index of its last step
		for _, i := range order {
			st := emit(i)
			// Pushed, the recv has a stream of its own: the step must be
			// the last on both, or the recv would move ahead of work its
			// stream orders before it.
			k, ok := last[st.Stream]
			if kr, okr := last[st.RStream]; ok && st.Kind == Xfer && okr && kr == k && subset(st.Waits, p.Steps[k].Waits) && subset(st.RWaits, p.Steps[k].RWaits) {
				if p.Steps[k].Kind == Xfer && adjacent(s, &p.Steps[k], st.Op) {
					merge(&p.Steps[k], &st)
					continue
				}
			}
			last[st.Stream], last[st.RStream] = len(p.Steps), len(p.Steps)
			p.Steps = append(p.Steps, st)
		}
		if !o.NoBatch {
			p.Steps = batchLocals(s, p.Steps, len(p.Streams), p.Events, m)
			p.Events = coalesceEvents(p.Steps, p.Events, m)
		}
		return p, nil
	}
	groups := assignGroups(s, order, waveBytes)
	p.Groups, p.GroupCapBytes = groups.count, groups.capBytes
	// Steps: per group, the local ops that may run before it (every
	// transfer they wait for is in an earlier group), then the group.
	// Local ops keep the topological order within a bucket.
	byGroup := make([][]int32, groups.count+1)
	for _, i := range order {
		if k := s.Ops[i].Kind; k == ir.Send || k == ir.Recv {
			byGroup[groups.of[i]] = append(byGroup[groups.of[i]], i)
		}
	}
	// A local op that feeds transfers (a pack, a quantize) is issued just
	// before the first group it feeds, not before the first group it may
	// precede: issued all before the first group, a lane of quantize or
	// pack kernels filled the GPU and the first group's NCCL kernel started
	// when the lane drained (dense-2gpu in FP8: the first group ended
	// 2.9 ms in, right after the last of 112 quantizes; docs/native.md).
	// A local op after others is issued no earlier than they are.
	bucket := localBuckets(s, order, groups.of)
	locals := make([][]int32, groups.count+1)
	for _, i := range order {
		if k := s.Ops[i].Kind; k != ir.Send && k != ir.Recv {
			locals[bucket[i]] = append(locals[bucket[i]], i)
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
			p.Steps = append(p.Steps, emit(i))
		}
		if g == groups.count || len(byGroup[g]) == 0 {
			continue
		}
		p.Steps = append(p.Steps, Step{Kind: GroupStart, Record: -1, RRecord: -1})
		// Transfers of one ordered pair in a group run in order (NCCL's
		// per-peer rule), so chunks of one contiguous region that follow
		// each other on the pair merge into one send/recv: NCCL pays a fixed
		// cost per operation, about 11 us on two H200s (docs/native.md).
		lastOfPair := map[[2]int32]int{}
		for _, i := range byGroup[g] {
			st := emit(i)
			op := &s.Ops[i]
			k := [2]int32{op.Rank, op.Peer}
			if j, ok := lastOfPair[k]; ok && adjacent(s, &p.Steps[j], i) {
				merge(&p.Steps[j], &st)
				continue
			}
			lastOfPair[k] = len(p.Steps)
			p.Steps = append(p.Steps, st)
		}
		p.Steps = append(p.Steps, Step{Kind: GroupEnd, Record: -1, RRecord: -1})
		for _, i := range sinks {
			p.Steps = append(p.Steps, emit(i))
		}
	}
	if !o.NoBatch {
		p.Steps = batchLocals(s, p.Steps, len(p.Streams), p.Events, m)
		p.Events = coalesceEvents(p.Steps, p.Events, m)
	}
	return p, nil
}

// waitsForXfer reports whether op i depends directly on a send or recv.
func waitsForXfer(s *ir.Schedule, i int32) bool {
	for _, d := range s.Deps(i) {
		if k := s.Ops[d].Kind; k == ir.Send || k == ir.Recv {
			return true
		}
	}
	return false
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
// groupCostBytes is one group's cost in bytes of link time. Alone, a group
// costs about 15 us (docs/calibration.md); inside a whole model, with
// unpacks and local copies sharing the GPU, cutting dense-2gpu's flat
// schedule into 39 groups instead of 9 cost 2.2 ms, about 73 us a group
// (23 MB at 313 GB/s), and the last group's unpacks run at the shared
// GPU's slower copy rate: 64 MiB (docs/native.md).
const groupCostBytes = 64 << 20

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
	if c := autoWaveBytes(g.maxPairBytes, g.count, g.fedByLocal, g.feedsLocal); c > 0 {
		return cutGroups(s, order, c).groupPlan
	}
	return g.groupPlan
}

// autoWaveBytes is the per-pair group size that minimises a pipeline's
// time: with B bytes per pair through a chain of D stages, groups of G
// bytes cost about (B/G + D - 1) groups' fixed cost plus (D - 1) G of fill,
// least at G = sqrt(cost x B / (D - 1)). A pack before the transfers and
// an unpack after them are stages too: uncut, every unpack would wait for
// the whole group (its events are recorded when the group ends).
func autoWaveBytes(maxPair int64, depth int, fedByLocal, feedsLocal bool) int64 {
	stages := depth - 1
	if fedByLocal {
		stages++ // a pack (or quantize) stage before the transfers
	}
	if feedsLocal {
		stages++ // an unpack stage after them
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
	feedsLocal   bool  // some local op waits for a transfer
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
	last := map[[2]int32]int32{} // per ordered pair, the group of its last transfer
	var res cutResult
	for _, i := range order {
		op := &s.Ops[i]
		if !isXfer(i) {
			g := int32(0)
			for _, d := range s.Deps(i) {
				g = max(g, after(d))
				res.feedsLocal = res.feedsLocal || isXfer(d)
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
		// Never before the group of the pair's previous transfer: a group
		// waits for everything its transfers wait for, and a small
		// transfer issued late (a slab of scales, which waits for the
		// quantize of every weight before it) slipped into the first
		// group's room would hold that group back (moe-2gpu in FP8: the
		// first group ended only after every quantize, 13.4 ms into the
		// iteration).
		g = max(g, last[k])
		if capBytes > 0 {
			for load[slot{k[0], k[1], g}] > 0 && load[slot{k[0], k[1], g}]+op.Src.Bytes > capBytes {
				g++
			}
		}
		load[slot{k[0], k[1], g}] += op.Src.Bytes
		last[k] = g
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
func adjacent(s *ir.Schedule, st *Step, snd int32) bool {
	a, b := &s.Ops[st.Op], &s.Ops[snd]
	if a.Rank != b.Rank || a.Peer != b.Peer {
		return false
	}
	ra, rb := &s.Ops[a.Match], &s.Ops[b.Match]
	if a.Src.IsBox() || b.Src.IsBox() || ra.Dst.IsBox() || rb.Dst.IsBox() {
		return false
	}
	return a.Src.Buf == b.Src.Buf && a.Src.Offset+st.Bytes == b.Src.Offset &&
		ra.Dst.Buf == rb.Dst.Buf && ra.Dst.Offset+st.Bytes == rb.Dst.Offset
}

// merge adds transfer step t to step st: its bytes, waits and events.
func merge(st, t *Step) {
	st.Bytes += t.Bytes
	st.Merged = append(append(st.Merged, t.Op), t.Merged...)
	st.Waits = dedupe(append(st.Waits, t.Waits...))
	st.RWaits = dedupe(append(st.RWaits, t.RWaits...))
	if t.Record >= 0 {
		st.More = append(st.More, t.Record)
	}
	if t.RRecord >= 0 {
		st.RMore = append(st.RMore, t.RRecord)
	}
	st.More = append(st.More, t.More...)
	st.RMore = append(st.RMore, t.RMore...)
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

// subset reports whether every event of a is in b.
func subset(a, b []int32) bool {
	for _, e := range a {
		if !slices.Contains(b, e) {
			return false
		}
	}
	return true
}

// localBuckets returns, per local op, the group before which it is issued
// (or after which, for one that feeds no transfer): the first group it
// feeds, directly or through other local ops, and no earlier than the
// first group it may precede (of) or than the local ops it waits for.
func localBuckets(s *ir.Schedule, order []int32, of []int32) []int32 {
	n := int32(len(s.Ops))
	isX := func(i int32) bool { k := s.Ops[i].Kind; return k == ir.Send || k == ir.Recv }
	const none = math.MaxInt32
	feed := make([]int32, n)
	for i := range feed {
		feed[i] = none
	}
	for i := n - 1; i >= 0; i-- { // dependents come after what they wait for
		g := feed[i]
		if isX(i) {
			g = of[rep(s, i)]
		}
		if g == none {
			continue
		}
		for _, d := range s.Deps(i) {
			if !isX(d) && g < feed[d] {
				feed[d] = g
			}
		}
	}
	bucket := make([]int32, n)
	for _, i := range order {
		if isX(i) {
			continue
		}
		b := of[i]
		for _, d := range s.Deps(i) {
			if !isX(d) {
				b = max(b, bucket[d])
			}
		}
		if feed[i] != none {
			b = max(b, feed[i])
		}
		bucket[i] = b
	}
	return bucket
}

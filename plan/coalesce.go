package plan

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"

	"github.com/m2n-project/m2n/ir"
)

// Coalesce says how small transfers are gathered into few large ones.
//
// Every send/recv costs a fixed time however small it is (NCCL pays about
// 10 us per call even inside a group on two H200s, docs/native.md), and a
// whole model has hundreds to thousands of small ones: scale tensors,
// norms, the parts of fused weights. The small transfers of one ordered
// pair of ranks that may run together (those of one dependency level, as
// NCCL groups cut them) are copied into one staging slab on the sender,
// moved by one send/recv, and copied out on the receiver: their copies run
// as the executor's batch launches. The zero value turns it off.
type Coalesce struct {
	// BelowBytes: a pair's transfer is small when the run of adjacent
	// transfers it belongs to (the chunks of one contiguous region, which
	// executors merge into one send/recv) holds fewer bytes than this.
	BelowBytes int64
	// SlabBytes is the most bytes one coalesced transfer carries.
	SlabBytes int64
	// BudgetBytes is the most slab memory one rank holds, its sending and
	// receiving slabs together; transfers past it stay as they are.
	BudgetBytes int64
	// WindowBytes bounds how far apart a slab's members are: from its
	// first to its last member, at most this many bytes of the pair's
	// other transfers of the level, so a small transfer moves at most
	// about that much later than it would alone (0: unbounded).
	WindowBytes int64
}

// DefaultCoalesce coalesces transfers below 1 MiB, in slabs of up to
// 64 MiB whose members lie within 1 GiB of the pair's traffic (about 3 ms
// over NVLink), with at most 256 MiB of slabs a rank. Below 1 MiB a transfer
// spends longer in NCCL's fixed cost (about 10 us) than moving its bytes
// over NVLink (1 MiB in 3.4 us at 313 GB/s), and a third of its time on a
// 400 Gb/s NIC; the two copies that replace it take about 1 us on the
// GPUs' memory. Larger transfers (a 4 MiB chunk: 13 us over NVLink, 84 us
// over a NIC) stay as they are.
var DefaultCoalesce = Coalesce{BelowBytes: 1 << 20, SlabBytes: 64 << 20, BudgetBytes: 256 << 20, WindowBytes: 1 << 30}

// On reports whether c coalesces anything.
func (c Coalesce) On() bool { return c.BelowBytes > 0 }

func (c Coalesce) validate() error {
	switch {
	case c.BelowBytes < 0 || c.SlabBytes < 0 || c.BudgetBytes < 0:
		return fmt.Errorf("coalesce: sizes must not be negative (below %d, slab %d, budget %d bytes)", c.BelowBytes, c.SlabBytes, c.BudgetBytes)
	case c.On() && (c.SlabBytes < c.BelowBytes || c.BudgetBytes < 2*c.SlabBytes):
		return fmt.Errorf("coalesce: a slab (%d bytes) must hold a small transfer (below %d bytes), and the budget (%d bytes) two slabs", c.SlabBytes, c.BelowBytes, c.BudgetBytes)
	}
	return nil
}

// slab is one coalesced transfer: the small transfers (their sends)
// it carries, and each one's offset in it.
type slab struct {
	from, to int32
	members  []int32 // sends
	offs     []int64
	bytes    int64
}

// coalesceSchedule returns s with its small transfers coalesced (see
// Coalesce), or s itself when nothing is coalesced, each rank holding at
// most its budget of slabs. s must be valid, with each send right before
// its recv (as the routes build them).
func coalesceSchedule(s *ir.Schedule, c Coalesce, budget map[int32]int64) (*ir.Schedule, error) {
	n := int32(len(s.Ops))
	// Levels, as NCCL groups are cut uncapped (program): a transfer
	// joins the level of the previous transfer of its own ordered pair it
	// depends on, and comes after any other transfer it depends on.
	lvl := make([]int32, n)
	for i := range n {
		op := &s.Ops[i]
		if isXfer(s, i) && op.Kind == ir.Recv {
			continue // with its send
		}
		ends := [2]int32{i, -1}
		if op.Kind == ir.Send {
			if op.Match != i+1 {
				return nil, fmt.Errorf("coalesce: op %d's recv is op %d, not the next op", i, op.Match)
			}
			ends[1] = op.Match
		}
		l := int32(0)
		for _, e := range ends {
			if e < 0 {
				continue
			}
			for _, d := range s.Deps(e) {
				switch {
				case !isXfer(s, d):
					l = max(l, lvl[d])
				case samePairKind(&s.Ops[d], &s.Ops[e]):
					l = max(l, lvl[sendOf(s, d)])
				default:
					l = max(l, lvl[sendOf(s, d)]+1)
				}
			}
		}
		if op.Kind != ir.Send {
			lvl[i] = l // a local op: the level of the transfers it may feed
			continue
		}
		lvl[i], lvl[i+1] = l, l
	}
	// Groups of one ordered pair and level, in send order: the small sends
	// sorted by (level, pair, id), each group a run of them. Only small
	// sends can be members; a group needs two.
	type key struct {
		from, to, lvl int32
	}
	type entry struct {
		key
		id int32
	}
	var cands []entry
	for i := range n {
		if op := &s.Ops[i]; op.Kind == ir.Send && op.Src.Bytes < c.BelowBytes {
			cands = append(cands, entry{key{op.Rank, op.Peer, lvl[i]}, i})
		}
	}
	if len(cands) < 2 {
		return s, nil
	}
	slices.SortFunc(cands, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.lvl, b.lvl), cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to), cmp.Compare(a.id, b.id))
	})
	// All the sends of each group with two cands ones or more, in order.
	groupOf := map[key][]int32{}
	var keys []key
	for a := 0; a < len(cands); {
		b := a + 1
		for b < len(cands) && cands[b].key == cands[a].key {
			b++
		}
		if b-a >= 2 {
			keys = append(keys, cands[a].key)
			groupOf[cands[a].key] = nil
		}
		a = b
	}
	if len(keys) == 0 {
		return s, nil
	}
	for i := range n {
		if op := &s.Ops[i]; op.Kind == ir.Send {
			k := key{op.Rank, op.Peer, lvl[i]}
			if g, ok := groupOf[k]; ok {
				groupOf[k] = append(g, i)
			}
		}
	}
	used := map[int32]int64{}
	var slabs []slab
	member := make([]int32, n) // send -> 1 + its slab; 0: not coalesced
	for _, k := range keys {
		g := groupOf[k]
		// Runs of adjacent transfers, the small ones, and where each
		// starts in the pair's bytes of the level.
		var small [][]int32
		var at []int64
		var pos int64
		for a := 0; a < len(g); {
			b, bytes := a+1, s.Ops[g[a]].Src.Bytes
			for b < len(g) && adjacentXfer(s, g[b-1], g[b]) {
				bytes += s.Ops[g[b]].Src.Bytes
				b++
			}
			if bytes < c.BelowBytes {
				small = append(small, g[a:b])
				at = append(at, pos)
			}
			pos += bytes
			a = b
		}
		if len(small) < 2 {
			continue
		}
		var cur []([]int32)
		var curBytes, first int64
		flush := func() {
			if len(cur) >= 2 {
				// Members whose size keeps 16-byte alignment first, so
				// every copy into and out of the slab moves 16 bytes an
				// access.
				slices.SortStableFunc(cur, func(a, b []int32) int {
					return cmp.Compare(alignRank(runBytes(s, a)), alignRank(runBytes(s, b)))
				})
				sl := slab{from: k.from, to: k.to}
				for _, run := range cur {
					for _, m := range run {
						sl.members = append(sl.members, m)
						sl.offs = append(sl.offs, sl.bytes)
						sl.bytes += s.Ops[m].Src.Bytes
					}
				}
				slabs = append(slabs, sl)
				for _, m := range sl.members {
					member[m] = int32(len(slabs))
				}
				used[k.from] += sl.bytes
				used[k.to] += sl.bytes
			}
			cur, curBytes = cur[:0], 0
		}
		for j, run := range small {
			b := runBytes(s, run)
			if curBytes+b > c.SlabBytes || len(cur) > 0 && c.WindowBytes > 0 && at[j]-first > c.WindowBytes {
				flush()
			}
			if used[k.from]+curBytes+b > budget[k.from] || used[k.to]+curBytes+b > budget[k.to] {
				break
			}
			if len(cur) == 0 {
				first = at[j]
			}
			cur = append(cur, run)
			curBytes += b
		}
		flush()
	}
	if len(slabs) == 0 {
		return s, nil
	}
	return rewrite(s, slabs, member)
}

// alignRank orders sizes by the alignment they keep: multiples of 16
// first, then of 8, 4, 2, and the rest.
func alignRank(b int64) int {
	for r, a := range []int64{16, 8, 4, 2} {
		if b%a == 0 {
			return r
		}
	}
	return 4
}

func runBytes(s *ir.Schedule, run []int32) int64 {
	var b int64
	for _, m := range run {
		b += s.Ops[m].Src.Bytes
	}
	return b
}

// adjacentXfer reports whether transfer b (a send) continues transfer a on
// both sides: byte ranges of the same buffers, b's starting where a's end.
func adjacentXfer(s *ir.Schedule, a, b int32) bool {
	sa, sb := &s.Ops[a], &s.Ops[b]
	ra, rb := &s.Ops[sa.Match], &s.Ops[sb.Match]
	if sa.Src.IsBox() || sb.Src.IsBox() || ra.Dst.IsBox() || rb.Dst.IsBox() {
		return false
	}
	return sa.Src.Buf == sb.Src.Buf && sa.Src.Offset+sa.Src.Bytes == sb.Src.Offset &&
		ra.Dst.Buf == rb.Dst.Buf && ra.Dst.Offset+ra.Dst.Bytes == rb.Dst.Offset
}

// Nodes of the rewritten schedule, before they are ordered.
const (
	nOrig    = iota // an op of s (a transfer: its send and recv together)
	nGather         // the copy of a member's bytes into its slab
	nSlab           // a slab's send and recv
	nScatter        // the copy of a member's bytes out of the slab
)

type cnode struct {
	kind int8
	op   int32 // nOrig, nGather, nScatter: the op (for a member, its send); nSlab: the slab
	key  int32 // order among the ready: the original position
	sub  int8
}

// rewrite builds the coalesced schedule: per member, a copy into its slab
// (with the send's dependencies) and a copy out (after the slab's recv,
// with the recv's); per slab, one send after its copies in and its recv.
// A dependency on a member's send becomes one on its copy in (which reads
// what the send read), on a member's recv one on its copy out (which
// writes what the recv wrote). Dependencies that only order two
// transfers of one pair, one of them a member, become what the data needs
// (see chain below). The ops are emitted in a topological order close to
// the original.
func rewrite(s *ir.Schedule, slabs []slab, member []int32) (*ir.Schedule, error) {
	n := int32(len(s.Ops))
	isMember := func(i int32) bool { return isXfer(s, i) && member[sendOf(s, i)] > 0 }
	// Node IDs: nodes of s's ops first (by op; a recv shares its send's),
	// then per member a gather and a scatter, then one per slab.
	var nodes []cnode
	nodeOf := make([]int32, n) // op -> its node (members: -1)
	gatherOf := map[int32]int32{}
	scatterOf := map[int32]int32{}
	for i := range n {
		nodeOf[i] = -1
		switch {
		case isMember(i):
		case s.Ops[i].Kind == ir.Recv:
			nodeOf[i] = nodeOf[s.Ops[i].Match]
		default:
			nodeOf[i] = int32(len(nodes))
			nodes = append(nodes, cnode{kind: nOrig, op: i, key: i, sub: 1})
		}
	}
	slabNode := make([]int32, len(slabs))
	for k := range slabs {
		for _, m := range slabs[k].members {
			gatherOf[m] = int32(len(nodes))
			nodes = append(nodes, cnode{kind: nGather, op: m, key: m, sub: 0})
			scatterOf[m] = int32(len(nodes))
			nodes = append(nodes, cnode{kind: nScatter, op: m, key: m + 1, sub: 2})
		}
		slabNode[k] = int32(len(nodes))
		nodes = append(nodes, cnode{kind: nSlab, op: int32(k), key: slices.Max(slabs[k].members), sub: 1})
	}
	// target is the node a dependency on op d becomes.
	target := func(d int32) int32 {
		if isMember(d) {
			if s.Ops[d].Kind == ir.Send {
				return gatherOf[d]
			}
			return scatterOf[s.Ops[d].Match]
		}
		return nodeOf[d]
	}
	// chain: a dependency of end e on d, the previous send or recv of its
	// pair, one of them coalesced. It only orders the two, and kept it
	// would order a coalesced transfer's copies behind the transfers of the
	// pair before it (one level each, and for a recv a cycle: a later
	// transfer of the pair, left alone, would wait for a coalesced recv's
	// copy out, which waits for its slab, which waits for the copy in of a
	// member after that transfer). A recv's data dependents wait for it
	// directly: its chain is dropped. A pair's later sends may inherit
	// what the first waited for (nemo-legacy's ring sends a gathered
	// tensor in chunks, only the first waiting for its writers), so a
	// send's chain is replaced by the writers of the bytes it reads, where
	// its buffer is written once per byte (every buffer m2n builds without
	// a staging cap); in an arena it stays, through the copy in. Under a
	// staging cap a recv's dependency on the pair's previous recv can also
	// be the reuse of arena bytes that recv wrote (plan/staging.go): that
	// one stays, on the member's copy out, which now writes those bytes.
	chain := func(e, d int32) bool {
		return isXfer(s, d) && samePairKind(&s.Ops[e], &s.Ops[d]) && (isMember(e) || isMember(d))
	}
	wr := newWriters(s, func(visit func(buf int32)) {
		for e := range n {
			if s.Ops[e].Kind != ir.Send {
				continue
			}
			for _, d := range s.Deps(e) {
				if chain(e, d) {
					visit(s.Ops[e].Src.Buf)
					break
				}
			}
		}
	})
	// deps calls f with each op end e's dependencies become (ops of s, or
	// members' ends, mapped by the caller).
	deps := func(e int32, f func(d int32)) {
		for _, d := range s.Deps(e) {
			if !isXfer(s, e) || !chain(e, d) {
				f(d)
				continue
			}
			if s.Ops[e].Kind == ir.Recv {
				if reuses(s, e, d) {
					f(d) // the bytes d wrote are reused: not a mere chain
				}
				continue
			}
			src := s.Ops[e].Src
			if !wr.static(src.Buf) {
				f(d)
				continue
			}
			wr.each(src, f)
		}
	}
	// Edges, node to the nodes it waits for.
	waits := make([][]int32, len(nodes))
	addDeps := func(nd int32, e int32) {
		deps(e, func(d int32) { waits[nd] = append(waits[nd], target(d)) })
	}
	for i := range n {
		switch {
		case isMember(i):
			if s.Ops[i].Kind == ir.Send {
				addDeps(gatherOf[i], i)
			} else {
				m := s.Ops[i].Match
				addDeps(scatterOf[m], i)
				waits[scatterOf[m]] = append(waits[scatterOf[m]], slabNode[member[m]-1])
			}
		default:
			addDeps(nodeOf[i], i)
		}
	}
	for k := range slabs {
		for _, m := range slabs[k].members {
			waits[slabNode[k]] = append(waits[slabNode[k]], gatherOf[m])
		}
	}
	// Topological order, the smallest original position first.
	succ := make([][]int32, len(nodes))
	indeg := make([]int32, len(nodes))
	for v := range waits {
		slices.Sort(waits[v])
		waits[v] = slices.Compact(waits[v])
		for _, u := range waits[v] {
			if u == int32(v) {
				return nil, fmt.Errorf("coalesce: node %d waits for itself (a bug in m2n)", v)
			}
			succ[u] = append(succ[u], int32(v))
			indeg[v]++
		}
	}
	h := &nodeHeap{nodes: nodes}
	for v := range nodes {
		if indeg[v] == 0 {
			heap.Push(h, int32(v))
		}
	}
	out := &ir.Schedule{Route: s.Route, ChunkBytes: s.ChunkBytes, World: s.World, Tensors: s.Tensors,
		Buffers: slices.Clone(s.Buffers), BoxPool: s.BoxPool}
	out.Ops = make([]ir.Op, 0, len(s.Ops)+len(slabs)*2)
	newID := make([]int32, n)           // op of s -> its op in out
	nodeID := make([]int32, len(nodes)) // node -> the op dependents wait for (a transfer's: the end chosen by the dependent)
	for i := range nodeID {
		nodeID[i] = -1
	}
	// Slab buffers, on each side.
	slabBuf := make([][2]int32, len(slabs))
	for k, sl := range slabs {
		for side, r := range [2]int32{sl.from, sl.to} {
			slabBuf[k][side] = int32(len(out.Buffers))
			out.Buffers = append(out.Buffers, ir.Buffer{ID: len(out.Buffers), Rank: int(r), Kind: ir.Staging, Tensor: -1, Bytes: sl.bytes})
		}
	}
	memberOff := map[int32]int64{}
	for _, sl := range slabs {
		for j, m := range sl.members {
			memberOff[m] = sl.offs[j]
		}
	}
	// depsOf maps the dependencies of end e to ops of out.
	var scratch []int32
	depsOf := func(e int32) []int32 {
		scratch = scratch[:0]
		deps(e, func(d int32) {
			if isMember(d) {
				scratch = append(scratch, nodeID[target(d)])
			} else {
				scratch = append(scratch, newID[d])
			}
		})
		slices.Sort(scratch)
		return slices.Compact(scratch)
	}
	emitted := 0
	for h.Len() > 0 {
		v := heap.Pop(h).(int32)
		emitted++
		nd := &nodes[v]
		switch nd.kind {
		case nOrig:
			i := nd.op
			op := s.Ops[i]
			if op.Kind == ir.Send {
				r := s.Ops[op.Match]
				sd := slices.Clone(depsOf(i))
				rd := depsOf(op.Match)
				send := out.AddOp(op, sd...)
				recv := out.AddOp(r, rd...)
				out.Ops[send].Match, out.Ops[recv].Match = recv, send
				newID[i], newID[op.Match] = send, recv
				nodeID[v] = send
				break
			}
			id := out.AddOp(op, depsOf(i)...)
			if op.Kind == ir.Quantize {
				if out.QuantScale == nil {
					out.QuantScale = map[int32]ir.Region{}
				}
				out.QuantScale[id] = s.QuantScale[i]
			}
			newID[i], nodeID[v] = id, id
		case nGather:
			m := nd.op
			sl := member[m] - 1
			src := s.Ops[m].Src
			dst := ir.Region{Buf: slabBuf[sl][0], Offset: memberOff[m], Bytes: src.Bytes}
			nodeID[v] = out.AddOp(ir.Op{Kind: ir.Copy, Rank: s.Ops[m].Rank, Peer: -1, Match: -1, Src: src, Dst: dst}, depsOf(m)...)
		case nScatter:
			m := nd.op
			sl := member[m] - 1
			r := s.Ops[m].Match
			dst := s.Ops[r].Dst
			src := ir.Region{Buf: slabBuf[sl][1], Offset: memberOff[m], Bytes: dst.Bytes}
			deps := append(slices.Clone(depsOf(r)), nodeID[slabNode[sl]]+1) // the slab's recv
			slices.Sort(deps)
			nodeID[v] = out.AddOp(ir.Op{Kind: ir.Copy, Rank: s.Ops[r].Rank, Peer: -1, Match: -1, Src: src, Dst: dst}, slices.Compact(deps)...)
		case nSlab:
			sl := &slabs[nd.op]
			var gd []int32
			for _, m := range sl.members {
				gd = append(gd, nodeID[gatherOf[m]])
			}
			slices.Sort(gd)
			send := out.AddOp(ir.Op{Kind: ir.Send, Rank: sl.from, Peer: sl.to, Src: ir.Region{Buf: slabBuf[nd.op][0], Bytes: sl.bytes}}, gd...)
			recv := out.AddOp(ir.Op{Kind: ir.Recv, Rank: sl.to, Peer: sl.from, Dst: ir.Region{Buf: slabBuf[nd.op][1], Bytes: sl.bytes}})
			out.Ops[send].Match, out.Ops[recv].Match = recv, send
			nodeID[v] = send
		}
		for _, w := range succ[v] {
			if indeg[w]--; indeg[w] == 0 {
				heap.Push(h, w)
			}
		}
	}
	if emitted != len(nodes) {
		return nil, fmt.Errorf("coalesce: the rewritten schedule has a cycle (a bug in m2n)")
	}
	return out, nil
}

type nodeHeap struct {
	nodes []cnode
	h     []int32
}

func (h *nodeHeap) Len() int { return len(h.h) }
func (h *nodeHeap) Less(i, j int) bool {
	a, b := &h.nodes[h.h[i]], &h.nodes[h.h[j]]
	return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.sub, b.sub), cmp.Compare(h.h[i], h.h[j])) < 0
}
func (h *nodeHeap) Swap(i, j int) { h.h[i], h.h[j] = h.h[j], h.h[i] }
func (h *nodeHeap) Push(x any)    { h.h = append(h.h, x.(int32)) }
func (h *nodeHeap) Pop() any {
	x := h.h[len(h.h)-1]
	h.h = h.h[:len(h.h)-1]
	return x
}

// writers indexes, for the buffers a caller names, the ops that write
// each byte: a buffer is static when no byte of it is written twice and it
// is not in an arena.
type writers struct {
	s       *ir.Schedule
	spans   map[int32][]wspan
	dynamic map[int32]bool
}

type wspan struct {
	lo, hi int64
	op     int32
}

// newWriters indexes the writes of the buffers names visits.
func newWriters(s *ir.Schedule, names func(visit func(buf int32))) *writers {
	w := &writers{s: s, spans: map[int32][]wspan{}, dynamic: map[int32]bool{}}
	names(func(buf int32) {
		if _, ok := w.spans[buf]; !ok {
			w.spans[buf] = nil
		}
		if s.Buffers[buf].InArena {
			w.dynamic[buf] = true
		}
	})
	if len(w.spans) == 0 {
		return w
	}
	add := func(i int32, r ir.Region) {
		sp, ok := w.spans[r.Buf]
		if !ok || w.dynamic[r.Buf] {
			return
		}
		if !r.IsBox() {
			w.spans[r.Buf] = append(sp, wspan{r.Offset, r.Offset + r.Bytes, i})
			return
		}
		b := &s.Buffers[r.Buf]
		elem := s.BufElem(r.Buf)
		s.Box(r).ForEachRun(b.Box.Size, func(lo, n int64) { sp = append(sp, wspan{lo * elem, (lo + n) * elem, i}) })
		w.spans[r.Buf] = sp
	}
	for i := range int32(len(s.Ops)) {
		switch op := &s.Ops[i]; op.Kind {
		case ir.Send:
		case ir.Quantize:
			add(i, op.Dst)
			add(i, s.QuantScale[i])
		default:
			add(i, op.Dst)
		}
	}
	for buf, sp := range w.spans {
		slices.SortFunc(sp, func(a, b wspan) int { return cmp.Compare(a.lo, b.lo) })
		for k := 1; k < len(sp); k++ {
			if sp[k].lo < sp[k-1].hi {
				w.dynamic[buf] = true
			}
		}
	}
	return w
}

// static reports whether every byte of buf is written at most once (buf
// must be one the index was built for).
func (w *writers) static(buf int32) bool {
	_, ok := w.spans[buf]
	return ok && !w.dynamic[buf]
}

// each calls f with every op that writes a byte of byte range r of a
// static buffer.
func (w *writers) each(r ir.Region, f func(op int32)) {
	sp := w.spans[r.Buf]
	k, _ := slices.BinarySearchFunc(sp, r.Offset, func(a wspan, off int64) int {
		if a.hi <= off {
			return -1
		}
		return 1
	})
	for ; k < len(sp) && sp[k].lo < r.Offset+r.Bytes; k++ {
		f(sp[k].op)
	}
}

// isXfer reports whether op i is a send or a recv.
func isXfer(s *ir.Schedule, i int32) bool { k := s.Ops[i].Kind; return k == ir.Send || k == ir.Recv }

// sendOf is the send of the transfer op i belongs to (i itself for a send).
func sendOf(s *ir.Schedule, i int32) int32 {
	if s.Ops[i].Kind == ir.Recv {
		return s.Ops[i].Match
	}
	return i
}

// reuses reports whether recv e writes arena bytes of its rank that recv d
// wrote: e's dependency on d is then the staging cap's ordering of their
// writes, not only the order of the pair's transfers.
func reuses(s *ir.Schedule, e, d int32) bool {
	be, bd := &s.Buffers[s.Ops[e].Dst.Buf], &s.Buffers[s.Ops[d].Dst.Buf]
	if !be.InArena || !bd.InArena || be.Rank != bd.Rank {
		return false
	}
	lo1, hi1 := arenaBytes(s, s.Ops[e].Dst)
	lo2, hi2 := arenaBytes(s, s.Ops[d].Dst)
	return lo1 < hi2 && lo2 < hi1
}

// arenaBytes is the span of arena bytes a region of an arena buffer covers
// (a box: from its first byte to its last).
func arenaBytes(s *ir.Schedule, rg ir.Region) (lo, hi int64) {
	buf := &s.Buffers[rg.Buf]
	if !rg.IsBox() {
		return buf.ArenaOffset + rg.Offset, buf.ArenaOffset + rg.Offset + rg.Bytes
	}
	box, elem := s.Box(rg), s.BufElem(rg.Buf)
	var first, last int64
	for d, n := range buf.Box.Size {
		first = first*n + box.Start[d]
		last = last*n + box.Start[d] + box.Size[d] - 1
	}
	return buf.ArenaOffset + first*elem, buf.ArenaOffset + (last+1)*elem
}

// samePairKind reports whether two sends (or two recvs) are of one ordered
// pair of ranks.
func samePairKind(a, b *ir.Op) bool { return a.Kind == b.Kind && a.Rank == b.Rank && a.Peer == b.Peer }

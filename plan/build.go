package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
)

// DefaultChunkBytes is the default pipelining chunk: large enough that a
// 10 us network op latency costs under 12% of a chunk's 87 us at 48 GB/s,
// small enough to split a 56 MiB contribution into 14 pipelined steps.
const DefaultChunkBytes = 4 << 20

// Options tune how a schedule is built.
type Options struct {
	Route      string // one of Routes
	ChunkBytes int64  // 0 means DefaultChunkBytes
	// StagingCapBytes bounds the staging memory of each rank (each GPU):
	// staging is reused once consumed, at the cost of more ordering. 0
	// means unlimited (every staging byte written once).
	StagingCapBytes int64
	// MaxOps bounds the ops of the schedule; 0 means DefaultMaxOps. A
	// schedule that would have more is refused before it is built, from
	// its chunk counts ([OpsLimitError]).
	MaxOps int64
	// MaxMemoryBytes bounds the memory planning may take, projected from
	// the op count before anything is built (OpBytes an op); 0: no bound.
	// The command line sets it to the machine's memory.
	MaxMemoryBytes int64
	// Coalesce gathers small transfers of one ordered pair into few large
	// ones through staging slabs (its zero value: off; the command line's
	// default is DefaultCoalesce). Under a staging cap the slabs take at
	// most what the cap leaves on each rank.
	Coalesce Coalesce
}

// Build plans a schedule that moves every tensor from its source layout to
// its destination layout over the topology, by the named route, and
// verifies it. A schedule failing verification is never returned.
func Build(tensors []ir.Tensor, tp *topo.Topology, opt Options) (*ir.Schedule, error) {
	s, verify, err := BuildDeferred(tensors, tp, opt)
	if err != nil {
		return nil, err
	}
	if err := verify(); err != nil {
		return nil, err
	}
	return s, nil
}

// BuildDeferred is [Build] with the costlier part of the verification
// left to the caller: the schedule it returns has passed the structural
// checks a simulator needs to run it ([ir.Schedule.ValidateStages]), and
// verify runs the data flow check, returning the error Build would. A
// caller may simulate the schedule while verify runs, but must call it
// and trust nothing of the schedule until it returns nil. verify checks
// once; later calls return the first call's error.
func BuildDeferred(tensors []ir.Tensor, tp *topo.Topology, opt Options) (s *ir.Schedule, verify func() error, err error) {
	s, err = buildUnverified(tensors, tp, opt)
	if err != nil {
		return nil, nil, err
	}
	invalid := func(err error) error {
		if errors.Is(err, ir.ErrTooLarge) {
			return err
		}
		return fmt.Errorf("route %s built an invalid schedule (a bug in m2n): %w", opt.Route, err)
	}
	dataflow, err := s.ValidateStages()
	if err != nil {
		return nil, nil, invalid(err)
	}
	var (
		once sync.Once
		verr error
	)
	return s, func() error {
		once.Do(func() {
			if err := dataflow(); err != nil {
				verr = invalid(err)
			}
		})
		return verr
	}, nil
}

// buildUnverified plans a schedule, unverified.
func buildUnverified(tensors []ir.Tensor, tp *topo.Topology, opt Options) (*ir.Schedule, error) {
	if opt.ChunkBytes == 0 {
		opt.ChunkBytes = DefaultChunkBytes
	}
	if opt.ChunkBytes < 0 {
		return nil, fmt.Errorf("chunk size %d: must be positive", opt.ChunkBytes)
	}
	if opt.MaxOps == 0 {
		opt.MaxOps = DefaultMaxOps
	}
	if opt.MaxOps < 0 {
		return nil, fmt.Errorf("ops limit %d: must be positive", opt.MaxOps)
	}
	if opt.StagingCapBytes < 0 {
		return nil, fmt.Errorf("staging cap %d: must be positive, or 0 for none", opt.StagingCapBytes)
	}
	rt, err := lookup(opt.Route)
	if err != nil {
		return nil, err
	}
	if len(tensors) == 0 {
		return nil, errors.New("no tensors to move")
	}
	if err := tp.Validate(); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	b := newBuilder(tp, opt)
	b.route, b.gathers = rt.builder(b), rt.gathers()
	sched, moved, site, entries, err := expand(tensors, rt)
	if err != nil {
		return nil, err
	}
	b.mv, b.site = moved, site
	var ranks []int
	for ti, t := range sched {
		b.s.Tensors = append(b.s.Tensors, t)
		if site[ti] == scaleAtDest { // written by its weight's quantize ops
			b.regions = append(b.regions, nil)
			continue
		}
		r, err := derive(moved[ti].Src, moved[ti].Dst, opt.MaxOps)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		b.regions = append(b.regions, r)
		if e, ok := entries[ti]; ok {
			if e.regions, err = derive(e.spread.Src, e.spread.Dst, opt.MaxOps); err != nil {
				return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			entries[ti] = e
		}
		ranks = append(ranks, t.Src.Mesh.Ranks...)
		ranks = append(ranks, t.Dst.Mesh.Ranks...)
	}
	tensors = moved
	if err := tp.CheckRanks(ranks); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	b.world(ranks)
	// Buffers no GPU holds, before anything is built: a rank's shard, and
	// the whole tensor that agbcast and nemo-legacy gather on one rank.
	for ti, t := range tensors {
		r := b.regions[ti]
		if r == nil {
			continue
		}
		need, what := int64(0), ""
		for _, sl := range append(r.SrcSlots[:len(r.SrcSlots):len(r.SrcSlots)], r.DstSlots...) {
			if n := sl.Box.Elems() * t.Src.DType.Size(); n > need {
				need, what = n, "a rank's shard is"
			}
		}
		if rt.gathers() {
			need, what = t.Src.Bytes(), "route "+opt.Route+" gathers the whole tensor on one rank,"
		}
		if need > ir.MaxBufferBytes {
			return nil, fmt.Errorf("tensor %s: %s %d bytes: %w (at most %d bytes, 1 TiB, per buffer)", t.Name, what, need, ir.ErrTooLarge, ir.MaxBufferBytes)
		}
	}
	// The ops limit, from the chunk counts, before anything is built.
	var ops int64
	b.min = make([]int64, len(tensors))
	for ti := range tensors {
		if b.regions[ti] == nil {
			continue
		}
		b.min[ti] = b.route.minOps(ti, opt.MaxOps-ops)
		if ops = addSat(ops, b.min[ti]); ops > opt.MaxOps {
			return nil, &OpsLimitError{Route: opt.Route, Ops: ops, Limit: opt.MaxOps, Chunk: opt.ChunkBytes}
		}
	}
	b.minAll = ops
	if opt.MaxMemoryBytes > 0 && ops > opt.MaxMemoryBytes/OpBytes {
		return nil, &MemoryLimitError{Route: opt.Route, Ops: ops, Bytes: satMul(ops, OpBytes), Limit: opt.MaxMemoryBytes, Chunk: opt.ChunkBytes}
	}
	b.maxOps = opt.MaxOps
	// Where the route counts its ops from the geometry (agbcast,
	// nemo-legacy), the op pool is allocated once.
	size := ops
	var counted int64
	for ti := range tensors {
		if b.regions[ti] != nil {
			counted += b.route.count(ti)
		}
	}
	size = max(size, counted)
	b.counted = counted
	// make, not slices.Grow: its append clears the new capacity, faulting
	// in memory the runtime hands out zeroed already. At most
	// maxPrealloc up front: past it the pools grow as ops come.
	b.s.Ops = make([]ir.Op, 0, min(size, maxPrealloc))
	b.s.DepPool = make([]int32, 0, min(ops, maxPrealloc))
	if err := b.build(tensors, entries); err != nil {
		return nil, err
	}
	if b.cap != nil {
		if err := b.capErr(); err != nil {
			return nil, err
		}
	}
	s := b.finish()
	if opt.Coalesce.On() {
		if err := opt.Coalesce.validate(); err != nil {
			return nil, err
		}
		budget := map[int32]int64{}
		staging := s.StagingByRank()
		for _, r := range s.World {
			budget[int32(r.Rank)] = opt.Coalesce.BudgetBytes
			if opt.StagingCapBytes > 0 {
				budget[int32(r.Rank)] = min(opt.Coalesce.BudgetBytes, max(0, opt.StagingCapBytes-staging[r.Rank]))
			}
		}
		cs, err := coalesceSchedule(s, opt.Coalesce, budget)
		if err != nil {
			return nil, err
		}
		if int64(len(cs.Ops)) > opt.MaxOps {
			return nil, &OpsLimitError{Route: opt.Route, Ops: int64(len(cs.Ops)), Limit: opt.MaxOps, Chunk: opt.ChunkBytes}
		}
		s = cs
	}
	return s, nil
}

// build routes every tensor. A schedule that passes the ops limit while
// it is built (the limit counted from chunks is a lower bound: packs,
// unpacks and forwarding come on top) stops there with an
// [OpsLimitError].
func (b *builder) build(tensors []ir.Tensor, entries map[int]entry) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if r != errOverLimit {
				panic(r)
			}
			err = &OpsLimitError{Route: b.s.Route, Ops: int64(len(b.s.Ops)) + 1, Limit: b.maxOps, Chunk: b.s.ChunkBytes}
		}
	}()
	for ti := range tensors {
		if b.regions[ti] == nil {
			continue
		}
		b.building = ti
		if b.gathers {
			b.wave(ti, b.route.emit)
		} else {
			b.route.emit(ti)
		}
		switch b.site[ti] {
		case quantAtDest:
			b.quantizeAtDest(ti)
		case quantAtEntry:
			b.spread(ti, b.quantizeAtDest(ti), entries[ti])
		}
		b.minDone += b.min[ti]
		b.built = pools{len(b.s.Ops), len(b.s.DepPool), len(b.s.BoxPool)}
		if !b.projected && b.minDone > 0 && b.built.ops > 0 {
			b.project()
		}
	}
	return nil
}

// project gives the schedule's pools, once the first tensor is built, the
// room room projects for the whole schedule, so that a pool projected
// past what was allocated up front is copied while it holds one tensor
// rather than when it fills (on scaling-dsv3's 2,048-GPU point: the
// first 16.8M ops, 1.2 GB, copied, after faulting all of them in). Its
// slack is 1/16, not room's 1/64: one tensor need not be typical (on
// dsv3-256 hierarchical the embedding projects 817,152 ops of 840,400),
// and a pool that fills near the end is copied whole (there 830K ops,
// 0.6 s of a 3.5 s run on the 2-core VM: a copy into fresh pages faults
// them in). Capacity never written is never faulted in.
func (b *builder) project() {
	b.projected = true
	proj := func(n int) int {
		p := n + b.rest(n)
		return p + p/16
	}
	s := b.s
	// A route that counted its ops was allocated them up front (all but
	// quantizes: those grow the pool as room says). No more ops than the
	// limit lets add take.
	if ops := min(proj(len(s.Ops)), int(min(b.maxOps, math.MaxInt32))); b.counted == 0 && ops > cap(s.Ops) {
		s.Ops = growTo(s.Ops, ops)
	}
	if p := proj(len(s.DepPool)); p > cap(s.DepPool) {
		s.DepPool = growTo(s.DepPool, p)
	}
	if p := proj(len(s.BoxPool)); p > cap(s.BoxPool) {
		s.BoxPool = growTo(s.BoxPool, p)
	}
	// The buffers, projected the same way: appended one at a time, they
	// doubled, each copy into fresh pages (0.25 s of dsv3-256 agbcast).
	if p := proj(len(s.Buffers)); p > cap(s.Buffers) {
		s.Buffers = growTo(s.Buffers, p)
	}
}

// errOverLimit is what add panics with when the schedule passes the ops
// limit; build recovers it into an OpsLimitError.
var errOverLimit = errors.New("over the ops limit")

// maxPrealloc is the most ops (and dependencies) whose room is allocated
// before they are built.
const maxPrealloc = 1 << 24

// lane is, per rank of the world, the last op of a per-rank lane of ops
// that run in order (-1: none yet).
type lane []int32

// perRank is, per rank of the world, the buffer of the tensor being built
// (stamp: the tensor's index + 1; an entry of another tensor is absent).
type perRank []struct{ stamp, id int32 }

// builder appends buffers and ops in dependency order, so op IDs are a
// topological order by construction.
type builder struct {
	s       *ir.Schedule
	tp      *topo.Topology
	regions []*Regions // per tensor of the schedule; nil for a scale tensor written at the destination

	// Quantized tensors (plan/quant.go): per tensor of the schedule, the
	// tensor as the route moves it (its dtype on the wire) and where it is
	// quantized.
	mv       []ir.Tensor
	site     []quantSite
	qin      map[int64]quantIn // (weight, source rank) -> its quantized copy
	pre      []int32           // per buffer, 1 + the quantize op that writes it (0: none)
	landings []landing         // the landing buffers of the tensor being built
	writers  map[int32][]int32 // per landing buffer, the ops that write it

	wi              *layout.RankIndex  // rank -> its index in the world
	inputs, outputs perRank            // the current tensor's buffers
	staging         []int32            // per rank, its unplaced staging buffer (-1: none)
	pairLast        map[int64][2]int32 // per ordered pair of ranks, its last send and recv
	packLast        lane               // packs run in order
	unpackLast      lane               // unpacks run in order
	copyLast        lane               // local copies (input to output or gathered copy, no transfer) run in order

	// Pool growth ([builder.room]): per tensor, the ops minOps counts for
	// it; their sum over the schedule (minAll) and over the tensors done
	// so far (minDone); the pools' lengths when the last tensor was done.
	min             []int64
	minAll, minDone int64
	built           pools
	projected       bool  // project has run
	counted         int64 // the ops the route counted from the geometry (all but quantizes); 0: not counted

	// presetOut: outputs made before their tensor is routed, by (tensor,
	// rank): a scale tensor's, written by its weight's quantize at the
	// source straight into the outputs (quantOutputs).
	presetOut map[int64]int32
	building  int   // the tensor being routed
	maxOps    int64 // the ops limit: add stops the build past it

	cap *capper // nil when staging is not capped
	// route builds each tensor's ops; gathers: it gathers whole tensors,
	// one wave each under a cap.
	route   routeBuilder
	gathers bool
	// rel and part are the boxes sub and intersect return, reused by the
	// next call: the schedule's pool keeps a copy of each box it stores.
	rel, part layout.Box
	scratch   []int32
	nodeOf    []int32 // paths' scratch, per rank (zero between calls)
	sdeps     []int32 // scratch for dependency lists being extended
	rdeps     []int32
	one       [1]int32
}

// add appends an op with its dependencies (sorted and made unique) and
// returns its ID.
func (b *builder) add(op ir.Op, deps []int32) int32 {
	if int64(len(b.s.Ops)) >= b.maxOps {
		panic(errOverLimit)
	}
	d := append(b.scratch[:0], deps...)
	// Reading a quantized copy waits for its quantize.
	if op.Kind != ir.Recv && int(op.Src.Buf) < len(b.pre) && b.pre[op.Src.Buf] > 0 {
		d = append(d, b.pre[op.Src.Buf]-1)
	}
	if len(b.landings) > 0 && op.Kind != ir.Send {
		if w, ok := b.writers[op.Dst.Buf]; ok {
			b.writers[op.Dst.Buf] = append(w, int32(len(b.s.Ops)))
		}
	}
	slices.Sort(d)
	d = slices.Compact(d)
	b.scratch = d
	if s := b.s; len(s.Ops) == cap(s.Ops) {
		s.Ops = growTo(s.Ops, b.room(len(s.Ops), 1, b.built.ops))
	}
	if s := b.s; cap(s.DepPool)-len(s.DepPool) < len(d) {
		s.DepPool = growTo(s.DepPool, b.room(len(s.DepPool), len(d), b.built.deps))
	}
	return b.s.AddOp(op, d...)
}

// pools are the lengths of the schedule's pools: its ops, dependencies
// and box values.
type pools struct{ ops, deps, boxes int }

// room returns the capacity to give a pool of the schedule that holds n
// elements and needs extra more: its projected final length. The tensors
// not yet done will add to it as the tensors done so far did (built
// elements), in proportion to their minOps; slack of 1/64 absorbs a
// projection a little short. Before any tensor is done, or when the
// projection falls short, the pool doubles. For a whole-model schedule,
// one copy to the projected length replaces doubling, which copied pools
// of hundreds of MB and left up to half of them unused.
func (b *builder) room(n, extra, built int) int {
	if b.minDone > 0 && built > 0 {
		if p := n + b.rest(built); p >= n+extra+n/64 {
			return p + p/64
		}
	}
	return n + max(extra, n, 1024)
}

// rest is how many more elements a pool will take for the tensors not
// yet built, given the built elements of the tensors done: the same per
// unit of minOps (minDone > 0).
func (b *builder) rest(built int) int {
	return int(float64(b.minAll-b.minDone) * float64(built) / float64(b.minDone))
}

// growTo returns a copy of s with capacity for n elements.
func growTo[E any](s []E, n int) []E {
	out := make([]E, len(s), n)
	copy(out, s)
	return out
}

// sub returns global box g relative to box outer's start, valid until the
// next call.
func (b *builder) sub(outer, g layout.Box) layout.Box {
	out := reuse(&b.rel, len(g.Size))
	for d := range g.Size {
		out.Start[d] = g.Start[d] - outer.Start[d]
		out.Size[d] = g.Size[d]
	}
	return out
}

// intersect is layout.Box.Intersect with the result valid until the next
// call.
func (b *builder) intersect(x, y layout.Box) (layout.Box, bool) {
	if !meets(x, y) {
		return layout.Box{}, false
	}
	nd := len(x.Size)
	out := reuse(&b.part, nd)
	for d := range nd {
		lo := max(x.Start[d], y.Start[d])
		out.Start[d], out.Size[d] = lo, min(x.Start[d]+x.Size[d], y.Start[d]+y.Size[d])-lo
	}
	return out, true
}

// meets reports whether boxes x and y share an element.
func meets(x, y layout.Box) bool {
	for d := range x.Size {
		if min(x.Start[d]+x.Size[d], y.Start[d]+y.Size[d]) <= max(x.Start[d], y.Start[d]) {
			return false
		}
	}
	return true
}

// reuse returns scratch box *x resized to rank nd, allocating it only when
// it is too small.
func reuse(x *layout.Box, nd int) layout.Box {
	if cap(x.Size) < nd {
		*x = layout.NewBox(nd)
	}
	x.Start, x.Size = x.Start[:nd], x.Size[:nd]
	return *x
}

func newBuilder(tp *topo.Topology, opt Options) *builder {
	var c *capper
	if opt.StagingCapBytes > 0 {
		c = newCapper(opt.StagingCapBytes)
	}
	return &builder{
		cap:      c,
		s:        &ir.Schedule{Route: opt.Route, ChunkBytes: opt.ChunkBytes},
		tp:       tp,
		pairLast: map[int64][2]int32{},
		qin:      map[int64]quantIn{}, writers: map[int32][]int32{},
	}
}

func (b *builder) world(ranks []int) {
	sort.Ints(ranks)
	ranks = slices.Compact(ranks)
	b.s.World = make([]ir.Rank, len(ranks))
	for i, r := range ranks {
		b.s.World[i] = ir.Rank{Rank: r, GPU: b.tp.GPU(r), Domain: b.tp.Domain(r)}
	}
	b.wi = layout.NewRankIndex(ranks)
	n := len(ranks)
	b.inputs, b.outputs = make(perRank, n), make(perRank, n)
	b.staging, b.packLast, b.unpackLast, b.copyLast = make([]int32, n), make(lane, n), make(lane, n), make(lane, n)
	for i := range n {
		b.staging[i], b.packLast[i], b.unpackLast[i], b.copyLast[i] = -1, -1, -1, -1
	}
}

func (b *builder) finish() *ir.Schedule { return b.s }

// elem is the element size of tensor ti as the route moves it.
func (b *builder) elem(ti int) int64 { return b.mv[ti].Src.DType.Size() }

func (b *builder) placed(kind ir.BufferKind, ti, rank int, box layout.Box) int32 {
	id := int32(len(b.s.Buffers))
	b.s.Buffers = append(b.s.Buffers, ir.Buffer{ID: int(id), Rank: rank, Kind: kind, Tensor: ti, Box: box.Clone(), Bytes: box.Elems() * b.elem(ti), DType: b.bufDType(ti, b.mv[ti].Src.DType)})
	if buf := &b.s.Buffers[id]; kind == ir.Staging && b.cap != nil {
		buf.InArena, buf.ArenaOffset = true, b.cap.take(rank, buf.Bytes, true)
	}
	return id
}

// input returns the input buffer of a tensor on a source rank.
func (b *builder) input(ti, rank int) int32 {
	e := &b.inputs[b.wi.Pos(rank)]
	if e.stamp == int32(ti)+1 {
		return e.id
	}
	if b.site[ti] == quantAtSource {
		return b.quantInput(ti, rank)
	}
	r := b.regions[ti]
	id := b.placed(ir.Input, ti, rank, r.SrcSlots[r.SrcSlotOf(rank)].Box)
	e.stamp, e.id = int32(ti)+1, id
	return id
}

// output returns the output buffer of a tensor on a destination rank.
func (b *builder) output(ti, rank int) int32 {
	e := &b.outputs[b.wi.Pos(rank)]
	if e.stamp == int32(ti)+1 {
		return e.id
	}
	if id, ok := b.presetOut[int64(ti)<<32|int64(rank)]; ok { // a scale output its weight's quantize writes
		e.stamp, e.id = int32(ti)+1, id
		return id
	}
	r := b.regions[ti]
	slot, _ := r.DstSlotOf(rank)
	var id int32
	if s := b.site[ti]; s == quantAtDest || s == quantAtEntry { // lands in the source dtype, then is quantized
		id = b.placedAs(ir.Staging, ti, rank, r.DstSlots[slot].Box, b.mv[ti].Dst.DType)
		b.landings = append(b.landings, landing{rank, id})
		b.writers[id] = nil
	} else {
		id = b.placed(ir.Output, ti, rank, r.DstSlots[slot].Box)
	}
	e.stamp, e.id = int32(ti)+1, id
	return id
}

// alloc reserves n bytes of a rank's staging buffer.
func (b *builder) alloc(rank int, n int64) ir.Region {
	w := b.wi.Pos(rank)
	id := b.staging[w]
	if id < 0 {
		id = int32(len(b.s.Buffers))
		b.s.Buffers = append(b.s.Buffers, ir.Buffer{ID: int(id), Rank: rank, Kind: ir.Staging, Tensor: -1, InArena: b.cap != nil})
		b.staging[w] = id
	}
	if b.cap != nil { // placed in the arena when the wave ends
		return ir.Region{Buf: id, Offset: b.cap.take(rank, n, false), Bytes: n}
	}
	buf := &b.s.Buffers[id]
	r := ir.Region{Buf: id, Offset: buf.Bytes, Bytes: n}
	buf.Bytes += n
	return r
}

// boxIn returns the region of a global box inside a placed buffer, as a
// byte range when the box is contiguous there and as a box otherwise.
func (b *builder) boxIn(buf int32, g layout.Box) (ir.Region, bool) {
	B := &b.s.Buffers[buf]
	elem := b.elem(B.Tensor)
	if count, _ := g.Runs(B.Box.Size); count == 1 {
		off := int64(0)
		for d := range B.Box.Size {
			off = off*B.Box.Size[d] + g.Start[d] - B.Box.Start[d]
		}
		return ir.Region{Buf: buf, Offset: off * elem, Bytes: g.Elems() * elem}, true
	}
	return ir.Region{Buf: buf, Bytes: g.Elems() * elem, BoxRef: b.addBox(b.sub(B.Box, g))}, false
}

func (b *builder) op(kind ir.OpKind, rank int, deps []int32, src, dst ir.Region) int32 {
	return b.add(ir.Op{Kind: kind, Rank: int32(rank), Peer: -1, Match: -1, Src: src, Dst: dst}, deps)
}

// laneOp adds a local op that also runs after the last op of a per-rank lane,
// and makes it the lane's last.
func (b *builder) laneOp(last lane, kind ir.OpKind, rank int, deps []int32, src, dst ir.Region) int32 {
	w := b.wi.Pos(rank)
	if l := last[w]; l >= 0 {
		b.sdeps = append(append(b.sdeps[:0], deps...), l)
		deps = b.sdeps
	}
	id := b.op(kind, rank, deps, src, dst)
	last[w] = id
	return id
}

// xfer adds a send from rank from and its recv on rank to. Transfers
// between one ordered pair run in order, as on one NCCL stream per peer.
func (b *builder) xfer(from, to int, src, dst ir.Region, sdeps, rdeps []int32) (send, recv int32) {
	p := int64(from)<<32 | int64(to)
	if last, ok := b.pairLast[p]; ok {
		b.sdeps = append(append(b.sdeps[:0], sdeps...), last[0])
		sdeps = b.sdeps
		b.rdeps = append(append(b.rdeps[:0], rdeps...), last[1])
		rdeps = b.rdeps
	}
	send = int32(len(b.s.Ops))
	recv = send + 1
	b.add(ir.Op{Kind: ir.Send, Rank: int32(from), Peer: int32(to), Match: recv, Src: src}, sdeps)
	b.add(ir.Op{Kind: ir.Recv, Rank: int32(to), Peer: int32(from), Match: send, Dst: dst}, rdeps)
	b.pairLast[p] = [2]int32{send, recv}
	return send, recv
}

// sendable returns a contiguous region holding global box g of tensor ti on
// source rank s, and the op that must precede reading it (-1 for none),
// packing it into staging when it is strided in the input. Packs are cached
// per (rank, contribution, chunk) so a chunk sent to several ranks is packed
// once.
func (b *builder) sendable(ti, s int, g layout.Box, key packKey, cache map[packKey]packed) (ir.Region, int32) {
	in := b.input(ti, s)
	if r, ok := b.boxIn(in, g); ok {
		return r, -1
	}
	if p, ok := cache[key]; ok {
		return p.region, p.op
	}
	src, _ := b.boxIn(in, g)
	dst := b.alloc(s, src.Bytes)
	id := b.laneOp(b.packLast, ir.Pack, s, nil, src, dst)
	cache[key] = packed{dst, id}
	return dst, id
}

// dep returns a dependency list of one op, or none for -1. The list is
// valid until the next call.
func (b *builder) dep(op int32) []int32 {
	if op < 0 {
		return nil
	}
	b.one[0] = op
	return b.one[:]
}

// packKey names a packed chunk: a source rank, a contribution, a chunk.
type packKey struct{ rank, contrib, chunk int }

type packed struct {
	region ir.Region
	op     int32
}

// landing returns where rank d receives global box g of tensor ti: straight
// into its output when contiguous there, else into staging followed by an
// unpack (added by land once the recv exists).
func (b *builder) landing(ti, d int, g layout.Box) (ir.Region, bool) {
	out := b.output(ti, d)
	if r, ok := b.boxIn(out, g); ok {
		return r, true
	}
	return b.alloc(d, g.Elems()*b.elem(ti)), false
}

// land adds the unpack of a chunk that landed in staging.
func (b *builder) land(ti, d int, g layout.Box, at ir.Region, direct bool, recv int32) {
	if direct {
		return
	}
	dst, _ := b.boxIn(b.output(ti, d), g)
	b.laneOp(b.unpackLast, ir.Unpack, d, []int32{recv}, at, dst)
}

// localCopy copies global box g from rank d's input to its output; nothing
// when they are one buffer (an entry replica's quantized output, the
// source of its spread).
func (b *builder) localCopy(ti, d int, g layout.Box) {
	if b.input(ti, d) == b.output(ti, d) {
		return
	}
	src, sc := b.boxIn(b.input(ti, d), g)
	dst, dc := b.boxIn(b.output(ti, d), g)
	if sc != dc { // one side contiguous, the other strided: copy as boxes
		src = b.boxAsBox(b.input(ti, d), g)
		dst = b.boxAsBox(b.output(ti, d), g)
	}
	// Its own lane: chained behind unpacks, which wait for the network, a
	// rank's local copies would run last instead of beside the transfers.
	b.laneOp(b.copyLast, ir.Copy, d, nil, src, dst)
}

// addBox stores a box in the schedule's pool, growing it to its projected
// final length ([builder.room]).
func (b *builder) addBox(g layout.Box) int32 {
	if s := b.s; cap(s.BoxPool)-len(s.BoxPool) < 2*len(g.Size) {
		s.BoxPool = growTo(s.BoxPool, b.room(len(s.BoxPool), 2*len(g.Size), b.built.boxes))
	}
	return b.s.AddBox(g)
}

// boxAsBox is the box form of a global box in a placed buffer.
func (b *builder) boxAsBox(buf int32, g layout.Box) ir.Region {
	B := &b.s.Buffers[buf]
	return ir.Region{Buf: buf, Bytes: g.Elems() * b.elem(B.Tensor), BoxRef: b.addBox(b.sub(B.Box, g))}
}

// chunkGrid is how Chunks cuts a box: the dim d it splits (the outermost
// whose single index fits in a chunk, else the innermost), the indices of d
// a chunk holds at most (per), and the pieces of d per index of the outer
// dims.
func chunkGrid(g layout.Box, elem, chunkBytes int64) (d int, per, pieces int64) {
	nd := g.Rank()
	row := elem // the bytes of one index of dim d
	for ; d < nd; d++ {
		row = elem
		for k := d + 1; k < nd; k++ {
			row *= g.Size[k]
		}
		if row <= chunkBytes {
			break
		}
	}
	if d == nd {
		d, row = nd-1, elem
	}
	per = max(chunkBytes/row, 1)
	return d, per, (g.Size[d] + per - 1) / per
}

// Chunks splits a box into pieces of at most chunkBytes (use [ChunkCount]
// for only their number): along the
// outermost dim whose single index fits in a chunk, with every outer dim
// taken one index at a time. Each piece is contiguous in a row-major array
// whose inner dims the box spans fully.
func Chunks(g layout.Box, elem, chunkBytes int64) []layout.Box {
	nd := g.Rank()
	d, per, pieces := chunkGrid(g, elem, chunkBytes)
	// Balance the pieces of dim d: as many as needed, of near-equal size.
	per = (g.Size[d] + pieces - 1) / pieces
	n := pieces
	for k := range d {
		n *= g.Size[k]
	}
	out := make([]layout.Box, 0, n)
	backing := make([]int64, 2*nd*int(n))
	idx := make([]int64, d)
	for {
		for lo := int64(0); lo < g.Size[d]; lo += per {
			c := layout.Box{Start: backing[:nd:nd], Size: backing[nd : 2*nd : 2*nd]}
			backing = backing[2*nd:]
			copy(c.Start, g.Start)
			copy(c.Size, g.Size)
			for k := range d {
				c.Start[k] = g.Start[k] + idx[k]
				c.Size[k] = 1
			}
			c.Start[d] = g.Start[d] + lo
			c.Size[d] = min(per, g.Size[d]-lo)
			out = append(out, c)
		}
		k := d - 1
		for ; k >= 0; k-- {
			idx[k]++
			if idx[k] < g.Size[k] {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return out
		}
	}
}

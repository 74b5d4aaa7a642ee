package ir

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/m2n-project/m2n/model/layout"
)

// Validate checks that the schedule is well formed and moves exactly the
// right bytes:
//
//   - the world, tensors and buffers are consistent: every input buffer holds
//     its rank's source box, every destination rank with a non-empty box has
//     one output buffer holding its destination box;
//   - every region lies inside its buffer, on the op's own rank; a send is
//     matched by exactly one recv of equal size on its peer, and per ordered
//     pair of ranks sends and recvs match in ID order;
//   - dependencies point to earlier ops, and the graph with each send and
//     recv pair merged is acyclic (no deadlock);
//   - data flow: every byte an op reads was written by ops that happen
//     before it; staging bytes are written at most once and input bytes
//     never; every output byte is written exactly once, with the source byte
//     of the same global element.
//
// It returns the first problem found.
func (s *Schedule) Validate() error {
	dataflow, err := s.ValidateStages()
	if err != nil {
		return err
	}
	return dataflow()
}

// ValidateStages is [Schedule.Validate] in two steps. It checks now what
// running the schedule needs (the world, tensors and buffers, every
// region, the matching of sends and recvs, and dependencies that point
// back with no cycle) and returns the rest, the data flow check, to run
// later: a simulator can run the schedule while it does (on dsv3-256's
// hierarchical schedule the data flow is about three quarters of the
// check: `sim.test -test.bench 'WorkloadPlan/dsv3-256/hierarchical'
// -test.cpuprofile`, docs/performance.md). The two together return what Validate returns. The schedule
// must not change until the returned check has run; it reads the
// schedule only, so it may run beside other readers.
func (s *Schedule) ValidateStages() (dataflow func() error, err error) {
	v := &validator{s: s}
	if err := v.structure(); err != nil {
		return nil, err
	}
	if err := v.acyclic(); err != nil {
		return nil, err
	}
	return v.dataflow, nil
}

type validator struct {
	s       *Schedule
	world   *layout.RankIndex // rank -> its index in s.World
	scaleOf []int             // per tensor, its scale tensor; -1 when none

	writes [][]span // per static buffer, the spans ops write, sorted
	// boxw holds, per static placed buffer whose writes are all boxes, the
	// boxes written (sorted by their first dim's start, reach the running
	// largest end of that dim) instead of writes' spans: a strided box is
	// one entry, not a span per run. Anything amiss falls back to the spans
	// (spansOf), so every error reads as the spans' check says it.
	boxw    [][]boxWrite
	reach   [][]int64
	content map[int32][]seg // per op writing unplaced staging, what it wrote
	spaceOf []int32         // per buffer, its dynamic space in spaces; -1 when static
	spaces  []space
	memo    []int32 // per op x, w+1 once x was found to happen before op w
	seen    []int32 // per op w, x+1 once w was found to happen before op x
	stamp   []int32 // per op, the epoch it was last visited in before()
	direct  []int32 // per op d, x+1 once d was found to be a dependency of op x
	marked  int32   // x+1: the op whose dependencies direct marks
	// hub[x] is h+1 once a writer was found to happen before op x as a
	// dependency of op h (x itself, or an op before it); hubDeps marks the
	// dependencies of op hubMarked-1.
	hub       []int32
	hubDeps   []int32
	hubMarked int32
	epoch     int32
	// node maps an op to its node in the graph with each send/recv pair
	// merged (the pair's smaller ID); order ranks the nodes topologically
	// (nil when ID order is topological already, as m2n's builders emit).
	node  []int32
	order []int32
	stack []int32
	boxes layout.BoxArena // boxes of the content of unplaced staging
	tmp   layout.BoxArena // boxes of one step of dataflow, reset at the next
	one   [1]seg          // scratch for single-segment reads
	// meshPos caches, per mesh rank list, each rank's position in it, so
	// looking up a buffer's rank costs O(1) whatever the mesh's size.
	meshPos map[meshKey]*layout.RankIndex
}

// meshKey names a mesh's rank list by its backing array and length.
type meshKey struct {
	first *int
	n     int
}

func (v *validator) opErr(i int32, format string, args ...any) error {
	op := &v.s.Ops[i]
	return fmt.Errorf("op %d (%s on rank %d): %s", i, op.Kind, op.Rank, fmt.Sprintf(format, args...))
}

func (v *validator) structure() error {
	s := v.s
	gpus := make([]int, len(s.World))
	for i, r := range s.World {
		if i > 0 && r.Rank <= s.World[i-1].Rank {
			return fmt.Errorf("world: ranks must be ascending and distinct (rank %d after %d)", r.Rank, s.World[i-1].Rank)
		}
		if r.Rank < 0 || r.GPU < 0 || r.Domain < 0 {
			return fmt.Errorf("world: rank %d: rank, gpu and domain must be non-negative", r.Rank)
		}
		gpus[i] = r.GPU
	}
	// Two ranks on one GPU: the GPUs as a rank list, indexed, have fewer
	// distinct entries than ranks.
	gi := layout.NewRankIndex(gpus)
	for i, g := range gpus {
		if gi.Pos(g) == i {
			continue
		}
		// Name the first rank whose GPU an earlier rank has.
		first := map[int]int{}
		for _, r := range s.World {
			if o, dup := first[r.GPU]; dup {
				return fmt.Errorf("world: ranks %d and %d are both on GPU %d", o, r.Rank, r.GPU)
			}
			first[r.GPU] = r.Rank
		}
	}
	ranks := make([]int, len(s.World))
	for i, r := range s.World {
		ranks[i] = r.Rank
	}
	v.world = layout.NewRankIndex(ranks)
	if s.ChunkBytes <= 0 {
		return fmt.Errorf("chunk_bytes = %d: must be positive", s.ChunkBytes)
	}
	for i, t := range s.Tensors {
		for side, l := range []layout.Layout{t.Src, t.Dst} {
			if err := l.Validate(); err != nil {
				return fmt.Errorf("tensors[%d] (%s) %s: %w", i, t.Name, [2]string{"src", "dst"}[side], err)
			}
			for _, r := range l.Mesh.Ranks {
				if v.world.Pos(r) < 0 {
					return fmt.Errorf("tensors[%d] (%s): rank %d is not in the world", i, t.Name, r)
				}
			}
		}
		if !slices.Equal(t.Src.Shape, t.Dst.Shape) {
			return fmt.Errorf("tensors[%d] (%s): source and destination differ in shape", i, t.Name)
		}
		if !t.Quant.On() && t.Src.DType != t.Dst.DType {
			return fmt.Errorf("tensors[%d] (%s): source dtype %v and destination dtype %v differ, and the tensor is not quantized", i, t.Name, t.Src.DType, t.Dst.DType)
		}
	}
	if err := v.quantTensors(); err != nil {
		return err
	}
	// Per tensor, which source and destination mesh positions have their
	// input and output buffer.
	inputs, outputs := make([][]bool, len(s.Tensors)), make([][]bool, len(s.Tensors))
	mark := func(seen [][]bool, ti, pos, n int) bool {
		if seen[ti] == nil {
			seen[ti] = make([]bool, n)
		}
		dup := seen[ti][pos]
		seen[ti][pos] = true
		return dup
	}
	// Per rank of the world, its own buffers' bytes and its arena's extent.
	mem, arena := make([]int64, len(s.World)), make([]int64, len(s.World))
	for i := range s.Buffers {
		b := &s.Buffers[i]
		if b.ID != i {
			return fmt.Errorf("buffers[%d]: id %d, want %d", i, b.ID, i)
		}
		if v.world.Pos(b.Rank) < 0 {
			return fmt.Errorf("buffer %d: rank %d is not in the world", i, b.Rank)
		}
		if b.Kind < Input || b.Kind > Staging {
			return fmt.Errorf("buffer %d: kind %v", i, b.Kind)
		}
		if b.Bytes < 0 {
			return fmt.Errorf("buffer %d: %d bytes", i, b.Bytes)
		}
		if b.InArena && b.Kind != Staging {
			return fmt.Errorf("buffer %d: arena_offset on an %s buffer: only staging shares an arena", i, b.Kind)
		}
		if b.InArena && (b.ArenaOffset < 0 || b.ArenaOffset > math.MaxInt64-b.Bytes) {
			return fmt.Errorf("buffer %d: arena_offset %d out of range", i, b.ArenaOffset)
		}
		if end := b.Bytes + b.ArenaOffset; b.Bytes > MaxBufferBytes || (b.InArena && end > MaxBufferBytes) {
			what := fmt.Sprintf("%d bytes", b.Bytes)
			if b.InArena {
				what = fmt.Sprintf("%d bytes at arena offset %d", b.Bytes, b.ArenaOffset)
			}
			return fmt.Errorf("buffer %d (%s on rank %d): %s: %w (at most %d bytes, 1 TiB, per buffer)", i, b.Kind, b.Rank, what, ErrTooLarge, MaxBufferBytes)
		}
		w := v.world.Pos(b.Rank)
		if b.InArena {
			arena[w] = max(arena[w], b.Bytes+b.ArenaOffset)
		} else {
			mem[w] += b.Bytes
		}
		if n := mem[w] + arena[w]; n > MaxRankBytes { // checked as it grows: no overflow
			return fmt.Errorf("rank %d: its buffers take at least %d bytes: %w (at most %d bytes, 16 TiB, per rank)", b.Rank, n, ErrTooLarge, MaxRankBytes)
		}
		if !b.Placed() {
			if b.Kind != Staging {
				return fmt.Errorf("buffer %d: an %s buffer must name its tensor and box", i, b.Kind)
			}
			continue
		}
		if b.Tensor >= len(s.Tensors) {
			return fmt.Errorf("buffer %d: tensor %d out of range", i, b.Tensor)
		}
		t := &s.Tensors[b.Tensor]
		full := layout.Box{Start: make([]int64, len(t.Src.Shape)), Size: t.Src.Shape}
		if b.Box.Rank() != len(full.Size) || len(b.Box.Start) != len(full.Size) || b.Box.Empty() || !full.Contains(b.Box) {
			return fmt.Errorf("buffer %d: box %v is not a non-empty box of tensor %s %v", i, b.Box, t.Name, t.Src.Shape)
		}
		dt := s.BufDType(int32(i))
		if dt != t.Src.DType && dt != t.Dst.DType {
			return fmt.Errorf("buffer %d: dtype %v, but tensor %s is %v (source) and %v (destination)", i, dt, t.Name, t.Src.DType, t.Dst.DType)
		}
		if (b.Kind == Input && dt != t.Src.DType) || (b.Kind == Output && dt != t.Dst.DType) {
			return fmt.Errorf("buffer %d: an %s of %s in %v", i, b.Kind, t.Name, dt)
		}
		if b.Kind == Input && t.ScaleOf > 0 {
			return fmt.Errorf("buffer %d: an input of scale tensor %s: quantize ops write scales, no rank holds them before", i, t.Name)
		}
		if want := b.Box.Elems() * dt.Size(); b.Bytes != want {
			return fmt.Errorf("buffer %d: %d bytes, but box %v of %v is %d", i, b.Bytes, b.Box, dt, want)
		}
		if b.Kind == Input || b.Kind == Output {
			// An input holds its rank's source box, an output its
			// destination box, each once.
			l, side, seen := &t.Src, "source", inputs
			if b.Kind == Output {
				l, side, seen = &t.Dst, "destination", outputs
			}
			pos := v.meshIndex(l.Mesh, b.Rank)
			if pos < 0 || !l.LocalBox(pos).Equal(b.Box) {
				return fmt.Errorf("buffer %d: %s of rank %d holds %v, which is not its %s box of %s", i, b.Kind, b.Rank, b.Box, side, t.Name)
			}
			if mark(seen, b.Tensor, pos, len(l.Mesh.Ranks)) {
				return fmt.Errorf("buffer %d: a second %s of %s on rank %d", i, b.Kind, t.Name, b.Rank)
			}
		}
	}
	for ti, t := range s.Tensors {
		for pos, r := range t.Dst.Mesh.Ranks {
			if t.Dst.LocalBox(pos).Empty() {
				continue
			}
			if outputs[ti] == nil || !outputs[ti][pos] {
				return fmt.Errorf("tensor %s: destination rank %d has no output buffer", t.Name, r)
			}
		}
	}
	for i := range s.Ops {
		if err := v.op(int32(i)); err != nil {
			return err
		}
	}
	return v.pairOrder()
}

func (v *validator) op(i int32) error {
	s := v.s
	op := &s.Ops[i]
	if v.world.Pos(int(op.Rank)) < 0 {
		return v.opErr(i, "rank is not in the world")
	}
	if op.DepOff < 0 || op.DepLen < 0 || int64(op.DepOff)+int64(op.DepLen) > int64(len(s.DepPool)) {
		return v.opErr(i, "dependency list [%d, +%d) outside the pool", op.DepOff, op.DepLen)
	}
	for _, d := range s.Deps(i) {
		if d < 0 || d >= i {
			return v.opErr(i, "dependency %d does not precede it", d)
		}
	}
	region := func(r Region, what string, write bool) error {
		if r.Buf < 0 || int(r.Buf) >= len(s.Buffers) {
			return v.opErr(i, "%s buffer %d out of range", what, r.Buf)
		}
		b := &s.Buffers[r.Buf]
		if b.Rank != int(op.Rank) {
			return v.opErr(i, "%s buffer %d is on rank %d", what, r.Buf, b.Rank)
		}
		if write && b.Kind == Input {
			return v.opErr(i, "writes input buffer %d", r.Buf)
		}
		if r.Bytes <= 0 {
			return v.opErr(i, "%s region of %d bytes", what, r.Bytes)
		}
		if !r.IsBox() {
			if r.Offset < 0 || r.Offset > b.Bytes-r.Bytes {
				return v.opErr(i, "%s bytes [%d, %d) outside buffer %d of %d bytes", what, r.Offset, r.Offset+r.Bytes, r.Buf, b.Bytes)
			}
			return nil
		}
		if !b.Placed() {
			return v.opErr(i, "%s box in unplaced buffer %d", what, r.Buf)
		}
		nd := int64(b.Box.Rank())
		if r.BoxRef < 1 || int64(r.BoxRef)-1+2*nd > int64(len(s.BoxPool)) {
			return v.opErr(i, "%s box reference %d outside the pool", what, r.BoxRef)
		}
		box := s.Box(r)
		local := layout.Box{Start: make([]int64, b.Box.Rank()), Size: b.Box.Size}
		if box.Empty() || !local.Contains(box) {
			return v.opErr(i, "%s box %v outside buffer %d (box size %v)", what, box, r.Buf, b.Box.Size)
		}
		if want := box.Elems() * s.BufElem(r.Buf); r.Bytes != want {
			return v.opErr(i, "%s box %v is %d bytes, region says %d", what, box, want, r.Bytes)
		}
		return nil
	}
	switch op.Kind {
	case Send, Recv:
		r, what, write := op.Src, "src", false
		if op.Kind == Recv {
			r, what, write = op.Dst, "dst", true
		}
		if err := region(r, what, write); err != nil {
			return err
		}
		if r.IsBox() {
			return v.opErr(i, "%s must be a byte range", what)
		}
		if v.world.Pos(int(op.Peer)) < 0 || op.Peer == op.Rank {
			return v.opErr(i, "peer %d is not another rank of the world", op.Peer)
		}
		if op.Match < 0 || int(op.Match) >= len(s.Ops) {
			return v.opErr(i, "match %d out of range", op.Match)
		}
		m := &s.Ops[op.Match]
		want := Recv
		if op.Kind == Recv {
			want = Send
		}
		if m.Kind != want || m.Match != i || m.Rank != op.Peer || m.Peer != op.Rank {
			return v.opErr(i, "match %d is not its %s on rank %d", op.Match, want, op.Peer)
		}
		mr := m.Src
		if want == Recv {
			mr = m.Dst
		}
		if mr.Bytes != r.Bytes {
			return v.opErr(i, "moves %d bytes but its match %d moves %d", r.Bytes, op.Match, mr.Bytes)
		}
	case Copy, Pack, Unpack:
		if err := region(op.Src, "src", false); err != nil {
			return err
		}
		if err := region(op.Dst, "dst", true); err != nil {
			return err
		}
		if op.Src.Bytes != op.Dst.Bytes {
			return v.opErr(i, "src is %d bytes, dst %d", op.Src.Bytes, op.Dst.Bytes)
		}
		switch {
		case op.Kind == Pack && (!op.Src.IsBox() || op.Dst.IsBox()):
			return v.opErr(i, "pack copies a box to a byte range")
		case op.Kind == Unpack && (op.Src.IsBox() || !op.Dst.IsBox()):
			return v.opErr(i, "unpack copies a byte range to a box")
		case op.Kind == Copy && op.Src.IsBox() != op.Dst.IsBox():
			return v.opErr(i, "copy joins two byte ranges or two boxes")
		case op.Kind == Copy && op.Src.IsBox() && !slices.Equal(s.Box(op.Src).Size, s.Box(op.Dst).Size):
			return v.opErr(i, "copy boxes differ in size: %v and %v", s.Box(op.Src).Size, s.Box(op.Dst).Size)
		}
		if op.Peer != -1 || op.Match != -1 {
			return v.opErr(i, "peer and match belong to send and recv only")
		}
	case Quantize:
		sc := s.QuantScale[i]
		if err := region(op.Src, "src", false); err != nil {
			return err
		}
		if err := region(op.Dst, "dst", true); err != nil {
			return err
		}
		if err := region(sc, "scale", true); err != nil {
			return err
		}
		b := &s.Buffers[op.Src.Buf]
		if !b.Placed() || !s.Tensors[b.Tensor].Quant.On() || s.BufDType(op.Src.Buf) != s.Tensors[b.Tensor].Src.DType {
			return v.opErr(i, "quantizes buffer %d, which does not hold a quantized tensor in its source dtype", op.Src.Buf)
		}
		if op.Peer != -1 || op.Match != -1 {
			return v.opErr(i, "peer and match belong to send and recv only")
		}
	default:
		return v.opErr(i, "unknown kind")
	}
	return nil
}

// quantTensors checks quantized tensors and scale tensors: a quantized
// tensor has a valid scheme, a destination that holds whole blocks or
// lands them (layout.LandingLayout), and exactly one scale tensor, whose
// shape, dtype and layouts derive from it.
func (v *validator) quantTensors() error {
	s := v.s
	v.scaleOf = make([]int, len(s.Tensors))
	for i := range v.scaleOf {
		v.scaleOf[i] = -1
	}
	for i := range s.Tensors {
		t := &s.Tensors[i]
		if t.ScaleOf == 0 {
			continue
		}
		if t.Quant.On() {
			return fmt.Errorf("tensors[%d] (%s): a scale tensor is not quantized itself", i, t.Name)
		}
		w := t.ScaleOf - 1
		if w < 0 || w >= len(s.Tensors) || !s.Tensors[w].Quant.On() {
			return fmt.Errorf("tensors[%d] (%s): scale_of %d is not a quantized tensor", i, t.Name, w)
		}
		if v.scaleOf[w] >= 0 {
			return fmt.Errorf("tensors[%d] (%s): tensor %s already has scale tensor %s", i, t.Name, s.Tensors[w].Name, s.Tensors[v.scaleOf[w]].Name)
		}
		v.scaleOf[w] = i
	}
	for i := range s.Tensors {
		t := &s.Tensors[i]
		if !t.Quant.On() {
			continue
		}
		if err := layout.ValidateQuant(t.Src.DType, t.Dst.DType, t.Src.Shape, t.Quant); err != nil {
			return fmt.Errorf("tensors[%d] (%s): %w", i, t.Name, err)
		}
		if t.Quant.Scheme == layout.QuantShard {
			if q, err := t.Quant.ForLayout(t.Dst); err != nil {
				return fmt.Errorf("tensors[%d] (%s) dst: %w", i, t.Name, err)
			} else if q.Block != t.Quant.Block {
				return fmt.Errorf("tensors[%d] (%s).quant.block = %v: shard scales' block is the destination's shard, %v", i, t.Name, t.Quant.Block, q.Block)
			}
		}
		land, err := layout.LandingLayout(t.Dst, t.Quant)
		if err != nil {
			return fmt.Errorf("tensors[%d] (%s) dst: %w", i, t.Name, err)
		}
		want, err := layout.ScaleLayout(land, t.Quant)
		if err != nil {
			return fmt.Errorf("tensors[%d] (%s) dst: %w (a bug in m2n: its landing layout cuts blocks)", i, t.Name, err)
		}
		k := v.scaleOf[i]
		if k < 0 {
			return fmt.Errorf("tensors[%d] (%s): quantized, but no tensor holds its scales (scale_of %d)", i, t.Name, i)
		}
		sc := &s.Tensors[k]
		srcWant := layout.Layout{Shape: want.Shape, DType: layout.FP32, Mesh: t.Src.Mesh, Placements: t.Src.Placements}
		if !sameLayout(sc.Dst, want) || !sameLayout(sc.Src, srcWant) {
			return fmt.Errorf("tensors[%d] (%s): its layouts are not those of %s's scales (%v to %v)", k, sc.Name, t.Name, srcWant, want)
		}
	}
	return nil
}

// sameLayout reports whether two layouts are equal.
func sameLayout(a, b layout.Layout) bool {
	return slices.Equal(a.Shape, b.Shape) && a.DType == b.DType && slices.Equal(a.Mesh.Shape, b.Mesh.Shape) &&
		slices.Equal(a.Mesh.Ranks, b.Mesh.Ranks) && slices.Equal(a.Placements, b.Placements)
}

// pairOrder checks that, for each ordered pair of ranks, the sends from one
// to the other and the recvs there match in ID order, as NCCL's per-peer
// FIFO matching requires.
func (v *validator) pairOrder() error {
	// The sends of a pair are matched by its recvs (op checked that), so
	// they match in order exactly when, taken in ID order, their recvs
	// ascend: one pass with the last recv per pair, and the counts below
	// only to name the culprit.
	last := map[int64]int32{}
	ok := true
	for i := range v.s.Ops {
		op := &v.s.Ops[i]
		if op.Kind != Send {
			continue
		}
		k := int64(op.Rank)<<32 | int64(uint32(op.Peer))
		if l, seen := last[k]; seen && op.Match < l {
			ok = false
			break
		}
		last[k] = op.Match
	}
	if ok {
		return nil
	}
	// The k-th send from a to b must match the k-th recv on b from a.
	seq := make([]int32, len(v.s.Ops))
	sends, recvs := map[int64]int32{}, map[int64]int32{}
	for i := range v.s.Ops {
		op := &v.s.Ops[i]
		switch op.Kind {
		case Send:
			k := int64(op.Rank)<<32 | int64(op.Peer)
			seq[i] = sends[k]
			sends[k]++
		case Recv:
			k := int64(op.Peer)<<32 | int64(op.Rank)
			seq[i] = recvs[k]
			recvs[k]++
		}
	}
	for i := range v.s.Ops {
		op := &v.s.Ops[i]
		if op.Kind == Send && seq[i] != seq[op.Match] {
			return fmt.Errorf("sends from rank %d to rank %d and the recvs there do not match in order (send %d is the %d-th send, its recv the %d-th recv)", op.Rank, op.Peer, i, seq[i], seq[op.Match])
		}
	}
	return nil
}

// acyclic checks that the dependency graph, with each send and its recv
// merged into one transfer, has no cycle: every transfer can start.
func (v *validator) acyclic() error {
	s := v.s
	n := int32(len(s.Ops))
	node := make([]int32, n) // op -> node (the smaller ID of a pair)
	for i := range n {
		node[i] = i
		if m := s.Ops[i].Match; m >= 0 && m < i {
			node[i] = m
		}
	}
	// When every dependency's node precedes its op's node, node IDs are a
	// topological order, so the graph is acyclic (as m2n's builders emit
	// it); otherwise record the order Kahn's algorithm finds.
	idOrder := true
	for i := range n {
		for _, d := range s.Deps(i) {
			if node[d] == node[i] {
				return v.opErr(i, "depends on its own matching %s", s.Ops[d].Kind)
			}
			idOrder = idOrder && node[d] < node[i]
		}
	}
	v.node = node
	if idOrder {
		return nil
	}
	v.order = make([]int32, n)
	indeg := make([]int32, n)
	start := make([]int32, n+1) // successors of node a: succ[start[a]:start[a+1]]
	for i := range n {
		for _, d := range s.Deps(i) {
			start[node[d]+1]++
			indeg[node[i]]++
		}
	}
	for a := range n {
		start[a+1] += start[a]
	}
	succ := make([]int32, start[n])
	fill := append([]int32(nil), start[:n]...)
	for i := range n {
		for _, d := range s.Deps(i) {
			a := node[d]
			succ[fill[a]] = node[i]
			fill[a]++
		}
	}
	var queue []int32
	nodes := 0
	for i := range n {
		if node[i] == i {
			nodes++
			if indeg[i] == 0 {
				queue = append(queue, i)
			}
		}
	}
	done := 0
	for len(queue) > 0 {
		a := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		v.order[a] = int32(done)
		done++
		for _, b := range succ[start[a]:start[a+1]] {
			if indeg[b]--; indeg[b] == 0 {
				queue = append(queue, b)
			}
		}
	}
	if done != nodes {
		for i := range n {
			if node[i] == i && indeg[i] > 0 {
				return v.opErr(i, "is on a dependency cycle through a send/recv pair (deadlock)")
			}
		}
		return errors.New("dependency cycle")
	}
	return nil
}

// meshIndex returns the position of a rank in a mesh, or -1 when it is not
// in it. Each mesh's index is built once (tensors sharing a rank list share
// it), so the lookups of all buffers cost linear time in the meshes' sizes.
func (v *validator) meshIndex(m layout.Mesh, rank int) int {
	if len(m.Ranks) == 0 {
		return -1
	}
	key := meshKey{&m.Ranks[0], len(m.Ranks)}
	idx, ok := v.meshPos[key]
	if !ok {
		idx = layout.NewRankIndex(m.Ranks)
		if v.meshPos == nil {
			v.meshPos = map[meshKey]*layout.RankIndex{}
		}
		v.meshPos[key] = idx
	}
	return idx.Pos(rank)
}

// span is a half-open byte range of a buffer and the op that wrote it.
type span struct {
	lo, hi int64
	op     int32
}

func sortSpans(sp []span) {
	slices.SortFunc(sp, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
}

// CheckRankLocal reports the first dependency that a one-process-per-rank
// executor cannot wait on from the op's own rank: one on an op of another
// rank, unless that op is a send or recv whose matching op is on the op's
// rank (the transfer completes both at once). Validate allows any
// dependency; every route m2n builds passes this check too.
func (s *Schedule) CheckRankLocal() error {
	for i := range s.Ops {
		op := &s.Ops[i]
		for _, d := range s.Deps(int32(i)) {
			o := &s.Ops[d]
			if o.Rank == op.Rank || ((o.Kind == Send || o.Kind == Recv) && s.Ops[o.Match].Rank == op.Rank) {
				continue
			}
			return fmt.Errorf("op %d (%s on rank %d): depends on op %d (%s on rank %d), another rank's", i, op.Kind, op.Rank, d, o.Kind, o.Rank)
		}
	}
	return nil
}

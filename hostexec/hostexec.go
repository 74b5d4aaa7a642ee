// Package hostexec is the host reference executor: it runs any schedule in
// Go over real byte buffers, one goroutine per rank, and checks every
// destination byte. It honours only the schedule's dependencies and picks
// among the ops that are ready in a random order (from a seed), so a missing
// dependency shows up as a wrong byte or a reported hazard.
//
// Sources are filled with a pattern computed from each element's global
// index ([Pattern]); outputs start as the complement of the bytes they must
// end with, so a byte never written can never pass.
package hostexec

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/units"
)

// DefaultMaxBytes bounds the host memory a run may allocate.
const DefaultMaxBytes = 4 << 30

// TooLargeError is the error of a run refused before it allocates
// anything: the schedule's buffers need more than Options.MaxBytes. It is
// an [ir.ErrTooLarge]: errors.Is(err, ir.ErrTooLarge) tells a schedule
// refused for its size from a failed run, here as in the IR's limits.
type TooLargeError struct {
	Need, Limit int64 // bytes
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the schedule's buffers need %s, more than the host executor's limit of %s; shrink the tensors (m2n's --scale)",
		units.Bytes(e.Need).Human(), units.Bytes(e.Limit).Human())
}

func (e *TooLargeError) Unwrap() error { return ir.ErrTooLarge }

// Options configure a run.
type Options struct {
	Seed     uint64 // seeds the order in which ready ops run
	MaxBytes int64  // refuse schedules whose buffers exceed this; 0 means DefaultMaxBytes
}

// Result is what a run found.
type Result struct {
	Ops        int    // ops executed
	Bytes      int64  // output bytes checked
	Wrong      int64  // output bytes that differ from the expected pattern
	FirstWrong string // where the first wrong byte is, when Wrong > 0
	// PeakStaging is the most staging memory one rank held: its staging
	// arena (arena buffers share it) plus its other staging buffers.
	PeakStaging int64
}

// Pattern is the hash behind element g (its row-major index in the global
// tensor) of tensor t: splitmix64. [Value] makes an element of it.
func Pattern(t int, g uint64) uint64 {
	z := uint64(t)*0x9E3779B97F4A7C15 + g + 0x632BE59BD9B4E019
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// FiniteMask is what [Value] keeps of the hash for an element of dtype dt:
// for a float dtype (bf16, fp16, fp32, fp64, fp8_e4m3, fp8_e5m2) every bit
// but the top bit of the exponent (bit 8 x size - 2), so the value is
// finite (below 2 in magnitude for bf16, fp16, fp32 and fp64, below 2^8
// for fp8_e4m3 and 2^16 for fp8_e5m2) and spans its dtype's binades down to
// subnormals and ±0; every bit for other dtypes.
func FiniteMask(dt layout.DType) uint64 {
	if dt.Float() {
		return ^(uint64(1) << (8*dt.Size() - 2))
	}
	return ^uint64(0)
}

// Value is element g of tensor t of dtype dt: Pattern(t, g) & FiniteMask(dt),
// of which the element keeps its first dt.Size() bytes, little-endian. The
// GPU fill kernel computes the same function.
func Value(t int, g uint64, dt layout.DType) uint64 { return Pattern(t, g) & FiniteMask(dt) }

// fillBox writes the pattern of a global box of tensor t (global shape
// shape, element size elem) into buf, row-major; with invert, its complement.
func fillBox(buf []byte, t int, shape []int64, box layout.Box, dt layout.DType, invert bool) {
	var tmp [8]byte
	elem, m := dt.Size(), FiniteMask(dt)
	pos := int64(0)
	// Each run of the box in the global tensor is a run of global indices.
	box.ForEachRun(shape, func(first, n int64) {
		for k := range n {
			v := Pattern(t, uint64(first+k)) & m
			if invert {
				v = ^v
			}
			binary.LittleEndian.PutUint64(tmp[:], v)
			copy(buf[pos:pos+elem], tmp[:elem])
			pos += elem
		}
	})
}

// Expected returns the bytes a destination must hold for a global box of
// tensor t, row-major: the source pattern; for a quantized tensor its
// fp8_e4m3 bits by the reference quantizer ([layout.QuantizeBox]); for a
// scale tensor the FP32 scales of its weight's blocks, little-endian.
func Expected(s *ir.Schedule, t int, box layout.Box) []byte {
	tt := &s.Tensors[t]
	switch {
	case tt.Quant.On():
		// Quantized over the whole blocks the box touches (a box that
		// cuts blocks keeps its part: layout.LandingLayout).
		whole := tt.Quant.WeightBox(tt.Src.Shape, tt.Quant.ScaleBox(tt.Src.Shape, box))
		q, _ := quantized(s, t, whole)
		if whole.Equal(box) {
			return q
		}
		return part(q, whole, box)
	case tt.ScaleOf > 0:
		w := tt.ScaleOf - 1
		wt := &s.Tensors[w]
		_, sc := quantized(s, w, wt.Quant.WeightBox(wt.Src.Shape, box))
		out := make([]byte, 4*len(sc))
		for i, f := range sc {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
		}
		return out
	}
	want := make([]byte, box.Elems()*tt.Src.DType.Size())
	fillBox(want, t, tt.Src.Shape, box, tt.Src.DType, false)
	return want
}

// part returns the bytes of box (one an element) out of b, which holds the
// larger box whole, both row-major.
func part(b []byte, whole, box layout.Box) []byte {
	rel := box.Clone()
	for d := range rel.Start {
		rel.Start[d] -= whole.Start[d]
	}
	out := make([]byte, 0, box.Elems())
	rel.ForEachRun(whole.Size, func(first, n int64) { out = append(out, b[first:first+n]...) })
	return out
}

// quantized returns the fp8 bits and the scales of a block-aligned global
// box of quantized tensor t, from its source pattern.
func quantized(s *ir.Schedule, t int, box layout.Box) ([]byte, []float32) {
	tt := &s.Tensors[t]
	src := make([]byte, box.Elems()*tt.Src.DType.Size())
	fillBox(src, t, tt.Src.Shape, box, tt.Src.DType, false)
	return quantize(tt, box, src)
}

// quantize runs the reference quantizer over src, a global box of
// quantized tensor tt in its source dtype.
func quantize(tt *ir.Tensor, box layout.Box, src []byte) ([]byte, []float32) {
	n := box.Elems()
	x := make([]float32, n)
	for i := range x {
		x[i] = layout.Decode(tt.Src.DType, src, int64(i))
	}
	br, bc := tt.Quant.Blocks(tt.Src.Shape)
	q := make([]byte, n)
	sc := make([]float32, tt.Quant.ScaleBox(tt.Src.Shape, box).Elems())
	layout.QuantizeBox(x, box.Size, br, bc, q, sc)
	return q, sc
}

// Run executes the schedule and checks every output byte.
func Run(s *ir.Schedule, opt Options) (*Result, error) {
	if opt.MaxBytes == 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	staging := s.StagingByRank()
	var total int64
	for i := range s.Buffers {
		if s.Buffers[i].Kind != ir.Staging {
			total += s.Buffers[i].Bytes
		}
	}
	for _, n := range staging {
		total += n
	}
	if total > opt.MaxBytes {
		return nil, &TooLargeError{Need: total, Limit: opt.MaxBytes}
	}
	e := &executor{s: s, bufs: make([][]byte, len(s.Buffers))}
	// One staging arena per rank, as large as its buffers reach; its buffers
	// are views of it.
	size := map[int]int64{}
	for i := range s.Buffers {
		if b := &s.Buffers[i]; b.InArena {
			size[b.Rank] = max(size[b.Rank], b.ArenaOffset+b.Bytes)
		}
	}
	arenas := map[int][]byte{}
	held := map[int]int64{} // staging bytes allocated per rank
	for r, n := range size {
		arenas[r] = make([]byte, n)
		held[r] += n
	}
	for i := range s.Buffers {
		b := &s.Buffers[i]
		if b.InArena {
			e.bufs[i] = arenas[b.Rank][b.ArenaOffset : b.ArenaOffset+b.Bytes : b.ArenaOffset+b.Bytes]
			continue
		}
		if b.Kind == ir.Staging {
			held[b.Rank] += b.Bytes
		}
		e.bufs[i] = make([]byte, b.Bytes)
		if b.Placed() && b.Kind != ir.Staging {
			t := &s.Tensors[b.Tensor]
			fillBox(e.bufs[i], b.Tensor, t.Src.Shape, b.Box, s.BufDType(int32(i)), b.Kind == ir.Output)
		}
	}
	if err := e.run(opt.Seed); err != nil {
		return nil, err
	}
	res := &Result{Ops: len(s.Ops)}
	for _, n := range held {
		res.PeakStaging = max(res.PeakStaging, n)
	}
	for i := range s.Buffers {
		b := &s.Buffers[i]
		if b.Kind != ir.Output {
			continue
		}
		t := &s.Tensors[b.Tensor]
		want := Expected(s, b.Tensor, b.Box)
		res.Bytes += b.Bytes
		for o := range want {
			if want[o] != e.bufs[i][o] {
				if res.Wrong == 0 {
					res.FirstWrong = fmt.Sprintf("output buffer %d of %s on rank %d, byte %d: got %#02x, want %#02x",
						i, t.Name, b.Rank, o, e.bufs[i][o], want[o])
				}
				res.Wrong++
			}
		}
	}
	return res, nil
}

type executor struct {
	s    *ir.Schedule
	bufs [][]byte

	mu         sync.Mutex
	cond       *sync.Cond
	remaining  []int32   // unmet dependencies per op
	dependents [][]int32 // ops waiting on each op
	ready      map[int32][]int32
	posted     []bool // a send or recv whose dependencies are met
	left       int    // ops not yet complete
	idle       int    // rank goroutines waiting
	ranks      []int32
	failed     error
}

func (e *executor) run(seed uint64) error {
	s := e.s
	e.cond = sync.NewCond(&e.mu)
	e.remaining = make([]int32, len(s.Ops))
	e.dependents = make([][]int32, len(s.Ops))
	e.posted = make([]bool, len(s.Ops))
	e.ready = map[int32][]int32{}
	e.left = len(s.Ops)
	for _, r := range s.World {
		e.ranks = append(e.ranks, int32(r.Rank))
	}
	for i := range int32(len(s.Ops)) {
		e.remaining[i] = s.Ops[i].DepLen
		for _, d := range s.Deps(i) {
			e.dependents[d] = append(e.dependents[d], i)
		}
	}
	for i := range int32(len(s.Ops)) {
		if e.remaining[i] == 0 {
			e.makeReady(i)
		}
	}
	var wg sync.WaitGroup
	for k, r := range e.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.worker(r, rand.New(rand.NewPCG(seed, uint64(k))))
		}()
	}
	wg.Wait()
	return e.failed
}

// makeReady records that op i's dependencies are met. Called with mu held.
func (e *executor) makeReady(i int32) {
	op := &e.s.Ops[i]
	switch op.Kind {
	case ir.Send:
		e.posted[i] = true
		if e.posted[op.Match] {
			e.ready[op.Peer] = append(e.ready[op.Peer], op.Match) // the receiver runs the pair
		}
	case ir.Recv:
		e.posted[i] = true
		if e.posted[op.Match] {
			e.ready[op.Rank] = append(e.ready[op.Rank], i)
		}
	default:
		e.ready[op.Rank] = append(e.ready[op.Rank], i)
	}
}

func (e *executor) worker(rank int32, rng *rand.Rand) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		for len(e.ready[rank]) == 0 && e.left > 0 && e.failed == nil {
			e.idle++
			if e.idle == len(e.ranks) && e.nothingReady() {
				e.failed = fmt.Errorf("deadlock: %d ops can never run", e.left)
				e.cond.Broadcast()
				e.idle--
				return
			}
			e.cond.Wait()
			e.idle--
		}
		if e.left == 0 || e.failed != nil {
			return
		}
		q := e.ready[rank]
		k := rng.IntN(len(q))
		i := q[k]
		q[k] = q[len(q)-1]
		e.ready[rank] = q[:len(q)-1]
		e.mu.Unlock()
		err := e.exec(i)
		e.mu.Lock()
		if err != nil && e.failed == nil {
			e.failed = err
		}
		done := []int32{i}
		if m := e.s.Ops[i].Match; m >= 0 {
			done = append(done, m)
		}
		for _, d := range done {
			e.left--
			for _, n := range e.dependents[d] {
				if e.remaining[n]--; e.remaining[n] == 0 {
					e.makeReady(n)
				}
			}
		}
		e.cond.Broadcast()
	}
}

func (e *executor) nothingReady() bool {
	for _, q := range e.ready {
		if len(q) > 0 {
			return false
		}
	}
	return true
}

// exec performs op i (for a recv, the whole transfer).
func (e *executor) exec(i int32) error {
	op := &e.s.Ops[i]
	src, dst := op.Src, op.Dst
	if op.Kind == ir.Recv {
		src = e.s.Ops[op.Match].Src
	}
	data := e.gather(src)
	if op.Kind == ir.Quantize {
		b := &e.s.Buffers[src.Buf]
		box, ok := e.s.GlobalBox(src)
		if !ok {
			return fmt.Errorf("op %d: quantizes a byte range that is not a box", i)
		}
		q, sc := quantize(&e.s.Tensors[b.Tensor], box, data)
		scale := e.s.QuantScale[i]
		if int64(len(q)) != dst.Bytes || int64(4*len(sc)) != scale.Bytes {
			return fmt.Errorf("op %d: quantizes into %d and %d bytes, regions of %d and %d", i, len(q), 4*len(sc), dst.Bytes, scale.Bytes)
		}
		sb := make([]byte, 4*len(sc))
		for k, f := range sc {
			binary.LittleEndian.PutUint32(sb[4*k:], math.Float32bits(f))
		}
		e.scatter(dst, q)
		e.scatter(scale, sb)
		return nil
	}
	if int64(len(data)) != dst.Bytes {
		return fmt.Errorf("op %d: moves %d bytes into a region of %d", i, len(data), dst.Bytes)
	}
	e.scatter(dst, data)
	return nil
}

// gather returns a copy of a region's bytes in order.
func (e *executor) gather(r ir.Region) []byte {
	buf := e.bufs[r.Buf]
	if !r.IsBox() {
		return append([]byte(nil), buf[r.Offset:r.Offset+r.Bytes]...)
	}
	b := &e.s.Buffers[r.Buf]
	elem := e.s.BufElem(r.Buf)
	out := make([]byte, 0, r.Bytes)
	e.s.Box(r).ForEachRun(b.Box.Size, func(first, n int64) {
		out = append(out, buf[first*elem:(first+n)*elem]...)
	})
	return out
}

// scatter writes data over a region in order.
func (e *executor) scatter(r ir.Region, data []byte) {
	buf := e.bufs[r.Buf]
	if !r.IsBox() {
		copy(buf[r.Offset:r.Offset+r.Bytes], data)
		return
	}
	b := &e.s.Buffers[r.Buf]
	elem := e.s.BufElem(r.Buf)
	pos := int64(0)
	e.s.Box(r).ForEachRun(b.Box.Size, func(first, n int64) {
		copy(buf[first*elem:(first+n)*elem], data[pos:pos+n*elem])
		pos += n * elem
	})
}

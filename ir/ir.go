// Package ir is m2n's Schedule IR: one serializable description of
// everything a reshard moves — the tensors and their layouts, the world
// (rank -> GPU -> NVLink domain), per-rank buffers, and ops with explicit
// dependencies — consumed identically by the simulator, the host reference
// executor and the GPU executor. Executors never re-derive the plan.
//
// A Schedule is a spec, as a cilium/ebpf MapSpec: plain data, safe to copy
// and compare, with [Schedule.Validate] checking that it is well formed and
// moves exactly the right bytes. docs/ir.md is the contract.
package ir

import (
	"errors"

	"github.com/m2n-project/m2n/model/layout"
)

// Format and Version identify the JSON encoding. A reader rejects other
// formats and versions.
//
// Version 2 added [Buffer.InArena] (the JSON field arena_offset): staging
// buffers of a rank may share memory. A schedule none of whose buffers is in
// an arena is written as version 1, byte for byte as before; readers accept
// both.
//
// Version 3 added quantized destinations: a tensor's dst_dtype and quant,
// scale tensors (scale_of), a placed buffer's dtype, and the quantize op
// with its scale region. A schedule without them is written as version 1
// or 2, as before.
const (
	Format  = "m2n.schedule"
	Version = 3
	// MinVersion is the oldest version a reader accepts.
	MinVersion = 1
)

// Memory ceilings: a buffer, or the buffers of one rank (its staging arena
// counted once, at its extent), larger than any GPU holds is an error of
// [Schedule.Validate] (wrapping [ErrTooLarge]), so no executor or simulator
// is asked to allocate it.
const (
	MaxBufferBytes = int64(1) << 40 // 1 TiB per buffer
	// MaxRankBytes is higher: m2n models whole-model routes whose
	// uncapped staging exceeds a GPU (agbcast over DeepSeek-V3 keeps
	// 1.03 TiB on one rank), and bounds only what no machine could hold.
	MaxRankBytes = int64(1) << 44 // 16 TiB per rank
)

// MaxDocumentBytes bounds a schedule's JSON document: [Decode] reads no
// more (a schedule at the planner's default op limit, 10 million ops, is
// about 2 GB of JSON).
const MaxDocumentBytes = int64(4) << 30

// ErrTooLarge is wrapped by the error of a schedule too large: its buffers
// exceed MaxBufferBytes or MaxRankBytes, or an executor's limit (the host
// executor's TooLargeError). It is m2n's one such sentinel.
var ErrTooLarge = errors.New("more than any GPU holds")

// Schedule is a complete reshard plan.
//
// Ops are plain values without pointers, so schedules of millions of ops
// stay cheap to build, copy and scan: an op's dependencies live in DepPool
// and its boxes in BoxPool, read through [Schedule.Deps] and
// [Schedule.Box], and added through [Schedule.AddOp] and [Schedule.AddBox].
type Schedule struct {
	Route      string   // the route that built it: flat, agbcast, hierarchical, ...
	ChunkBytes int64    // the pipelining chunk size the route used
	World      []Rank   // every rank the schedule touches, ascending by rank
	Tensors    []Tensor // what moves
	Buffers    []Buffer // indexed by Buffer.ID
	Ops        []Op     // indexed by ID; every dependency precedes its op

	DepPool []int32 // dependency lists of ops
	BoxPool []int64 // boxes of regions: start, then size, each of the buffer's rank

	// QuantScale is the scale region of each quantize op, by op ID.
	QuantScale map[int32]Region
}

// AddQuantize appends a quantize op with its scale region and returns its ID.
func (s *Schedule) AddQuantize(op Op, scale Region, deps ...int32) int32 {
	op.Kind = Quantize
	id := s.AddOp(op, deps...)
	if s.QuantScale == nil {
		s.QuantScale = map[int32]Region{}
	}
	s.QuantScale[id] = scale
	return id
}

// AddOp appends an op with its dependencies and returns its ID.
func (s *Schedule) AddOp(op Op, deps ...int32) int32 {
	op.DepOff, op.DepLen = int32(len(s.DepPool)), int32(len(deps))
	s.DepPool = append(s.DepPool, deps...)
	s.Ops = append(s.Ops, op)
	return int32(len(s.Ops) - 1)
}

// Deps returns the dependencies of op i.
func (s *Schedule) Deps(i int32) []int32 {
	op := &s.Ops[i]
	return s.DepPool[op.DepOff : op.DepOff+op.DepLen : op.DepOff+op.DepLen]
}

// AddBox stores a box and returns the reference a box region holds.
func (s *Schedule) AddBox(b layout.Box) int32 {
	ref := int32(len(s.BoxPool)) + 1
	s.BoxPool = append(s.BoxPool, b.Start...)
	s.BoxPool = append(s.BoxPool, b.Size...)
	return ref
}

// Box returns the box of a box region (relative to its buffer's box), as
// slices into BoxPool; the zero Box for a byte range.
func (s *Schedule) Box(r Region) layout.Box {
	if r.BoxRef == 0 {
		return layout.Box{}
	}
	nd := int32(len(s.Buffers[r.Buf].Box.Size))
	o := r.BoxRef - 1
	return layout.Box{Start: s.BoxPool[o : o+nd : o+nd], Size: s.BoxPool[o+nd : o+2*nd : o+2*nd]}
}

// Rank places a global rank on a GPU and an NVLink domain.
type Rank struct {
	Rank   int
	GPU    int
	Domain int
}

// Tensor is one tensor and its two layouts.
//
// A quantized tensor (Quant on) has a destination dtype of fp8_e4m3 and a
// source dtype of bf16, fp16 or fp32; its scales are a tensor of their own,
// the one whose ScaleOf names it. A scale tensor is FP32, of shape
// Quant.ScaleShape, and its layouts are the weight's meshes and placements
// over that shape; it has no inputs: quantize ops write it.
type Tensor struct {
	Name     string
	Src, Dst layout.Layout // same shape; same dtype unless Quant is on
	Quant    layout.Quant  // how the destination is quantized; zero: not
	ScaleOf  int           // a scale tensor: 1 + the index of its weight; 0 otherwise
}

// BufferKind says what a buffer is for.
type BufferKind uint8

// Buffer kinds.
const (
	// Input holds a rank's source shard of a tensor, filled before the
	// schedule runs and never written by it.
	Input BufferKind = iota + 1
	// Output must hold the rank's destination shard when the schedule ends;
	// every byte is written exactly once, with the right source byte.
	Output
	// Staging is scratch space for packed chunks, received data, and
	// gathered tensors. A byte may be written again once every op that
	// read or wrote its previous contents happens before the new writer.
	Staging
)

// Buffer is a contiguous device allocation on one rank.
//
// A placed buffer (every input and output, and staging buffers that
// assemble part of a tensor, like agbcast's gathered copy) holds one box of
// one tensor in row-major order: its byte at offset o is the element of
// Box at row-major position o / element size. An unplaced staging buffer is
// raw bytes.
//
// A staging buffer InArena lives at ArenaOffset in its rank's staging
// arena, one allocation per rank of the largest ArenaOffset+Bytes of its
// arena buffers, so arena buffers whose ranges overlap share memory; any
// other buffer is an allocation of its own.
type Buffer struct {
	ID      int
	Rank    int
	Kind    BufferKind
	InArena bool // staging only: in the rank's staging arena, at ArenaOffset
	Bytes   int64
	Tensor  int        // the tensor index of a placed buffer; -1 when unplaced
	Box     layout.Box // the global box of a placed buffer
	// DType is the element type of a placed buffer: its tensor's source
	// dtype, or, for a quantized tensor, its destination dtype (outputs
	// always). Zero means the tensor's source dtype.
	DType layout.DType

	ArenaOffset int64 // with InArena: the buffer's first byte in the arena
}

// Base is where the buffer's byte 0 lies in its space: its offset in its
// rank's staging arena (InArena), else 0 (an allocation of its own).
func (b *Buffer) Base() int64 {
	if b.InArena {
		return b.ArenaOffset
	}
	return 0
}

// Placed reports whether the buffer holds a box of a tensor.
func (b *Buffer) Placed() bool { return b.Tensor >= 0 }

// OpKind is what an op does.
type OpKind uint8

// Op kinds.
const (
	// Send moves a contiguous region to Peer; its Match is the Recv there.
	Send OpKind = iota + 1
	// Recv receives a contiguous region from Peer; its Match is the Send there.
	Recv
	// Copy is a local copy: contiguous to contiguous, or box to box of equal size.
	Copy
	// Pack copies a box of a placed buffer to a contiguous region.
	Pack
	// Unpack copies a contiguous region to a box of a placed buffer.
	Unpack
	// Quantize reads whole blocks of a quantized tensor (Src, in a buffer
	// of its source dtype), and writes them as fp8_e4m3 to Dst and their
	// scales to its scale region ([Schedule.QuantScale]).
	Quantize
)

// Op is one step on one rank; its ID is its index in Schedule.Ops. It may
// start when every op in its dependency list has completed. A Send and its
// matching Recv form one transfer: it starts when both are ready and
// completes both at once.
type Op struct {
	Kind   OpKind
	Rank   int32
	Peer   int32  // send: the receiving rank; recv: the sending rank; else -1
	Match  int32  // send/recv: the ID of the matching op; else -1
	DepOff int32  // dependencies: DepPool[DepOff : DepOff+DepLen], each an ID smaller than this op's
	DepLen int32  // how many dependencies there are
	Src    Region // what a send, copy, pack, unpack or quantize reads
	Dst    Region // what a recv, copy, pack, unpack or quantize writes
}

// Region is part of a buffer: a contiguous byte range (BoxRef 0) or, in a
// placed buffer, a box in elements relative to the buffer's box.
type Region struct {
	Buf    int32
	BoxRef int32 // 0: a byte range; else the box's reference in BoxPool ([Schedule.AddBox])
	Offset int64 // byte range: first byte
	Bytes  int64 // byte range: length; for a box, its size in bytes
}

// IsBox reports whether the region is a box rather than a byte range.
func (r Region) IsBox() bool { return r.BoxRef != 0 }

// Class is the path class of an op, for latencies and statistics.
type Class uint8

// Path classes.
const (
	Local  Class = iota // on one GPU: copy, pack, unpack
	NVLink              // between GPUs of one NVLink domain
	Net                 // between NVLink domains, over NICs
)

func (c Class) String() string {
	switch c {
	case Local:
		return "local"
	case NVLink:
		return "nvlink"
	case Net:
		return "network"
	}
	return "class?"
}

// ClassOf returns the path class of an op: a send or recv between two
// ranks is NVLink within a domain and network across; everything else is
// local.
func (s *Schedule) ClassOf(op *Op, world map[int]Rank) Class {
	if op.Kind != Send && op.Kind != Recv {
		return Local
	}
	return LinkClass(world[int(op.Rank)], world[int(op.Peer)])
}

// LinkClass is the path class between two ranks: Local on one GPU, NVLink
// within a domain, Net across domains. The simulator routes flows by it.
func LinkClass(a, b Rank) Class {
	switch {
	case a.GPU == b.GPU:
		return Local
	case a.Domain == b.Domain:
		return NVLink
	}
	return Net
}

// WorldMap indexes the world by rank.
func (s *Schedule) WorldMap() map[int]Rank {
	m := make(map[int]Rank, len(s.World))
	for _, r := range s.World {
		m[r.Rank] = r
	}
	return m
}

// UsesArena reports whether any buffer is in a staging arena (a version 2
// schedule).
func (s *Schedule) UsesArena() bool {
	for i := range s.Buffers {
		if s.Buffers[i].InArena {
			return true
		}
	}
	return false
}

// ArenaBytes returns each rank's staging arena: the largest
// ArenaOffset+Bytes of its arena buffers. Ranks without one are absent.
func (s *Schedule) ArenaBytes() map[int]int64 {
	arena := map[int]int64{}
	for i := range s.Buffers {
		if b := &s.Buffers[i]; b.InArena {
			arena[b.Rank] = max(arena[b.Rank], b.ArenaOffset+b.Bytes)
		}
	}
	return arena
}

// StagingByRank returns the staging memory each rank allocates: its arena
// ([Schedule.ArenaBytes]) plus its other staging buffers. Ranks without
// staging are absent.
func (s *Schedule) StagingByRank() map[int]int64 {
	own := s.ArenaBytes()
	for i := range s.Buffers {
		if b := &s.Buffers[i]; b.Kind == Staging && !b.InArena {
			own[b.Rank] += b.Bytes
		}
	}
	return own
}

// Elem is the element size of a tensor's (source) dtype.
func (s *Schedule) Elem(tensor int) int64 { return s.Tensors[tensor].Src.DType.Size() }

// BufDType is the element type of a placed buffer.
func (s *Schedule) BufDType(buf int32) layout.DType {
	b := &s.Buffers[buf]
	if b.DType.Valid() {
		return b.DType
	}
	return s.Tensors[b.Tensor].Src.DType
}

// BufElem is the element size of a placed buffer.
func (s *Schedule) BufElem(buf int32) int64 { return s.BufDType(buf).Size() }

// ScaleTensor returns the index of the scale tensor of quantized tensor
// i, or -1.
func (s *Schedule) ScaleTensor(i int) int {
	for k := range s.Tensors {
		if s.Tensors[k].ScaleOf == i+1 {
			return k
		}
	}
	return -1
}

// UsesQuant reports whether any tensor is quantized (a version 3 schedule).
func (s *Schedule) UsesQuant() bool {
	for i := range s.Tensors {
		if s.Tensors[i].Quant.On() || s.Tensors[i].ScaleOf != 0 {
			return true
		}
	}
	return false
}

// GlobalBox returns the global box a region of a placed buffer covers,
// and false when the region is a byte range that is not a box.
func (s *Schedule) GlobalBox(r Region) (layout.Box, bool) {
	b := &s.Buffers[r.Buf]
	if r.IsBox() {
		g := s.Box(r).Clone()
		for d := range g.Start {
			g.Start[d] += b.Box.Start[d]
		}
		return g, true
	}
	elem := s.BufElem(r.Buf)
	if r.Offset%elem != 0 || r.Bytes%elem != 0 {
		return layout.Box{}, false
	}
	var a layout.BoxArena
	g, ok := rangeBox(&a, b.Box, r.Offset/elem, r.Bytes/elem)
	if !ok {
		return layout.Box{}, false
	}
	return g.Clone(), true
}

package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
)

// Where a quantized tensor is quantized (docs/ir.md, "Quantized
// destinations"):
//
//   - at the source, when every source shard holds whole blocks: each
//     source rank that supplies bytes quantizes its shard once into fp8
//     and scale staging, and the route moves the fp8 tensor and the scale
//     tensor as two tensors (half the bytes of bf16 on every link);
//   - else, on the hierarchical route when the destination has replicas,
//     at an entry replica: the tensor moves in its source dtype to one
//     replica of each destination slot (one replica set, rotating from
//     tensor to tensor), which quantizes its shard; the route then spreads
//     the fp8 tensor and the scales from there to the other replicas, over
//     the network to other domains and NVLink inside them;
//   - else at the destination: the route moves the tensor in its source
//     dtype into a landing buffer of each destination rank, which then
//     quantizes its whole shard; a destination whose shards cut blocks
//     that span their dims (per channel split by columns, per tensor:
//     layout.LandingLayout) lands the whole blocks its shard touches,
//     quantizes them into fp8 staging and copies its own part out (any
//     other cut is refused).
type quantSite uint8

const (
	notQuantized  quantSite = iota
	quantAtSource           // a quantized tensor or its scales, moved quantized
	quantAtDest             // a quantized tensor moved in its source dtype
	scaleAtDest             // a scale tensor written by destination quantize ops; not routed
	quantAtEntry            // a quantized tensor gathered at one replica set, quantized there, spread in fp8
	scaleAtEntry            // its scale tensor, spread from the entry replicas
)

// entry is a tensor quantized at an entry replica set: the gather's
// layouts (source dtype, to the entry replicas) and the spreads' (fp8 and
// scales, from the entry replicas to every destination rank).
type entry struct {
	gather, spread, scale ir.Tensor
	regions               *Regions // the spread's
}

// entryLayout is the destination layout restricted to one replica set:
// every replicating axis fixed at coordinate k modulo its size. ok is
// false when the layout has no replicas.
func entryLayout(l layout.Layout, k int) (layout.Layout, bool) {
	rep := false
	fixed := make([]int, len(l.Mesh.Shape))
	for a, p := range l.Placements {
		fixed[a] = -1
		if !p.Shard && l.Mesh.Shape[a] > 1 {
			rep, fixed[a] = true, k%l.Mesh.Shape[a]
		}
	}
	if !rep {
		return layout.Layout{}, false
	}
	out := layout.Layout{Shape: l.Shape, DType: l.DType, Placements: l.Placements, Mesh: layout.Mesh{Shape: append([]int(nil), l.Mesh.Shape...)}}
	c := make([]int, len(l.Mesh.Shape))
	for i, r := range l.Mesh.Ranks {
		l.Mesh.Coord(i, c)
		keep := true
		for a, f := range fixed {
			keep = keep && (f < 0 || c[a] == f)
		}
		if keep {
			out.Mesh.Ranks = append(out.Mesh.Ranks, r)
		}
	}
	for a, f := range fixed {
		if f >= 0 {
			out.Mesh.Shape[a] = 1
		}
	}
	return out, true
}

// ScaleName is the name of a quantized tensor's scale tensor, as vLLM
// names it: the last "weight" of the name becomes "weight_scale_inv" for
// block scales and "weight_scale" per channel or tensor
// (model.layers.3.mlp.experts.w13_weight[gate] ->
// model.layers.3.mlp.experts.w13_weight_scale_inv[gate]); a name without
// "weight" gets the suffix ".weight_scale_inv" or ".weight_scale".
func ScaleName(name string, q layout.Quant) string {
	suffix := "weight_scale_inv"
	if q.Scheme != layout.QuantBlock {
		suffix = "weight_scale"
	}
	if i := strings.LastIndex(name, "weight"); i >= 0 {
		return name[:i] + suffix + name[i+len("weight"):]
	}
	return name + "." + suffix
}

// expand turns the tensors to move into the schedule's tensors (each
// quantized tensor followed by its scale tensor), and, per schedule tensor,
// the tensor as the route moves it (its dtype on the wire) and where it is
// quantized.
func expand(tensors []ir.Tensor, rt route) (sched, moved []ir.Tensor, site []quantSite, entries map[int]entry, err error) {
	entries = map[int]entry{}
	for _, t := range tensors {
		if t.ScaleOf != 0 {
			return nil, nil, nil, nil, fmt.Errorf("tensor %s: a scale tensor; the planner derives scale tensors from their weights", t.Name)
		}
		if !t.Quant.On() {
			if t.Src.DType != t.Dst.DType {
				return nil, nil, nil, nil, fmt.Errorf("tensor %s: source dtype %v and destination dtype %v differ; only a quantized destination (fp8_e4m3 with scales) changes the dtype", t.Name, t.Src.DType, t.Dst.DType)
			}
			sched, moved, site = append(sched, t), append(moved, t), append(site, notQuantized)
			continue
		}
		if err := layout.ValidateQuant(t.Src.DType, t.Dst.DType, t.Src.Shape, t.Quant); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if err := t.Src.Validate(); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("tensor %s: source: %w", t.Name, err)
		}
		if err := t.Dst.Validate(); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("tensor %s: destination: %w", t.Name, err)
		}
		land, err := layout.LandingLayout(t.Dst, t.Quant)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("tensor %s: destination %v quantized to fp8_e4m3 (%v scales): %w", t.Name, t.Dst, t.Quant, err)
		}
		dsl, err := layout.ScaleLayout(land, t.Quant)
		if err != nil {
			return nil, nil, nil, nil, fmt.Errorf("tensor %s: destination %v quantized to fp8_e4m3 (%v scales): %w", t.Name, t.Dst, t.Quant, err)
		}
		cut := !slices.Equal(land.Placements, t.Dst.Placements) // the destination lands whole blocks and keeps its part
		w := len(sched)
		sc := ir.Tensor{Name: ScaleName(t.Name, t.Quant), ScaleOf: w + 1, Dst: dsl,
			Src: layout.Layout{Shape: dsl.Shape, DType: layout.FP32, Mesh: t.Src.Mesh, Placements: t.Src.Placements}}
		sched = append(sched, t, sc)
		ssl, err := layout.ScaleLayout(t.Src, t.Quant)
		if err == nil { // the source holds whole blocks
			mt := t
			mt.Src.DType = t.Dst.DType
			ms := sc
			ms.Src = ssl
			moved, site = append(moved, mt, ms), append(site, quantAtSource, quantAtSource)
			continue
		}
		mt := t
		mt.Dst.DType = t.Src.DType
		if l0, ok := entryLayout(t.Dst, len(entries)); ok && rt.quantizesAtEntry() && !cut {
			// Gather in the source dtype at one replica set, quantize
			// there, spread fp8 and scales from it.
			g := mt
			g.Dst = l0
			g.Dst.DType = t.Src.DType
			sp := t
			sp.Src = l0
			sp.Src.DType = t.Dst.DType
			ss := sc
			if ss.Src, err = layout.ScaleLayout(l0, t.Quant); err != nil { // l0's shards are dst's: whole blocks
				return nil, nil, nil, nil, fmt.Errorf("tensor %s: entry replicas %v: %w (a bug in m2n)", t.Name, l0, err)
			}
			entries[w] = entry{gather: g, spread: sp, scale: ss}
			moved, site = append(moved, g, ss), append(site, quantAtEntry, scaleAtEntry)
			continue
		}
		// At the destination: each rank lands its landing shard (the
		// whole blocks its shard touches) in the source dtype.
		mt.Dst = land
		mt.Dst.DType = t.Src.DType
		moved, site = append(moved, mt, sc), append(site, quantAtDest, scaleAtDest)
	}
	return sched, moved, site, entries, nil
}

// bufDType is the Buffer.DType of a placed buffer of tensor ti in dtype
// dt: zero (the tensor's source dtype) unless it differs, so schedules
// without quantization are as before.
func (b *builder) bufDType(ti int, dt layout.DType) layout.DType {
	if dt == b.s.Tensors[ti].Src.DType {
		return 0
	}
	return dt
}

// quantIn is a source rank's quantized copy of its shard: the fp8 buffer,
// the scale buffer, and the quantize op that writes them.
type quantIn struct {
	fp8, scale, op int32
}

// placedAs appends a placed buffer of dtype dt outside any staging arena
// (a quantized tensor's fp8 and scale copies at the source, its landing
// buffers at the destination).
func (b *builder) placedAs(kind ir.BufferKind, ti, rank int, box layout.Box, dt layout.DType) int32 {
	id := int32(len(b.s.Buffers))
	b.s.Buffers = append(b.s.Buffers, ir.Buffer{ID: int(id), Rank: rank, Kind: kind, Tensor: ti, Box: box.Clone(), Bytes: box.Elems() * dt.Size(), DType: b.bufDType(ti, dt)})
	return id
}

// quantInput returns the buffer that stands for the input of tensor ti
// (a tensor quantized at the source, or its scale tensor) on a source
// rank: the fp8 or scale copy of the rank's shard, quantized on first use.
// Every op that reads it depends on the quantize ([builder.add]).
func (b *builder) quantInput(ti, rank int) int32 {
	w := ti
	if sc := b.s.Tensors[ti].ScaleOf; sc > 0 {
		w = sc - 1
	}
	key := int64(w)<<32 | int64(rank)
	q, ok := b.qin[key]
	if !ok {
		t := &b.s.Tensors[w]
		r := b.regions[w]
		box := r.SrcSlots[r.SrcSlotOf(rank)].Box
		in := b.placedAs(ir.Input, w, rank, box, t.Src.DType)
		if out, sout, ok := b.quantOutputs(w, rank, box); ok {
			// The rank also holds the shard at the destination: quantize
			// straight into its outputs, which the route then reads as
			// the rank's input (no local copy, no fp8 staging).
			dst, _ := b.boxIn(out, box)
			sdst, _ := b.boxIn(sout, t.Quant.ScaleBox(t.Src.Shape, box))
			q.fp8, q.scale = out, sout
			q.op = b.quantizeInto(rank, ir.Region{Buf: in, Bytes: b.s.Buffers[in].Bytes}, dst, sdst)
		} else {
			q.fp8 = b.placedAs(ir.Staging, w, rank, box, t.Dst.DType)
			q.scale = b.placedAs(ir.Staging, w+1, rank, t.Quant.ScaleBox(t.Src.Shape, box), layout.FP32)
			q.op = b.quantize(rank, in, q.fp8, q.scale, nil)
		}
		for len(b.pre) < len(b.s.Buffers) {
			b.pre = append(b.pre, 0)
		}
		b.pre[q.fp8], b.pre[q.scale] = q.op+1, q.op+1
		b.qin[key] = q
	}
	if ti == w {
		return q.fp8
	}
	return q.scale
}

// quantize adds a quantize op of whole buffers: src into dst and scale.
func (b *builder) quantize(rank int, src, dst, scale int32, deps []int32) int32 {
	whole := func(buf int32) ir.Region { return ir.Region{Buf: buf, Bytes: b.s.Buffers[buf].Bytes} }
	b.add(ir.Op{Kind: ir.Quantize, Rank: int32(rank), Peer: -1, Match: -1, Src: whole(src), Dst: whole(dst)}, deps)
	id := int32(len(b.s.Ops) - 1)
	if b.s.QuantScale == nil {
		b.s.QuantScale = map[int32]ir.Region{}
	}
	b.s.QuantScale[id] = whole(scale)
	return id
}

// quantizeInto adds a quantize op of regions: src into dst and scale.
func (b *builder) quantizeInto(rank int, src, dst, scale ir.Region) int32 {
	b.add(ir.Op{Kind: ir.Quantize, Rank: int32(rank), Peer: -1, Match: -1, Src: src, Dst: dst}, nil)
	id := int32(len(b.s.Ops) - 1)
	if b.s.QuantScale == nil {
		b.s.QuantScale = map[int32]ir.Region{}
	}
	b.s.QuantScale[id] = scale
	return id
}

// quantOutputs returns, when source rank rank of weight w (quantized at
// the source, routed flat or hierarchical) is also a destination whose
// shard holds its source box, its fp8 output of w and its output of w's
// scale tensor (made now, and returned by output when the scale tensor is
// routed).
func (b *builder) quantOutputs(w, rank int, box layout.Box) (out, sout int32, ok bool) {
	r, rs := b.regions[w], b.regions[w+1]
	slot, _ := r.DstSlotOf(rank)
	sslot, _ := rs.DstSlotOf(rank)
	// flat and hierarchical have a rank that holds bytes it needs copy them
	// (the copy skipped here); agbcast and nemo-legacy write every output
	// byte from their broadcast.
	if route := b.s.Route; route != Flat && route != Hierarchical || b.building != w ||
		slot < 0 || sslot < 0 || !r.DstSlots[slot].Box.Contains(box) {
		return 0, 0, false
	}
	// Only where the source box is contiguous in the output, and so is
	// its scale box: then every contribution contiguous in the shard is
	// contiguous in the output too, and the route packs nothing it would
	// not have packed from the shard.
	t := &b.s.Tensors[w]
	if n, _ := box.Runs(r.DstSlots[slot].Box.Size); n != 1 {
		return 0, 0, false
	}
	if n, _ := t.Quant.ScaleBox(t.Src.Shape, box).Runs(rs.DstSlots[sslot].Box.Size); n != 1 {
		return 0, 0, false
	}
	out = b.output(w, rank)
	sout = b.placed(ir.Output, w+1, rank, rs.DstSlots[sslot].Box)
	if b.presetOut == nil {
		b.presetOut = map[int64]int32{}
	}
	b.presetOut[int64(w+1)<<32|int64(rank)] = sout
	return out, sout, true
}

// quantizeAtDest adds, after the route of tensor ti (quantized at the
// destination), each destination rank's quantize of its landing buffer
// into its fp8 output and its scale output, after every op that wrote
// the landing buffer.
func (b *builder) quantizeAtDest(ti int) []quantOut {
	t := &b.s.Tensors[ti]
	var outs []quantOut
	for _, l := range b.landings {
		box := b.s.Buffers[l.buf].Box
		sout := b.placedAs(ir.Output, ti+1, l.rank, t.Quant.ScaleBox(t.Src.Shape, box), layout.FP32)
		pos := slices.Index(t.Dst.Mesh.Ranks, l.rank)
		if pos < 0 || t.Dst.LocalBox(pos).Equal(box) {
			out := b.placedAs(ir.Output, ti, l.rank, box, t.Dst.DType)
			op := b.quantize(l.rank, l.buf, out, sout, b.writers[l.buf])
			delete(b.writers, l.buf)
			outs = append(outs, quantOut{l.rank, out, sout, op})
			continue
		}
		// The landing holds whole blocks its shard cuts: quantize them
		// all into fp8 staging, then keep the shard's part.
		stage := b.placedAs(ir.Staging, ti, l.rank, box, t.Dst.DType)
		op := b.quantize(l.rank, l.buf, stage, sout, b.writers[l.buf])
		delete(b.writers, l.buf)
		keep := t.Dst.LocalBox(pos)
		if keep.Elems() == 0 {
			continue // the rank holds the scales only
		}
		out := b.placedAs(ir.Output, ti, l.rank, keep, t.Dst.DType)
		src := ir.Region{Buf: stage, Bytes: keep.Elems(), BoxRef: b.addBox(b.sub(box, keep))}
		dst := ir.Region{Buf: out, Bytes: keep.Elems(), BoxRef: b.addBox(b.sub(keep, keep))}
		b.op(ir.Copy, l.rank, []int32{op}, src, dst)
		outs = append(outs, quantOut{l.rank, out, sout, op})
	}
	b.landings = b.landings[:0]
	return outs
}

// quantOut is a destination rank's quantize: its fp8 and scale outputs.
type quantOut struct {
	rank           int
	out, scale, op int32
}

// spread moves tensor ti (quantized at its entry replicas, whose outputs
// outs hold) in fp8 from the entry replicas to every destination rank, by
// the route, and presets its scale tensor (routed next) to spread from
// the entry replicas' scale outputs. Every read of an entry output waits
// for its quantize.
func (b *builder) spread(ti int, outs []quantOut, e entry) {
	b.regions[ti], b.mv[ti], b.site[ti] = e.regions, e.spread, notQuantized
	for _, o := range outs {
		w := b.wi.Pos(o.rank)
		b.inputs[w] = struct{ stamp, id int32 }{int32(ti) + 1, o.out}
		b.outputs[w] = struct{ stamp, id int32 }{int32(ti) + 1, o.out}
		for len(b.pre) < len(b.s.Buffers) {
			b.pre = append(b.pre, 0)
		}
		b.pre[o.out], b.pre[o.scale] = o.op+1, o.op+1
	}
	b.route.emit(ti) // a route that quantizes at entry spreads it (hierarchical)
	// The scale tensor's route: from the same entry replicas.
	for _, o := range outs {
		w := b.wi.Pos(o.rank)
		b.inputs[w] = struct{ stamp, id int32 }{int32(ti) + 2, o.scale}
		b.outputs[w] = struct{ stamp, id int32 }{int32(ti) + 2, o.scale}
	}
}

// landing is a destination rank's landing buffer of a tensor quantized at
// the destination.
type landing struct {
	rank int
	buf  int32
}

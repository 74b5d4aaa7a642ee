package plan

import (
	"fmt"
	"strings"

	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/plan/ir"
)

// Where a quantized tensor is quantized (docs/ir.md, "Quantized
// destinations"):
//
//   - at the source, when every source shard holds whole blocks: each
//     source rank that supplies bytes quantizes its shard once into fp8
//     and scale staging, and the route moves the fp8 tensor and the scale
//     tensor as two tensors (half the bytes of bf16 on every link);
//   - else at the destination: the route moves the tensor in its source
//     dtype into a landing buffer of each destination rank, which then
//     quantizes its whole shard (a destination shard always holds whole
//     blocks, or the layout is refused).
type quantSite uint8

const (
	notQuantized  quantSite = iota
	quantAtSource           // a quantized tensor or its scales, moved quantized
	quantAtDest             // a quantized tensor moved in its source dtype
	scaleAtDest             // a scale tensor written by destination quantize ops; not routed
)

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
func expand(tensors []ir.Tensor) (sched, moved []ir.Tensor, site []quantSite, err error) {
	for _, t := range tensors {
		if t.ScaleOf != 0 {
			return nil, nil, nil, fmt.Errorf("tensor %s: a scale tensor; the planner derives scale tensors from their weights", t.Name)
		}
		if !t.Quant.On() {
			if t.Src.DType != t.Dst.DType {
				return nil, nil, nil, fmt.Errorf("tensor %s: source dtype %v and destination dtype %v differ; only a quantized destination (fp8_e4m3 with scales) changes the dtype", t.Name, t.Src.DType, t.Dst.DType)
			}
			sched, moved, site = append(sched, t), append(moved, t), append(site, notQuantized)
			continue
		}
		if err := layout.ValidateQuant(t.Src.DType, t.Dst.DType, t.Src.Shape, t.Quant); err != nil {
			return nil, nil, nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if err := t.Src.Validate(); err != nil {
			return nil, nil, nil, fmt.Errorf("tensor %s: source: %w", t.Name, err)
		}
		if err := t.Dst.Validate(); err != nil {
			return nil, nil, nil, fmt.Errorf("tensor %s: destination: %w", t.Name, err)
		}
		dsl, err := layout.ScaleLayout(t.Dst, t.Quant)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("tensor %s: destination %v quantized to fp8_e4m3 (%v scales): %w", t.Name, t.Dst, t.Quant, err)
		}
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
		moved, site = append(moved, mt, sc), append(site, quantAtDest, scaleAtDest)
	}
	return sched, moved, site, nil
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
		q.fp8 = b.placedAs(ir.Staging, w, rank, box, t.Dst.DType)
		q.scale = b.placedAs(ir.Staging, w+1, rank, t.Quant.ScaleBox(t.Src.Shape, box), layout.FP32)
		q.op = b.quantize(rank, in, q.fp8, q.scale, nil)
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

// quantizeAtDest adds, after the route of tensor ti (quantized at the
// destination), each destination rank's quantize of its landing buffer
// into its fp8 output and its scale output, after every op that wrote
// the landing buffer.
func (b *builder) quantizeAtDest(ti int) {
	t := &b.s.Tensors[ti]
	for _, l := range b.landings {
		box := b.s.Buffers[l.buf].Box
		out := b.placedAs(ir.Output, ti, l.rank, box, t.Dst.DType)
		sout := b.placedAs(ir.Output, ti+1, l.rank, t.Quant.ScaleBox(t.Src.Shape, box), layout.FP32)
		b.quantize(l.rank, l.buf, out, sout, b.writers[l.buf])
		delete(b.writers, l.buf)
	}
	b.landings = b.landings[:0]
}

// landing is a destination rank's landing buffer of a tensor quantized at
// the destination.
type landing struct {
	rank int
	buf  int32
}

package ir

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/m2n-project/m2n/model/layout"
)

// The JSON form; docs/ir.md documents every field.

type scheduleJSON struct {
	Format     string       `json:"format"`
	Version    int          `json:"version"`
	Route      string       `json:"route"`
	ChunkBytes int64        `json:"chunk_bytes"`
	World      []rankJSON   `json:"world"`
	Tensors    []tensorJSON `json:"tensors"`
	Buffers    []bufferJSON `json:"buffers"`
	Ops        []opJSON     `json:"ops"`
}

type rankJSON struct {
	Rank   int `json:"rank"`
	GPU    int `json:"gpu"`
	Domain int `json:"domain"`
}

type tensorJSON struct {
	Name  string       `json:"name"`
	DType layout.DType `json:"dtype"`
	Shape []int64      `json:"shape"`
	Src   layoutJSON   `json:"src"`
	Dst   layoutJSON   `json:"dst"`
	// Version 3: a quantized destination, and scale tensors.
	DstDType *layout.DType `json:"dst_dtype,omitempty"`
	Quant    *quantJSON    `json:"quant,omitempty"`
	ScaleOf  *int          `json:"scale_of,omitempty"`
}

type quantJSON struct {
	Scheme string  `json:"scheme"`
	Block  []int64 `json:"block,omitempty"`
}

type layoutJSON struct {
	Mesh       []int              `json:"mesh"`
	Ranks      []int              `json:"ranks"`
	Placements []layout.Placement `json:"placements"`
}

type bufferJSON struct {
	ID     int      `json:"id"`
	Rank   int      `json:"rank"`
	Kind   string   `json:"kind"`
	Bytes  int64    `json:"bytes"`
	Tensor *int     `json:"tensor,omitempty"`
	Box    *boxJSON `json:"box,omitempty"`
	// ArenaOffset (version 2): a staging buffer in its rank's staging arena.
	ArenaOffset *int64 `json:"arena_offset,omitempty"`
	// DType (version 3): a placed buffer's element type, when it is not its
	// tensor's source dtype.
	DType *layout.DType `json:"dtype,omitempty"`
}

type boxJSON struct {
	Start []int64 `json:"start"`
	Size  []int64 `json:"size"`
}

type opJSON struct {
	ID    int         `json:"id"`
	Kind  string      `json:"kind"`
	Rank  int         `json:"rank"`
	Deps  []int       `json:"deps,omitempty"`
	Peer  *int        `json:"peer,omitempty"`
	Match *int        `json:"match,omitempty"`
	Src   *regionJSON `json:"src,omitempty"`
	Dst   *regionJSON `json:"dst,omitempty"`
	Scale *regionJSON `json:"scale,omitempty"` // quantize (version 3)
}

type regionJSON struct {
	Buf    int     `json:"buf"`
	Offset *int64  `json:"offset,omitempty"`
	Bytes  int64   `json:"bytes"`
	Start  []int64 `json:"start,omitempty"`
	Size   []int64 `json:"size,omitempty"`
}

var bufferKinds = map[BufferKind]string{Input: "input", Output: "output", Staging: "staging"}
var opKinds = map[OpKind]string{Send: "send", Recv: "recv", Copy: "copy", Pack: "pack", Unpack: "unpack", Quantize: "quantize"}

func (k BufferKind) String() string {
	if s, ok := bufferKinds[k]; ok {
		return s
	}
	return fmt.Sprintf("buffer-kind(%d)", int(k))
}

func (k OpKind) String() string {
	if s, ok := opKinds[k]; ok {
		return s
	}
	return fmt.Sprintf("op-kind(%d)", int(k))
}

// MarshalJSON writes the versioned JSON form.
func (s *Schedule) MarshalJSON() ([]byte, error) {
	version := MinVersion // what an older reader reads exactly as before
	if s.UsesArena() {
		version = 2
	}
	if s.UsesQuant() {
		version = 3
	}
	out := scheduleJSON{
		Format: Format, Version: version, Route: s.Route, ChunkBytes: s.ChunkBytes,
		World:   make([]rankJSON, len(s.World)),
		Tensors: make([]tensorJSON, len(s.Tensors)),
		Buffers: make([]bufferJSON, len(s.Buffers)),
		Ops:     make([]opJSON, len(s.Ops)),
	}
	for i, r := range s.World {
		out.World[i] = rankJSON(r)
	}
	for i, t := range s.Tensors {
		out.Tensors[i] = tensorJSON{
			Name: t.Name, DType: t.Src.DType, Shape: t.Src.Shape,
			Src: layoutJSON{t.Src.Mesh.Shape, t.Src.Mesh.Ranks, t.Src.Placements},
			Dst: layoutJSON{t.Dst.Mesh.Shape, t.Dst.Mesh.Ranks, t.Dst.Placements},
		}
		if t.Dst.DType != t.Src.DType {
			d := t.Dst.DType
			out.Tensors[i].DstDType = &d
		}
		if t.Quant.On() {
			q := &quantJSON{Scheme: t.Quant.Scheme.String()}
			if t.Quant.HasBlock() {
				q.Block = t.Quant.Block[:]
			}
			out.Tensors[i].Quant = q
		}
		if t.ScaleOf > 0 {
			w := t.ScaleOf - 1
			out.Tensors[i].ScaleOf = &w
		}
	}
	for i, b := range s.Buffers {
		bj := bufferJSON{ID: b.ID, Rank: b.Rank, Kind: b.Kind.String(), Bytes: b.Bytes}
		if b.Placed() {
			t := b.Tensor
			bj.Tensor = &t
			bj.Box = &boxJSON{b.Box.Start, b.Box.Size}
			if d := b.DType; d.Valid() && d != s.Tensors[t].Src.DType {
				bj.DType = &d
			}
		}
		if b.InArena {
			o := b.ArenaOffset
			bj.ArenaOffset = &o
		}
		out.Buffers[i] = bj
	}
	for i := range s.Ops {
		op := &s.Ops[i]
		oj := opJSON{ID: i, Kind: op.Kind.String(), Rank: int(op.Rank)}
		if op.DepLen > 0 {
			oj.Deps = make([]int, op.DepLen)
			for k, d := range s.Deps(int32(i)) {
				oj.Deps[k] = int(d)
			}
		}
		if op.Kind == Send || op.Kind == Recv {
			p, m := int(op.Peer), int(op.Match)
			oj.Peer, oj.Match = &p, &m
		}
		if op.Kind != Recv {
			oj.Src = s.regionOut(op.Src)
		}
		if op.Kind != Send {
			oj.Dst = s.regionOut(op.Dst)
		}
		if op.Kind == Quantize {
			oj.Scale = s.regionOut(s.QuantScale[int32(i)])
		}
		out.Ops[i] = oj
	}
	return json.Marshal(out)
}

func (s *Schedule) regionOut(r Region) *regionJSON {
	rj := &regionJSON{Buf: int(r.Buf), Bytes: r.Bytes}
	if r.IsBox() {
		b := s.Box(r)
		rj.Start, rj.Size = b.Start, b.Size
	} else {
		o := r.Offset
		rj.Offset = &o
	}
	return rj
}

// Encode writes the schedule as JSON to w.
func Encode(w io.Writer, s *Schedule) error {
	b, err := s.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Decode reads a schedule from its JSON form and validates it. Unknown
// fields, another format or version, and schedules that fail [Schedule.Validate]
// are errors.
func Decode(r io.Reader) (*Schedule, error) {
	// Refuse what is not a JSON object at its first byte, and read at most
	// MaxDocumentBytes: a device or a stream of garbage is not read whole.
	br := bufio.NewReader(io.LimitReader(r, MaxDocumentBytes+1))
	for {
		c, err := br.Peek(1)
		if err != nil {
			return nil, fmt.Errorf("schedule: not JSON: %w", err)
		}
		if c[0] == ' ' || c[0] == '\t' || c[0] == '\n' || c[0] == '\r' {
			br.ReadByte()
			continue
		}
		if c[0] != '{' {
			return nil, fmt.Errorf("schedule: not JSON: it starts with byte %#02x, not an object's '{'", c[0])
		}
		break
	}
	data, err := io.ReadAll(br)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > MaxDocumentBytes {
		return nil, fmt.Errorf("schedule: more than %d bytes: a schedule document may have at most %d bytes (4 GiB)", MaxDocumentBytes, MaxDocumentBytes)
	}
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("schedule: not JSON: %w", err)
	}
	if head.Format != Format {
		return nil, fmt.Errorf("schedule: format %q, want %q", head.Format, Format)
	}
	if head.Version < MinVersion || head.Version > Version {
		return nil, fmt.Errorf("schedule: version %d, but this m2n reads versions %d to %d", head.Version, MinVersion, Version)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var sj scheduleJSON
	if err := dec.Decode(&sj); err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	s, err := fromJSON(&sj, head.Version)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	return s, nil
}

func fromJSON(sj *scheduleJSON, version int) (*Schedule, error) {
	s := &Schedule{Route: sj.Route, ChunkBytes: sj.ChunkBytes,
		World:   make([]Rank, len(sj.World)),
		Tensors: make([]Tensor, len(sj.Tensors)),
		Buffers: make([]Buffer, len(sj.Buffers)),
		Ops:     make([]Op, 0, len(sj.Ops)),
	}
	for i, r := range sj.World {
		s.World[i] = Rank(r)
	}
	v3 := func(what string) error {
		return fmt.Errorf("%s: a version 3 field in a version %d document", what, version)
	}
	for i, t := range sj.Tensors {
		s.Tensors[i] = Tensor{Name: t.Name,
			Src: layout.Layout{Shape: t.Shape, DType: t.DType, Mesh: layout.Mesh{Shape: t.Src.Mesh, Ranks: t.Src.Ranks}, Placements: t.Src.Placements},
			Dst: layout.Layout{Shape: t.Shape, DType: t.DType, Mesh: layout.Mesh{Shape: t.Dst.Mesh, Ranks: t.Dst.Ranks}, Placements: t.Dst.Placements},
		}
		if (t.DstDType != nil || t.Quant != nil || t.ScaleOf != nil) && version < 3 {
			return nil, v3(fmt.Sprintf("tensors[%d]: dst_dtype, quant or scale_of", i))
		}
		if t.DstDType != nil {
			s.Tensors[i].Dst.DType = *t.DstDType
		}
		if q := t.Quant; q != nil {
			sc, err := layout.ParseQuantScheme(q.Scheme)
			if err != nil {
				return nil, fmt.Errorf("tensors[%d].quant.scheme: %w", i, err)
			}
			s.Tensors[i].Quant.Scheme = sc
			hasBlock := s.Tensors[i].Quant.HasBlock()
			switch {
			case hasBlock && len(q.Block) != 2:
				return nil, fmt.Errorf("tensors[%d].quant.block = %v: %s scales need [rows, cols]", i, q.Block, sc)
			case hasBlock:
				s.Tensors[i].Quant.Block = [2]int64{q.Block[0], q.Block[1]}
			case len(q.Block) != 0:
				return nil, fmt.Errorf("tensors[%d].quant.block: only the block and shard schemes have a block", i)
			}
		}
		if t.ScaleOf != nil {
			if *t.ScaleOf < 0 || *t.ScaleOf >= len(sj.Tensors) {
				return nil, fmt.Errorf("tensors[%d].scale_of = %d: not an index of tensors (0 to %d)", i, *t.ScaleOf, len(sj.Tensors)-1)
			}
			s.Tensors[i].ScaleOf = *t.ScaleOf + 1
		}
	}
	kinds := map[string]BufferKind{}
	for k, v := range bufferKinds {
		kinds[v] = k
	}
	for i, b := range sj.Buffers {
		k, ok := kinds[b.Kind]
		if !ok {
			return nil, fmt.Errorf("buffers[%d].kind = %q: want input, output or staging", i, b.Kind)
		}
		if b.Bytes > MaxBufferBytes {
			return nil, fmt.Errorf("buffers[%d].bytes = %d: %w (at most %d bytes, 1 TiB, per buffer)", i, b.Bytes, ErrTooLarge, MaxBufferBytes)
		}
		buf := Buffer{ID: b.ID, Rank: b.Rank, Kind: k, Bytes: b.Bytes, Tensor: -1}
		if (b.Tensor == nil) != (b.Box == nil) {
			return nil, fmt.Errorf("buffers[%d]: tensor and box go together", i)
		}
		if b.Tensor != nil {
			if *b.Tensor < 0 || *b.Tensor >= len(sj.Tensors) {
				return nil, fmt.Errorf("buffers[%d].tensor = %d: not an index of tensors (0 to %d)", i, *b.Tensor, len(sj.Tensors)-1)
			}
			buf.Tensor = *b.Tensor
			buf.Box = layout.Box{Start: b.Box.Start, Size: b.Box.Size}
		}
		if b.ArenaOffset != nil {
			if version < 2 {
				return nil, fmt.Errorf("buffers[%d].arena_offset: a version 2 field in a version %d document", i, version)
			}
			buf.InArena, buf.ArenaOffset = true, *b.ArenaOffset
		}
		if b.DType != nil {
			if version < 3 {
				return nil, v3(fmt.Sprintf("buffers[%d].dtype", i))
			}
			if b.Tensor == nil {
				return nil, fmt.Errorf("buffers[%d].dtype: only a placed buffer has a dtype", i)
			}
			buf.DType = *b.DType
		}
		s.Buffers[i] = buf
	}
	okinds := map[string]OpKind{}
	for k, v := range opKinds {
		okinds[v] = k
	}
	for i, o := range sj.Ops {
		if o.ID != i {
			return nil, fmt.Errorf("ops[%d]: id %d, want %d (ops are listed by id)", i, o.ID, i)
		}
		k, ok := okinds[o.Kind]
		if !ok {
			return nil, fmt.Errorf("ops[%d].kind = %q: want send, recv, copy, pack, unpack or quantize", i, o.Kind)
		}
		op := Op{Kind: k, Rank: int32(o.Rank), Peer: -1, Match: -1}
		if o.Rank < 0 || o.Rank > math.MaxInt32 {
			return nil, fmt.Errorf("ops[%d].rank = %d: out of range", i, o.Rank)
		}
		isXfer := k == Send || k == Recv
		if isXfer != (o.Peer != nil && o.Match != nil) {
			return nil, fmt.Errorf("ops[%d]: peer and match are required on send and recv and only there", i)
		}
		if isXfer {
			if *o.Peer < 0 || *o.Peer > math.MaxInt32 || *o.Match < 0 || *o.Match >= len(sj.Ops) {
				return nil, fmt.Errorf("ops[%d]: peer %d or match %d out of range", i, *o.Peer, *o.Match)
			}
			op.Peer, op.Match = int32(*o.Peer), int32(*o.Match)
		}
		needSrc, needDst := k != Recv, k != Send
		if (o.Src != nil) != needSrc || (o.Dst != nil) != needDst {
			return nil, fmt.Errorf("ops[%d] (%s): a send has only src, a recv only dst, others both", i, o.Kind)
		}
		var err error
		if o.Src != nil {
			if op.Src, err = s.regionIn(o.Src); err != nil {
				return nil, fmt.Errorf("ops[%d].src: %w", i, err)
			}
		}
		if o.Dst != nil {
			if op.Dst, err = s.regionIn(o.Dst); err != nil {
				return nil, fmt.Errorf("ops[%d].dst: %w", i, err)
			}
		}
		if (o.Scale != nil) != (k == Quantize) {
			return nil, fmt.Errorf("ops[%d] (%s): a quantize has a scale region, and only it", i, o.Kind)
		}
		var scale Region
		if o.Scale != nil {
			if version < 3 {
				return nil, v3(fmt.Sprintf("ops[%d].scale", i))
			}
			if scale, err = s.regionIn(o.Scale); err != nil {
				return nil, fmt.Errorf("ops[%d].scale: %w", i, err)
			}
		}
		deps := make([]int32, len(o.Deps))
		for k, d := range o.Deps {
			if d < 0 || d >= i {
				return nil, fmt.Errorf("ops[%d]: dependency %d does not precede it", i, d)
			}
			deps[k] = int32(d)
		}
		if k == Quantize {
			s.AddQuantize(op, scale, deps...)
			continue
		}
		s.AddOp(op, deps...)
	}
	return s, nil
}

func (s *Schedule) regionIn(rj *regionJSON) (Region, error) {
	r := Region{Buf: int32(rj.Buf), Bytes: rj.Bytes}
	if rj.Buf < 0 || rj.Buf >= len(s.Buffers) {
		return r, fmt.Errorf("buffer %d out of range", rj.Buf)
	}
	isBox := rj.Start != nil || rj.Size != nil
	switch {
	case isBox && rj.Offset != nil:
		return r, fmt.Errorf("give offset (a byte range) or start and size (a box), not both")
	case isBox:
		nd := len(s.Buffers[rj.Buf].Box.Size)
		if len(rj.Start) != nd || len(rj.Size) != nd {
			return r, fmt.Errorf("start and size must have the %d dims of buffer %d's box", nd, rj.Buf)
		}
		r.BoxRef = s.AddBox(layout.Box{Start: rj.Start, Size: rj.Size})
	case rj.Offset != nil:
		r.Offset = *rj.Offset
	default:
		return r, fmt.Errorf("give offset (a byte range) or start and size (a box)")
	}
	return r, nil
}

package ir_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
)

// small builds a valid schedule with packs, unpacks, staging and several
// domains: [4, 6, 10] fp32, [R, S(1)] over 2 x 2 -> [S(2), R] over 2 x 3;
// each contribution [4, 3, 5] is strided on both sides.
func small(t testing.TB, route string) *ir.Schedule {
	shape := []int64{4, 6, 10}
	src := layout.Layout{Shape: shape, DType: layout.FP32, Mesh: layout.Mesh{Shape: []int{2, 2}, Ranks: []int{0, 1, 2, 3}}, Placements: []layout.Placement{layout.R, layout.S(1)}}
	dst := layout.Layout{Shape: shape, DType: layout.FP32, Mesh: layout.Mesh{Shape: []int{2, 3}, Ranks: []int{4, 5, 6, 8, 9, 10}}, Placements: []layout.Placement{layout.S(2), layout.R}}
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 4, 3
	s, err := plan.Build([]ir.Tensor{{Name: "w", Src: src, Dst: dst}}, tp, plan.Options{Route: route, ChunkBytes: 128})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// smallCapped is small's tensor twice (so placed copies can be reused
// across tensors) under a staging cap of half what it stages per rank
// uncapped, or the least the route takes.
func smallCapped(t testing.TB, route string) *ir.Schedule {
	w := small(t, route).Tensors[0]
	tensors := []ir.Tensor{w, {Name: "w2", Src: w.Src, Dst: w.Dst}}
	tp, _ := topo.Preset("hgx-h200")
	tp.GPUsPerDomain, tp.Domains = 4, 3
	opt := plan.Options{Route: route, ChunkBytes: 128}
	s, err := plan.Build(tensors, tp, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.StagingCapBytes = s.Stats().MaxStaging / 2
	c, err := plan.Build(tensors, tp, opt)
	var ce *plan.StagingCapError
	if errors.As(err, &ce) {
		opt.StagingCapBytes = ce.Need
		c, err = plan.Build(tensors, tp, opt)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c.Stats().MaxStaging >= s.Stats().MaxStaging {
		t.Fatalf("%s: capped staging %d, uncapped %d", route, c.Stats().MaxStaging, s.Stats().MaxStaging)
	}
	return c
}

// clone deep-copies a schedule through JSON.
func clone(t testing.TB, s *ir.Schedule) *ir.Schedule {
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ir.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func firstOp(s *ir.Schedule, kind ir.OpKind) int {
	for i := range s.Ops {
		if s.Ops[i].Kind == kind {
			return i
		}
	}
	return -1
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route string
		mut   func(s *ir.Schedule)
		err   string
	}{
		{"unpack without its recv", plan.Hierarchical, func(s *ir.Schedule) {
			i := firstOp(s, ir.Unpack)
			s.Ops[i].DepLen = 0
		}, "does not happen before it"},
		{"wrong source bytes", plan.Flat, func(s *ir.Schedule) {
			for i := range s.Ops {
				op := &s.Ops[i]
				if b := s.Box(op.Src); op.Kind == ir.Pack && b.Start[2] == 0 {
					b.Start[2] = 1 // the same size, one column over
					return
				}
			}
			panic("no pack")
		}, "belong (buffer"},
		{"output byte never written", plan.Flat, func(s *ir.Schedule) {
			i := firstOp(s, ir.Unpack)
			s.Ops[i].Kind = ir.Pack // now reads a box and writes staging; nothing writes that output box
			s.Ops[i].Src, s.Ops[i].Dst = s.Ops[i].Dst, s.Ops[i].Src
		}, "are never written"},
		{"output written twice", plan.Hierarchical, func(s *ir.Schedule) {
			i := firstOp(s, ir.Unpack)
			s.AddOp(s.Ops[i], s.Deps(int32(i))...)
		}, "also writes"},
		{"send size differs", plan.Flat, func(s *ir.Schedule) {
			s.Ops[firstOp(s, ir.Send)].Src.Bytes -= 4
		}, "but its match"},
		{"bad match", plan.Flat, func(s *ir.Schedule) {
			i := firstOp(s, ir.Send)
			s.Ops[i].Match = int32(i)
		}, "is not its recv"},
		{"dependency forward", plan.Flat, func(s *ir.Schedule) {
			s.Ops[0].DepOff, s.Ops[0].DepLen = int32(len(s.DepPool)), 1
			s.DepPool = append(s.DepPool, 5)
		}, "does not precede it"},
		{"region out of bounds", plan.Flat, func(s *ir.Schedule) {
			i := firstOp(s, ir.Send)
			s.Ops[i].Src.Offset = 1 << 40
		}, "outside buffer"},
		{"writes an input", plan.Flat, func(s *ir.Schedule) {
			i := firstOp(s, ir.Pack) // its source is its rank's input; make it the destination too
			s.Ops[i].Dst = ir.Region{Buf: s.Ops[i].Src.Buf, Bytes: s.Ops[i].Dst.Bytes}
		}, "writes input buffer"},
		{"staging too small", plan.Hierarchical, func(s *ir.Schedule) {
			for b := range s.Buffers {
				if s.Buffers[b].Kind == ir.Staging && !s.Buffers[b].Placed() {
					s.Buffers[b].Bytes--
					return
				}
			}
		}, "outside buffer"},
		{"input box wrong", plan.Flat, func(s *ir.Schedule) {
			var ins []int
			for b := range s.Buffers {
				if s.Buffers[b].Kind == ir.Input {
					ins = append(ins, b)
				}
			}
			a, b := &s.Buffers[ins[0]], &s.Buffers[ins[1]]
			a.Box, b.Box = b.Box, a.Box
		}, "not its source box"},
		{"missing output", plan.AGBcast, func(s *ir.Schedule) {
			for b := range s.Buffers {
				if s.Buffers[b].Kind == ir.Output {
					s.Buffers[b].Kind = ir.Staging
					return
				}
			}
		}, "has no output buffer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := clone(t, small(t, tc.route))
			if err := s.Validate(); err != nil {
				t.Fatalf("the unmodified schedule fails: %v", err)
			}
			tc.mut(s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

// A send whose recv waits, through another op, on the send itself: every
// dependency points backwards, yet the transfer can never start.
func TestValidateDeadlock(t *testing.T) {
	shape := []int64{4}
	l := func(r int) layout.Layout {
		return layout.Layout{Shape: shape, DType: layout.FP32, Mesh: layout.Mesh{Shape: []int{1}, Ranks: []int{r}}, Placements: []layout.Placement{layout.R}}
	}
	full := layout.Box{Start: []int64{0}, Size: []int64{4}}
	s := &ir.Schedule{
		Route: "hand", ChunkBytes: 16,
		World:   []ir.Rank{{Rank: 0, GPU: 0}, {Rank: 1, GPU: 1}},
		Tensors: []ir.Tensor{{Name: "x", Src: l(0), Dst: l(1)}},
		Buffers: []ir.Buffer{
			{ID: 0, Rank: 0, Kind: ir.Input, Bytes: 16, Tensor: 0, Box: full},
			{ID: 1, Rank: 1, Kind: ir.Output, Bytes: 16, Tensor: 0, Box: full},
			{ID: 2, Rank: 0, Kind: ir.Staging, Bytes: 16, Tensor: -1},
		},
	}
	s.AddOp(ir.Op{Kind: ir.Send, Rank: 0, Peer: 1, Match: 2, Src: ir.Region{Buf: 0, Bytes: 16}})
	s.AddOp(ir.Op{Kind: ir.Copy, Rank: 0, Peer: -1, Match: -1, Src: ir.Region{Buf: 0, Bytes: 16}, Dst: ir.Region{Buf: 2, Bytes: 16}}, 0)
	s.AddOp(ir.Op{Kind: ir.Recv, Rank: 1, Peer: 0, Match: 0, Dst: ir.Region{Buf: 1, Bytes: 16}}, 1)
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "deadlock") {
		t.Errorf("Validate() = %v, want a deadlock", err)
	}
	// The copy not waiting on the send: the recv may wait on it, though the
	// op IDs are no topological order of the transfers.
	s.Ops[1].DepLen = 0
	if err := s.Validate(); err != nil {
		t.Errorf("the recv after an independent copy: %v", err)
	}
	s.Ops[2].DepLen = 0
	if err := s.Validate(); err != nil {
		t.Errorf("without the cycle: %v", err)
	}
}

// The host executor finds a missing dependency by running ops in random
// orders, without the validator's help.
func TestHostExecutorFindsMissingDependency(t *testing.T) {
	s := small(t, plan.Hierarchical)
	if res, err := hostexec.Run(s, hostexec.Options{Seed: 1}); err != nil || res.Wrong != 0 {
		t.Fatalf("valid schedule: %+v, %v", res, err)
	}
	for i := range s.Ops {
		if s.Ops[i].Kind == ir.Unpack {
			s.Ops[i].DepLen = 0
		}
	}
	found := false
	for seed := range uint64(20) {
		res, err := hostexec.Run(s, hostexec.Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		found = found || res.Wrong > 0
	}
	if !found {
		t.Error("unpacks without dependencies never produced a wrong byte in 20 orders")
	}
}

func TestDecodeErrors(t *testing.T) {
	good, _ := json.Marshal(small(t, plan.Flat))
	for _, tc := range []struct {
		name string
		doc  string
		err  string
	}{
		{"not json", "{", "not JSON"},
		{"other format", `{"format":"x","version":1}`, `format "x"`},
		{"other version", `{"format":"m2n.schedule","version":7}`, "version 7"},
		{"unknown field", strings.Replace(string(good), `"route"`, `"bogus":1,"route"`, 1), `unknown field "bogus"`},
		{"bad op kind", strings.Replace(string(good), `"kind":"send"`, `"kind":"teleport"`, 1), `kind = "teleport"`},
		{"self dependency", strings.Replace(string(good), `"ops":[{"id":0,`, `"ops":[{"id":0,"deps":[0],`, 1), "does not precede"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ir.Decode(strings.NewReader(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Decode() = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, r := range plan.Routes {
		b, _ := json.Marshal(small(f, r))
		f.Add(b)
	}
	// Capped schedules (version 2, staging reused) and the hand-written
	// documents.
	for _, r := range []string{plan.Hierarchical, plan.AGBcast} {
		b, _ := json.Marshal(smallCapped(f, r))
		f.Add(b)
	}
	// Quantized destinations: per channel cut by a column split (landed
	// whole), and shard scales (a scale a rank's shard).
	for _, scheme := range []layout.QuantScheme{layout.QuantChannel, layout.QuantShard} {
		shape := []int64{8, 32}
		src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{0, 1}}, Placements: []layout.Placement{layout.S(0)}}
		dst := layout.Layout{Shape: shape, DType: layout.FP8E4M3, Mesh: layout.Mesh{Shape: []int{2}, Ranks: []int{4, 5}}, Placements: []layout.Placement{layout.S(1)}}
		q, err := layout.Quant{Scheme: scheme}.ForLayout(dst)
		if err != nil {
			f.Fatal(err)
		}
		tp, _ := topo.Preset("hgx-h200")
		tp.GPUsPerDomain, tp.Domains = 4, 2
		s, err := plan.Build([]ir.Tensor{{Name: "w.weight", Src: src, Dst: dst, Quant: q}}, tp, plan.Options{Route: plan.Flat, ChunkBytes: 64})
		if err != nil {
			f.Fatal(err)
		}
		b, _ := json.Marshal(s)
		f.Add(b)
	}
	docs, _ := filepath.Glob("testdata/*.json")
	for _, d := range docs {
		b, err := os.ReadFile(d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ir.Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		// A schedule that validates must run and deliver exact bytes.
		var total int64
		for _, b := range s.Buffers {
			total += b.Bytes
		}
		if total > 1<<20 {
			return
		}
		res, err := hostexec.Run(s, hostexec.Options{Seed: 1})
		if err != nil {
			t.Fatalf("valid schedule failed to run: %v", err)
		}
		if res.Wrong != 0 {
			t.Fatalf("valid schedule delivered %d wrong bytes: %s", res.Wrong, res.FirstWrong)
		}
	})
}

package native

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/internal/schedtest"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/program"
)

// arraysOf returns, for rank, the arrays a caller would pass for every
// input and output buffer of the schedule, at made-up addresses.
func arraysOf(s *ir.Schedule, rank int, dev int) map[string]map[string]Array {
	out := map[string]map[string]Array{}
	for i := range s.Buffers {
		b := &s.Buffers[i]
		if b.Rank != rank || (b.Kind != ir.Input && b.Kind != ir.Output) {
			continue
		}
		name, side := s.Tensors[b.Tensor].Name, "src"
		if b.Kind == ir.Output {
			side = "dst"
		}
		if out[name] == nil {
			out[name] = map[string]Array{}
		}
		out[name][side] = Array{Ptr: uint64(1<<20 + 4096*i), Shape: append([]int64(nil), b.Box.Size...), DType: s.BufDType(int32(i)).String(), Device: dev, Contiguous: true}
	}
	return out
}

// A caller's arrays map onto the schedule's buffers, and every mismatch is
// an error naming the tensor and the field.
func TestExternalBuffers(t *testing.T) {
	s := schedtest.TwoGPU(t, plan.Flat, 4)
	good := arraysOf(s, 1, 1)
	bufs, err := externalBuffers(s, 1, 1, good)
	if err != nil {
		t.Fatal(err)
	}
	if len(bufs) != 2 {
		t.Fatalf("rank 1: %d buffers mapped, want its input and its output", len(bufs))
	}
	for _, tc := range []struct {
		name string
		edit func(a map[string]map[string]Array)
		want string
	}{
		{"missing dst", func(a map[string]map[string]Array) { delete(a["w"], "dst") }, "tensor w: no dst array given for rank 1"},
		{"shape", func(a map[string]map[string]Array) {
			x := a["w"]["src"]
			x.Shape = []int64{2, 256, 512}
			a["w"]["src"] = x
		}, "tensor w: src: shape [2 256 512], want [2 256 1024]"},
		{"dtype", func(a map[string]map[string]Array) { x := a["w"]["dst"]; x.DType = "fp16"; a["w"]["dst"] = x }, "tensor w: dst: dtype fp16, want bf16"},
		{"device", func(a map[string]map[string]Array) { x := a["w"]["dst"]; x.Device = 0; a["w"]["dst"] = x }, "tensor w: dst: on GPU 0, want GPU 1"},
		{"strided", func(a map[string]map[string]Array) { x := a["w"]["src"]; x.Contiguous = false; a["w"]["src"] = x }, "tensor w: src: not contiguous"},
		{"null", func(a map[string]map[string]Array) { x := a["w"]["src"]; x.Ptr = 0; a["w"]["src"] = x }, "tensor w: src: a null pointer"},
		{"misaligned", func(a map[string]map[string]Array) { x := a["w"]["src"]; x.Ptr++; a["w"]["src"] = x }, "not aligned to its 2-byte elements"},
		{"unknown tensor", func(a map[string]map[string]Array) { a["v"] = map[string]Array{"src": a["w"]["src"]} }, "tensor v: not in the schedule"},
		{"unknown side", func(a map[string]map[string]Array) { a["w"]["scale"] = a["w"]["src"] }, `tensor w: side "scale": want src or dst`},
	} {
		a := arraysOf(s, 1, 1)
		tc.edit(a)
		_, err := externalBuffers(s, 1, 1, a)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// Execute runs on the caller's arrays and stream: a one-rank schedule on
// the fake device copies a random source into the caller's destination,
// and m2n allocates no memory for either.
func TestExecuteOnCallerArrays(t *testing.T) {
	tp, err := topo.Preset("hgx-h200")
	if err != nil {
		t.Fatal(err)
	}
	tp.GPUsPerDomain, tp.Domains = 1, 1
	shape := []int64{8, 64, 96}
	l := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{1}, Ranks: []int{0}}, Placements: []layout.Placement{{}}}
	s, err := plan.Build([]ir.Tensor{{Name: "w", Src: l, Dst: l}}, tp, plan.Options{Route: plan.Flat, ChunkBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	g := newFake(1, 7)
	n := int64(8 * 64 * 96 * 2)
	g.alloc(0, 256) // no array at address 0
	src, _ := g.alloc(0, n)
	dst, _ := g.alloc(0, n)
	before := g.next[0]
	rng := rand.New(rand.NewPCG(8, 9))
	for i := range n {
		g.mem[src+uint64(i)] = byte(rng.Uint32())
	}
	caller, _ := g.newStream(0)
	arrays := map[string]map[string]Array{"w": {
		"src": {Ptr: src, Shape: shape, DType: "bf16", Device: 0, Contiguous: true},
		"dst": {Ptr: dst, Shape: shape, DType: "bf16", Device: 0, Contiguous: true},
	}}
	opt := Options{Backend: NCCL, Settings: program.Settings{Transport: TransportNCCL}, External: &External{Stream: uintptr(caller), Arrays: arrays}}
	x, err := newExecutor(s, g, opt, map[int32]int{0: 0}, map[int32]int{0: 0}, map[int][]handle{0: {0}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if got := g.next[0] - before; got >= n {
		t.Errorf("New allocated %d bytes: the caller's arrays (%d bytes each) were allocated again", got, n)
	}
	for range 2 {
		clear(g.mem[dst : dst+uint64(n)])
		if err := x.Execute(); err != nil {
			t.Fatal(err)
		}
		if err := g.drain(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g.mem[dst:dst+uint64(n)], g.mem[src:src+uint64(n)]) {
			t.Fatal("the caller's destination differs from its source")
		}
	}
	if err := (&Executor{}).Execute(); err == nil {
		t.Error("Execute ran an executor made without External")
	}
}

// A caller's table of arrays, whatever its contents, is mapped or refused
// with an error: never a panic, and a mapped table covers exactly the
// rank's inputs and outputs at the addresses given.
func FuzzExternalBuffers(f *testing.F) {
	s := schedtest.TwoGPU(f, plan.Flat, 4)
	good, _ := json.Marshal(arraysOf(s, 1, 1))
	f.Add(good, 1, 1)
	f.Add([]byte(`{"w":{"src":{"Ptr":4096,"Shape":[2,256,1024],"DType":"bf16","Device":-1,"Contiguous":true}}}`), 0, -1)
	f.Add([]byte(`{"w":{"dst":{"Ptr":1,"Shape":[],"DType":"","Device":3}}}`), 1, 0)
	f.Add([]byte(`{}`), 0, 0)
	f.Fuzz(func(t *testing.T, table []byte, rank, dev int) {
		var arrays map[string]map[string]Array
		if json.Unmarshal(table, &arrays) != nil || rank < 0 || rank >= len(s.World) {
			return
		}
		bufs, err := externalBuffers(s, int32(rank), dev, arrays)
		if err != nil {
			return
		}
		for i, a := range bufs {
			b := &s.Buffers[i]
			name, side := s.Tensors[b.Tensor].Name, "src"
			if b.Kind == ir.Output {
				side = "dst"
			}
			if b.Rank != rank || a != arrays[name][side].Ptr {
				t.Fatalf("buffer %d (rank %d) mapped to %#x, not the %s array of %s", i, b.Rank, a, side, name)
			}
		}
		if len(bufs) != 2 {
			t.Fatalf("%d buffers mapped for rank %d, want its input and output", len(bufs), rank)
		}
	})
}

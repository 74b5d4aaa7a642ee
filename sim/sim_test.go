package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
)

func paper(rho int) []ir.Tensor {
	shape := []int64{256, 2048, 7168}
	return []ir.Tensor{{
		Name: "gate_proj",
		Src:  layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{16}, Ranks: layout.RankRange(0, 16)}, Placements: []layout.Placement{layout.S(0)}},
		Dst:  layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{rho, 8}, Ranks: layout.RankRange(72, 8*rho)}, Placements: []layout.Placement{layout.R, layout.S(1)}},
	}}
}

func nvl72(domains int) *topo.Topology {
	t, _ := topo.Preset("gb200-nvl72")
	t.Domains = domains
	return t
}

func TestDeterministicAndConserving(t *testing.T) {
	s, err := plan.Build(paper(4), nvl72(2), plan.Options{Route: plan.Hierarchical})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Run(s, nvl72(2), Options{Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(s, nvl72(2), Options{Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Makespan != b.Makespan || a.Events != b.Events {
		t.Fatalf("two runs differ: %v vs %v", a.Makespan, b.Makespan)
	}
	for i := range a.Ops {
		if a.Ops[i] != b.Ops[i] {
			t.Fatalf("op %d timed %v then %v", i, a.Ops[i], b.Ops[i])
		}
	}
	// Conservation: each class carries exactly the schedule's bytes.
	st := s.Stats()
	net, nvl := egressBytes(a.Resources)
	if net != st.Bytes[ir.Net] || nvl != st.Bytes[ir.NVLink] {
		t.Errorf("simulated network %d, NVLink %d bytes; schedule has %d, %d", net, nvl, st.Bytes[ir.Net], st.Bytes[ir.NVLink])
	}
	// Dependencies hold: no op starts before its dependencies end.
	for i := range int32(len(s.Ops)) {
		for _, d := range s.Deps(i) {
			if a.Ops[i].Start < a.Ops[d].End {
				t.Fatalf("op %d starts at %v before its dependency %d ends at %v", i, a.Ops[i].Start, d, a.Ops[d].End)
			}
		}
	}
}

// A random schedule's simulation respects capacities at every instant: the
// bytes each resource carries never exceed capacity x busy time.
func TestCapacityRespected(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for range 30 {
		rho := 1 + rng.IntN(4)
		shape := []int64{int64(8 + rng.IntN(64)), int64(64 + rng.IntN(256))}
		src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{4}, Ranks: layout.RankRange(0, 4)}, Placements: []layout.Placement{layout.S(rng.IntN(2))}}
		dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{rho, 2}, Ranks: layout.RankRange(6, 2*rho)}, Placements: []layout.Placement{layout.R, layout.S(rng.IntN(2))}}
		tp, _ := topo.Preset("hgx-h200")
		tp.GPUsPerDomain, tp.Domains = 4, 4
		for _, route := range plan.Routes {
			s, err := plan.Build([]ir.Tensor{{Name: "t", Src: src, Dst: dst}}, tp, plan.Options{Route: route, ChunkBytes: 256})
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(s, tp, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Resources {
				if max := float64(r.Capacity) * r.Busy.Seconds(); float64(r.Bytes) > max*(1+1e-6)+1 {
					t.Fatalf("%s carried %d bytes in %v busy at %v", r.Name, r.Bytes, r.Busy, r.Capacity)
				}
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	s, err := plan.Build(paper(2), nvl72(2), plan.Options{Route: plan.Flat})
	if err != nil {
		t.Fatal(err)
	}
	small, _ := topo.Preset("hgx-h200")
	if _, err := Run(s, small, Options{}); err == nil {
		t.Error("an IR whose ranks are off the topology ran")
	}
	zero := nvl72(2)
	zero.NIC = 0
	if _, err := Run(s, zero, Options{}); err == nil {
		t.Error("a topology with zero bandwidth ran")
	}
	if _, err := Run(s, nvl72(2), Options{FlowCap: [3]units.Bandwidth{-1, 0, 0}}); err == nil {
		t.Error("a negative flow cap ran")
	}
}

// An fp8 destination: each source rank's quantize runs on its memory for
// (source + fp8 + scale bytes) / memory bandwidth, reading and writing
// once each, and the network carries half the bf16 bytes.
func TestQuantizeCost(t *testing.T) {
	bf, fp := paper(2), paper(2)
	fp[0].Dst.DType, fp[0].Quant = layout.FP8E4M3, layout.Quant{Scheme: layout.QuantBlock, Block: layout.DefaultBlock}
	tp := nvl72(2)
	sa, err := plan.Build(bf, tp, plan.Options{Route: plan.Hierarchical})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := plan.Build(fp, tp, plan.Options{Route: plan.Hierarchical})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Run(sa, tp, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(sb, tp, Options{Timeline: true})
	if err != nil {
		t.Fatal(err)
	}
	quant := 0
	for i, op := range sb.Ops {
		if op.Kind != ir.Quantize {
			continue
		}
		quant++
		// A shard of 16 experts: 448 MiB of bf16 in, 224 MiB of fp8 and
		// 16 x 16 x 56 scales out.
		want := int64(448<<20) + 224<<20 + 16*16*56*4
		if got := op.Src.Bytes + op.Dst.Bytes + sb.QuantScale[int32(i)].Bytes; got != want {
			t.Fatalf("op %d: moves %d bytes, want %d", i, got, want)
		}
		sp := b.Ops[i]
		d := float64(sp.End-sp.Start) / float64(units.Second)
		if ideal := float64(want) / float64(tp.Memory); d < ideal*0.999 || d > ideal*1.01 {
			t.Errorf("op %d: quantize took %.3g s, want about %.3g s (its bytes at the memory bandwidth)", i, d, ideal)
		}
	}
	if quant != 16 {
		t.Errorf("%d quantize ops, want 16", quant)
	}
	var na, nb int64
	for _, r := range a.Resources {
		if r.Class == NICEgress {
			na += r.Bytes
		}
	}
	for _, r := range b.Resources {
		if r.Class == NICEgress {
			nb += r.Bytes
		}
	}
	if want := na/2 + na/2/4096; nb != want {
		t.Errorf("network: %d bytes in fp8, want %d (half of %d, plus scales)", nb, want, na)
	}
	if ratio := float64(b.Makespan) / float64(a.Makespan); ratio > 0.6 || ratio < 0.45 {
		t.Errorf("fp8 takes %v against bf16's %v (%.2fx): want about half", b.Makespan, a.Makespan, ratio)
	}
}

// egressBytes sums the bytes the NIC and the NVLink egress ports carried.
func egressBytes(rs []ResourceStat) (net, nvl int64) {
	for _, r := range rs {
		switch r.Class {
		case NICEgress:
			net += r.Bytes
		case NVLinkEgress:
			nvl += r.Bytes
		}
	}
	return net, nvl
}

package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/m2n-project/m2n/hostexec"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/layout"
	"github.com/m2n-project/m2n/model/topo"
)

func paperTensors(rho int) []ir.Tensor {
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

// The paper's layer on two NVL72 domains (sources in the first, every
// destination in the second): each route moves the bytes its design says
// over the network, and hierarchical replicates over NVLink what flat sends
// over the network.
func TestBuildPaper(t *testing.T) {
	B := int64(7168) << 20
	for _, rho := range []int{2, 4, 8} {
		net := map[string]int64{Flat: int64(rho) * B, Hierarchical: B, AGBcast: B, NemoLegacy: B}
		nvl := map[string]int64{Flat: 0, Hierarchical: int64(rho-1) * B}
		for _, route := range Routes {
			t0 := time.Now()
			s, err := Build(paperTensors(rho), nvl72(2), Options{Route: route})
			if err != nil {
				t.Fatalf("rho %d %s: %v", rho, route, err)
			}
			st := s.Stats()
			t.Logf("rho %d %-12s %6d ops %5d buffers %v", rho, route, len(s.Ops), len(s.Buffers), time.Since(t0))
			if st.Bytes[ir.Net] != net[route] {
				t.Errorf("rho %d %s: %d network bytes, want %d", rho, route, st.Bytes[ir.Net], net[route])
			}
			if want, ok := nvl[route]; ok && st.Bytes[ir.NVLink] != want {
				t.Errorf("rho %d %s: %d NVLink bytes, want %d", rho, route, st.Bytes[ir.NVLink], want)
			}
			if s.Route != route || len(s.Tensors) != 1 || len(s.World) != 16+8*rho {
				t.Errorf("rho %d %s: route %q, %d tensors, %d ranks", rho, route, s.Route, len(s.Tensors), len(s.World))
			}
		}
	}
}

func BenchmarkBuildPaper(b *testing.B) {
	for _, rho := range []int{2, 4, 8} {
		for _, route := range Routes {
			b.Run(fmt.Sprintf("rho=%d/%s", rho, route), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := Build(paperTensors(rho), nvl72(2), Options{Route: route}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkBuildBatch plans and verifies a batch of 1,000 tensors between
// 128 and 128 ranks: each [4096, 1024] bf16, from a DP16 x TP8 trainer
// sharding dim 0 to a DP16 x TP8 generator sharding dim 1 (64 contributions
// of 128 KiB per tensor, 16 replicas on each side).
func BenchmarkBuildBatch(b *testing.B) {
	tensors := batchTensors(1000)
	for _, route := range Routes {
		b.Run(route, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(tensors, nvl72(4), Options{Route: route}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuildBatchCapped is BenchmarkBuildBatch's agbcast and
// nemo-legacy under a 64 MiB staging cap (a tensor's placed copy is 8 MiB):
// placed copies reused across tensors, every reuse validated.
func BenchmarkBuildBatchCapped(b *testing.B) {
	tensors := batchTensors(1000)
	for _, route := range []string{AGBcast, NemoLegacy} {
		b.Run(route, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Build(tensors, nvl72(4), Options{Route: route, StagingCapBytes: 64 << 20}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func batchTensors(n int) []ir.Tensor {
	shape := []int64{4096, 1024}
	src := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{16, 8}, Ranks: layout.RankRange(0, 128)}, Placements: []layout.Placement{layout.R, layout.S(0)}}
	dst := layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{16, 8}, Ranks: layout.RankRange(144, 128)}, Placements: []layout.Placement{layout.R, layout.S(1)}}
	out := make([]ir.Tensor, n)
	for i := range out {
		out[i] = ir.Tensor{Name: fmt.Sprintf("t%d", i), Src: src, Dst: dst}
	}
	return out
}

// randomTopology places ranks 0..63 in domains of 2-8 GPUs.
func randomTopology(rng *rand.Rand) *topo.Topology {
	t, _ := topo.Preset("hgx-h200")
	t.GPUsPerDomain = 2 + rng.IntN(7)
	t.Domains = (96 + t.GPUsPerDomain - 1) / t.GPUsPerDomain
	return t
}

// randomBatch draws a random case: a tensor with random layouts, and one
// time in batch a second with its own; a topology of randomTopology; a
// chunk of 1-64 bytes.
func randomBatch(rng *rand.Rand, batch int) ([]ir.Tensor, *topo.Topology, int64) {
	src, dst := randomLayouts(rng)
	tp := randomTopology(rng)
	tensors := []ir.Tensor{{Name: "t", Src: src, Dst: dst}}
	if rng.IntN(batch) == 0 {
		s2, d2 := randomLayouts(rng)
		tensors = append(tensors, ir.Tensor{Name: "u", Src: s2, Dst: d2})
	}
	return tensors, tp, int64(1 + rng.IntN(64))
}

// runOnHost checks that schedule s is rank-local and runs it on the host
// executor with seed, failing the test, named by desc, unless every
// destination byte is right; it returns the run.
func runOnHost(t *testing.T, s *ir.Schedule, seed uint64, desc string) *hostexec.Result {
	t.Helper()
	if err := s.CheckRankLocal(); err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	res, err := hostexec.Run(s, hostexec.Options{Seed: seed})
	if err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	if res.Wrong != 0 {
		t.Fatalf("%s: %d wrong bytes; first: %s", desc, res.Wrong, res.FirstWrong)
	}
	return res
}

// sentBy sums the bytes of sends by class, from ranks in from to ranks in to.
func sentBytes(s *ir.Schedule, from, to func(int) bool) int64 {
	var n int64
	for i := range s.Ops {
		op := &s.Ops[i]
		if op.Kind == ir.Send && from(int(op.Rank)) && to(int(op.Peer)) {
			n += op.Src.Bytes
		}
	}
	return n
}

func TestRoutesDeliverExactBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 200
	if testing.Short() {
		n = 40
	}
	for i := range n {
		tensors, tp, chunk := randomBatch(rng, 3)
		src, dst := tensors[0].Src, tensors[0].Dst
		for _, route := range Routes {
			s, err := Build(tensors, tp, Options{Route: route, ChunkBytes: chunk})
			if err != nil {
				t.Fatalf("case %d %s: %v\nsrc %v\ndst %v", i, route, err, src, dst)
			}
			runOnHost(t, s, uint64(i), fmt.Sprintf("case %d %s, src %v, dst %v", i, route, src, dst))
		}
	}
}

// agbcast and nemo-legacy count their ops from the geometry before building
// (agbcastOps, legacyOps): the op pool is allocated once, to the size the
// schedule needs. Too few would double it, too many leave it short of full.
func TestOpPoolSizedOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 100 {
		tensors, tp, chunk := randomBatch(rng, 3)
		src, dst := tensors[0].Src, tensors[0].Dst
		for _, route := range []string{AGBcast, NemoLegacy} {
			s, err := Build(tensors, tp, Options{Route: route, ChunkBytes: chunk})
			if err != nil {
				t.Fatalf("case %d %s: %v", i, route, err)
			}
			// Allocation rounds up to a size class: 1/8 at most, or a page.
			if n, c := len(s.Ops), cap(s.Ops); c > n+n/8+128 {
				t.Errorf("case %d %s: %d ops in a pool of %d\nsrc %v\ndst %v", i, route, n, c, src, dst)
			}
		}
	}
}

// Route properties on disjoint meshes in separate domains: flat sends rho x B
// from the sources, hierarchical B, and hierarchical brings each byte into
// each destination domain once over the network; agbcast delivers the whole
// tensor to every destination rank.
func TestRouteTraffic(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 100 {
		src, dst := randomLayouts(rng)
		// Sources on ranks below 64, destinations on ranks 64 and up, in
		// other domains: one domain of 64, or domains of 8.
		for k := range dst.Mesh.Ranks {
			dst.Mesh.Ranks[k] += 64
		}
		tp, _ := topo.Preset("hgx-h200")
		tp.GPUsPerDomain, tp.Domains = 64, 2
		if rng.IntN(2) == 0 {
			tp.GPUsPerDomain, tp.Domains = 8, 16
		}
		tensors := []ir.Tensor{{Name: "t", Src: src, Dst: dst}}
		r, err := Derive(src, dst)
		if err != nil {
			t.Fatal(err)
		}
		B := src.Bytes()
		isSrc := func(rk int) bool { return rk < 64 }
		isDst := func(rk int) bool { return rk >= 64 }
		var rhoB int64 // bytes every destination rank needs, summed
		for _, sl := range r.DstSlots {
			rhoB += int64(len(sl.Ranks)) * sl.Box.Elems() * src.DType.Size()
		}
		chunk := int64(1 + rng.IntN(64))
		for _, route := range Routes {
			s, err := Build(tensors, tp, Options{Route: route, ChunkBytes: chunk})
			if err != nil {
				t.Fatal(err)
			}
			egress := sentBytes(s, isSrc, isDst)
			switch route {
			case Flat:
				if egress != rhoB {
					t.Errorf("case %d flat: source egress %d, want rho x B = %d", i, egress, rhoB)
				}
			case Hierarchical:
				if egress != B {
					t.Errorf("case %d hierarchical: source egress %d, want B = %d", i, egress, B)
				}
				// Network ingress of each destination domain = the unique
				// bytes its replicas need.
				for dom := 0; dom < tp.Domains; dom++ {
					var need int64
					for _, sl := range r.DstSlots {
						for _, rk := range sl.Ranks {
							if tp.Domain(rk) == dom {
								need += sl.Box.Elems() * src.DType.Size()
								break
							}
						}
					}
					in := sentBytes(s, func(rk int) bool { return tp.Domain(rk) != dom }, func(rk int) bool { return tp.Domain(rk) == dom })
					if dom >= tp.Domain(64) && in != need {
						t.Errorf("case %d hierarchical: domain %d receives %d bytes over the network, want %d", i, dom, in, need)
					}
				}
			case AGBcast:
				for _, d := range dst.Mesh.Ranks {
					got := sentBytes(s, func(int) bool { return true }, func(rk int) bool { return rk == d })
					if got != B {
						t.Errorf("case %d agbcast: rank %d receives %d bytes of the broadcast, want %d", i, d, got, B)
					}
				}
			case NemoLegacy:
				// The broadcast brings the whole tensor to every destination
				// rank; the all-gather brings every source rank what it
				// lacks, each byte once.
				for _, d := range dst.Mesh.Ranks {
					got := sentBytes(s, func(int) bool { return true }, func(rk int) bool { return rk == d })
					if got != B {
						t.Errorf("case %d nemo-legacy: rank %d receives %d bytes of the broadcast, want %d", i, d, got, B)
					}
				}
				for pos, rk := range src.Mesh.Ranks {
					own := src.LocalBox(pos).Elems() * src.DType.Size()
					got := sentBytes(s, isSrc, func(x int) bool { return x == rk })
					if got != B-own {
						t.Errorf("case %d nemo-legacy: source rank %d receives %d bytes in the all-gather, want %d - %d", i, rk, got, B, own)
					}
				}
			}
		}
	}
}

func TestBuildDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for range 20 {
		src, dst := randomLayouts(rng)
		tp := randomTopology(rng)
		for _, route := range Routes {
			a, err := Build([]ir.Tensor{{Name: "t", Src: src, Dst: dst}}, tp, Options{Route: route, ChunkBytes: 16})
			if err != nil {
				t.Fatal(err)
			}
			b, err := Build([]ir.Tensor{{Name: "t", Src: src, Dst: dst}}, tp, Options{Route: route, ChunkBytes: 16})
			if err != nil {
				t.Fatal(err)
			}
			ja, err := json.Marshal(a)
			if err != nil {
				t.Fatal(err)
			}
			jb, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ja, jb) {
				t.Fatalf("%s: two builds of the same input differ", route)
			}
			back, err := ir.Decode(bytes.NewReader(ja))
			if err != nil {
				t.Fatalf("%s: decode: %v", route, err)
			}
			jc, _ := json.Marshal(back)
			if !bytes.Equal(ja, jc) {
				t.Fatalf("%s: JSON does not round-trip", route)
			}
		}
	}
}

func TestBuildErrors(t *testing.T) {
	good := paperTensors(2)
	for _, tc := range []struct {
		name string
		tp   *topo.Topology
		opt  Options
		err  string
	}{
		{"unknown route", nvl72(2), Options{Route: "teleport"}, `unknown route "teleport"`},
		{"negative chunk", nvl72(2), Options{Route: Flat, ChunkBytes: -1}, "chunk size -1"},
		{"ranks off the topology", nvl72(1), Options{Route: Flat}, "rank 72 runs on GPU 72, but the topology has 72 GPUs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(good, tc.tp, tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Build() = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

func TestChunks(t *testing.T) {
	// The paper's contribution [16, 256, 7168] bf16 in 4 MiB chunks: one
	// expert (3.5 MiB) each.
	g := layout.Box{Start: []int64{16, 256, 0}, Size: []int64{16, 256, 7168}}
	cs := Chunks(g, 2, 4<<20)
	if len(cs) != 16 || cs[3].Start[0] != 19 || cs[3].Size[0] != 1 || cs[3].Size[1] != 256 {
		t.Fatalf("%d chunks, chunk 3 = %v", len(cs), cs[3])
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 500 {
		nd := 1 + rng.IntN(4)
		b := layout.NewBox(nd)
		for d := range nd {
			b.Start[d] = rng.Int64N(3)
			b.Size[d] = 1 + rng.Int64N(6)
		}
		elem := int64(1 << rng.IntN(4))
		chunk := 1 + rng.Int64N(200)
		var sum int64
		for _, c := range Chunks(b, elem, chunk) {
			if !b.Contains(c) || c.Empty() {
				t.Fatalf("chunk %v outside %v", c, b)
			}
			if c.Elems()*elem > max(chunk, elem) && c.Elems() > 1 {
				// A chunk may exceed the size only when one element does.
				t.Fatalf("chunk %v of %d bytes exceeds %d", c, c.Elems()*elem, chunk)
			}
			sum += c.Elems()
		}
		if sum != b.Elems() {
			t.Fatalf("chunks of %v cover %d elements, want %d", b, sum, b.Elems())
		}
	}
}

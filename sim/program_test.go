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

// pingPong is w transfers of n bytes between ranks 0 and 1 (GPUs 0 and 1,
// one domain), each forwarding what the previous one delivered: each in an
// NCCL group of its own.
func pingPong(w int, n int64) *ir.Schedule {
	s := &ir.Schedule{Route: "ping-pong", World: []ir.Rank{{Rank: 0, GPU: 0}, {Rank: 1, GPU: 1}}}
	for k := range w {
		s.Buffers = append(s.Buffers, ir.Buffer{ID: k, Rank: k % 2, Kind: ir.Staging, Bytes: n, Tensor: -1})
	}
	prev := int32(-1)
	for k := range w {
		from, to := int32(k%2), int32(1-k%2)
		var deps []int32
		if prev >= 0 {
			deps = []int32{prev}
		}
		snd := s.AddOp(ir.Op{Kind: ir.Send, Rank: from, Peer: to, Src: ir.Region{Buf: int32(k), Bytes: n}}, deps...)
		rcv := s.AddOp(ir.Op{Kind: ir.Recv, Rank: to, Peer: from, Dst: ir.Region{Buf: int32((k + 1) % w), Bytes: n}})
		s.Ops[snd].Match, s.Ops[rcv].Match = rcv, snd
		prev = rcv
	}
	return s
}

func h200(costs topo.ExecCosts) *topo.Topology {
	t, _ := topo.Preset("hgx-h200")
	t.Executor.PackLong = 1
	t.Executor.Costs[topo.OneProcess] = costs
	return t
}

// With a known per-group cost, a schedule of W groups costs exactly W times
// it more; so does a per-transfer latency.
func TestGroupCostExact(t *testing.T) {
	for _, w := range []int{1, 2, 7, 64} {
		s := pingPong(w, 1<<20)
		base, err := Run(s, h200(topo.ExecCosts{}), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if base.Groups != w {
			t.Fatalf("w=%d: the program has %d groups", w, base.Groups)
		}
		const c = 13 * units.Microsecond
		for _, costs := range []topo.ExecCosts{{GroupLatency: c}, {XferLatency: c}} {
			r, err := Run(s, h200(costs), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := r.Makespan-base.Makespan, units.Time(w)*c; got != want {
				t.Errorf("w=%d %+v: costs %v more, want exactly %v", w, costs, got, want)
			}
		}
	}
}

// Host-bound: when each group's bytes take no time, a process that issues
// every group for both GPUs finishes after W x 2 x the host's group cost.
func TestHostGroupCost(t *testing.T) {
	const h = 9 * units.Microsecond
	for _, w := range []int{1, 5, 40} {
		r, err := Run(pingPong(w, 1), h200(topo.ExecCosts{HostGroup: h}), Options{})
		if err != nil {
			t.Fatal(err)
		}
		want := units.Time(w) * 2 * h
		if d := r.Makespan - want; d < 0 || d > units.Nanosecond {
			t.Errorf("w=%d: makespan %v, want %v plus the bytes' picoseconds", w, r.Makespan, want)
		}
		// One process per GPU: each pays for its own GPU only.
		tp := h200(topo.ExecCosts{})
		tp.Executor.Costs[topo.PerGPU] = topo.ExecCosts{HostGroup: h}
		r, err = Run(pingPong(w, 1), tp, Options{Exec: Exec{Launch: topo.PerGPU}})
		if err != nil {
			t.Fatal(err)
		}
		if d := r.Makespan - units.Time(w)*h; d < 0 || d > units.Nanosecond {
			t.Errorf("w=%d per GPU: makespan %v, want %v", w, r.Makespan, units.Time(w)*h)
		}
	}
}

// Zero executor costs leave the network model; and --ideal stays the SOL
// model whatever the executor costs.
func TestExecutorOnlyWhenMeasured(t *testing.T) {
	s, err := plan.Build(paper(2), nvl72(2), plan.Options{Route: plan.Hierarchical})
	if err != nil {
		t.Fatal(err)
	}
	withCosts := nvl72(2)
	withCosts.Executor = h200(topo.ExecCosts{HostGroup: 10 * units.Microsecond, XferLatency: 5 * units.Microsecond}).Executor
	for _, ideal := range []bool{false, true} {
		a, err := Run(s, nvl72(2), Options{Ideal: ideal})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(s, withCosts, Options{Ideal: ideal})
		if err != nil {
			t.Fatal(err)
		}
		if same := a.Makespan == b.Makespan && a.Events == b.Events; same != ideal {
			t.Errorf("ideal=%v: %v without executor costs, %v with: the same? %v", ideal, a.Makespan, b.Makespan, same)
		}
		if b.Modeled == nil != ideal {
			t.Errorf("ideal=%v: modeled the executor: %v", ideal, b.Modeled != nil)
		}
	}
}

// programCase is a random tensor from 4 ranks to 2 x 2 others (a random
// dim split on each side) on three domains of 4 H200s, every executor cost
// set, the same in both launch modes.
func programCase(rng *rand.Rand) (src, dst layout.Layout, tp *topo.Topology) {
	shape := []int64{int64(4 + rng.IntN(32)), int64(16 + rng.IntN(128))}
	src = layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{4}, Ranks: layout.RankRange(0, 4)}, Placements: []layout.Placement{layout.S(rng.IntN(2))}}
	dst = layout.Layout{Shape: shape, DType: layout.BF16, Mesh: layout.Mesh{Shape: []int{2, 2}, Ranks: layout.RankRange(2+rng.IntN(4), 4)}, Placements: []layout.Placement{layout.R, layout.S(rng.IntN(2))}}
	tp = h200(topo.ExecCosts{HostGroup: 9 * units.Microsecond, HostXfer: units.Microsecond, HostLaunch: 3 * units.Microsecond, XferLatency: 5 * units.Microsecond, GroupLatency: 4 * units.Microsecond, PairRate: units.GBps(300)})
	tp.Executor.Costs[topo.PerGPU] = tp.Executor.Costs[topo.OneProcess]
	tp.GPUsPerDomain, tp.Domains = 4, 3
	return src, dst, tp
}

// The executor model of random schedules, every route and mode, runs to
// the end and moves exactly the schedule's bytes on each path class.
func TestProgramModelConserves(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for i := range 40 {
		src, dst, tp := programCase(rng)
		tp.Executor.PackShort, tp.Executor.PackStage = 0.7, 0.6
		for _, route := range plan.Routes {
			s, err := plan.Build([]ir.Tensor{{Name: "t", Src: src, Dst: dst}}, tp, plan.Options{Route: route, ChunkBytes: int64(64 + rng.IntN(512))})
			if err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			for _, o := range []Options{
				{}, {Exec: Exec{Launch: topo.PerGPU}}, {Exec: Exec{Transport: "copy"}},
				{Exec: Exec{WaveBytes: 256}}, {Loopback: true}, {Loopback: true, Exec: Exec{Transport: "nccl"}},
			} {
				o.Timeline = true
				r, err := Run(s, tp, o)
				if err != nil {
					t.Fatalf("case %d %s %+v: %v", i, route, o, err)
				}
				if o.Loopback {
					continue
				}
				net, nvl := egressBytes(r.Resources)
				if net != st.Bytes[ir.Net] || nvl != st.Bytes[ir.NVLink] {
					t.Fatalf("case %d %s %+v: moved network %d, NVLink %d; the schedule has %d, %d", i, route, o, net, nvl, st.Bytes[ir.Net], st.Bytes[ir.NVLink])
				}
				m := r.Modeled
				for x := range int32(len(m.Ops)) {
					for _, d := range m.Deps(x) {
						if r.Ops[x].Start < r.Ops[d].End {
							t.Fatalf("case %d %s: modeled op %d starts at %v before its dependency %d ends at %v", i, route, x, r.Ops[x].Start, d, r.Ops[d].End)
						}
					}
				}
			}
		}
	}
}

// Each NCCL group's modeled end (Options.GroupEnds): one per group, in
// order, the last at the makespan; a per-group cost c moves group k's end
// by exactly (k+1) x c; and asking for them changes nothing else.
func TestGroupEnds(t *testing.T) {
	for _, w := range []int{1, 3, 17} {
		s := pingPong(w, 1<<20)
		const c = 11 * units.Microsecond
		var ends [2][]units.Time
		for i, costs := range []topo.ExecCosts{{XferLatency: c}, {XferLatency: c, GroupLatency: c}} {
			plain, err := Run(s, h200(costs), Options{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := Run(s, h200(costs), Options{GroupEnds: true})
			if err != nil {
				t.Fatal(err)
			}
			if plain.GroupEnds != nil {
				t.Errorf("w=%d: group ends %v without asking", w, plain.GroupEnds)
			}
			if r.Makespan != plain.Makespan || r.Events != plain.Events || r.Ops != nil || r.FlowOf != nil {
				t.Errorf("w=%d: asking for group ends changed the result: makespan %v against %v, events %d against %d, ops %d, flows %d",
					w, r.Makespan, plain.Makespan, r.Events, plain.Events, len(r.Ops), len(r.FlowOf))
			}
			if len(r.GroupEnds) != w {
				t.Fatalf("w=%d: %d group ends, want %d", w, len(r.GroupEnds), w)
			}
			for k := 1; k < w; k++ {
				if r.GroupEnds[k] <= r.GroupEnds[k-1] {
					t.Errorf("w=%d: group %d ends at %v, not after group %d (%v)", w, k, r.GroupEnds[k], k-1, r.GroupEnds[k-1])
				}
			}
			if last := r.GroupEnds[w-1]; last != r.Makespan {
				t.Errorf("w=%d: the last group ends at %v, the makespan is %v", w, last, r.Makespan)
			}
			ends[i] = r.GroupEnds
		}
		for k := range w {
			if got, want := ends[1][k]-ends[0][k], units.Time(k+1)*c; got != want {
				t.Errorf("w=%d: a group cost of %v moved group %d's end by %v, want %v", w, c, k, got, want)
			}
		}
	}
}

// Each stream's modeled end (Options.StreamEnds): one per stream of the
// program, the latest at the makespan, every one within it; and asking
// for them changes nothing else. In a ping-pong over NCCL, GPU 0's stream
// ends with the last group there.
func TestStreamEnds(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for i := range 12 {
		src, dst, tp := programCase(rng)
		for _, route := range plan.Routes {
			s, err := plan.Build([]ir.Tensor{{Name: "t", Src: src, Dst: dst}}, tp, plan.Options{Route: route, ChunkBytes: int64(64 + rng.IntN(512))})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range []Options{
				{}, {Exec: Exec{Launch: topo.PerGPU}}, {Exec: Exec{Transport: "copy"}}, {Exec: Exec{Transport: "copy", Launch: topo.PerGPU}},
				{Loopback: true}, {Loopback: true, Exec: Exec{Transport: "nccl"}},
			} {
				plain, err := Run(s, tp, o)
				if err != nil {
					t.Fatal(err)
				}
				o.StreamEnds = true
				r, err := Run(s, tp, o)
				if err != nil {
					t.Fatal(err)
				}
				if plain.StreamEnds != nil || r.Makespan != plain.Makespan || r.Events != plain.Events || r.Ops != nil {
					t.Fatalf("case %d %s %+v: asking for stream ends changed the result (makespan %v against %v)", i, route, o, r.Makespan, plain.Makespan)
				}
				seen := map[[2]int]bool{}
				var last units.Time
				for _, se := range r.StreamEnds {
					k := [2]int{se.GPU, se.Lane}
					if seen[k] {
						t.Fatalf("case %d %s %+v: stream %v twice", i, route, o, k)
					}
					seen[k] = true
					if se.End <= 0 || se.End > r.Makespan {
						t.Errorf("case %d %s %+v: stream %v ends at %v, the makespan is %v", i, route, o, k, se.End, r.Makespan)
					}
					last = max(last, se.End)
				}
				if last != r.Makespan {
					t.Errorf("case %d %s %+v: the last stream ends at %v, the makespan is %v", i, route, o, last, r.Makespan)
				}
			}
		}
	}
	for _, w := range []int{1, 4} {
		r, err := Run(pingPong(w, 1<<20), h200(topo.ExecCosts{XferLatency: units.Microsecond, GroupLatency: 3 * units.Microsecond}), Options{GroupEnds: true, StreamEnds: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.StreamEnds) != 2 || r.StreamEnds[0].GPU != 0 || r.StreamEnds[0].Lane >= 0 || r.StreamEnds[0].End != r.GroupEnds[w-1] {
			t.Errorf("w=%d: stream ends %+v, the last group ends at %v on GPU 0", w, r.StreamEnds, r.GroupEnds[w-1])
		}
	}
}

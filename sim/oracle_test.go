package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/plan/ir"
	"github.com/m2n-project/m2n/scenarios"
)

// The solver of maxmin.go must give exactly the results of the old one
// (maxmin_oracle_test.go): every op's ready, start and end time to the
// picosecond, every resource's bytes and busy time, the makespan and the
// event count.

// oracleSolvers makes the old solver and the new one, both switching to
// local re-solves from localMin active flows (0: the default).
func oracleSolvers(localMin int) (old, cur func([]float64) solver) {
	old = func(c []float64) solver {
		f := newOracleFluid(c)
		if localMin > 0 {
			f.localMin = localMin
		}
		return f
	}
	cur = func(c []float64) solver {
		f := newFluid(c)
		if localMin > 0 {
			f.localMin = localMin
		}
		return f
	}
	return old, cur
}

// sameAsOracle simulates s with both solvers and reports the first
// difference.
func sameAsOracle(s *ir.Schedule, tp *topo.Topology, opt Options, localMin int) error {
	opt.Timeline = true
	old, cur := oracleSolvers(localMin)
	want, errW := run(s, tp, opt, old)
	got, errG := run(s, tp, opt, cur)
	if (errW == nil) != (errG == nil) {
		return fmt.Errorf("error %v, oracle's %v", errG, errW)
	}
	if errW != nil {
		return nil
	}
	if got.Makespan != want.Makespan || got.Events != want.Events || got.Flows != want.Flows {
		return fmt.Errorf("makespan %d ps, %d events, %d flows; oracle %d ps, %d events, %d flows",
			got.Makespan, got.Events, got.Flows, want.Makespan, want.Events, want.Flows)
	}
	for i := range want.Ops {
		if got.Ops[i] != want.Ops[i] {
			return fmt.Errorf("op %d ran %+v, oracle %+v", i, got.Ops[i], want.Ops[i])
		}
	}
	for i := range want.Resources {
		g, w := got.Resources[i], want.Resources[i]
		if g.Bytes != w.Bytes || g.Busy != w.Busy {
			return fmt.Errorf("resource %s: %d bytes, busy %d ps; oracle %d bytes, busy %d ps", w.Name, g.Bytes, g.Busy, w.Bytes, w.Busy)
		}
	}
	// Without the timeline and the flows, nothing else changes.
	opt.Timeline, opt.Flows = false, false
	bare, err := run(s, tp, opt, cur)
	if err != nil {
		return fmt.Errorf("without the timeline: %v", err)
	}
	if bare.Makespan != want.Makespan || bare.Events != want.Events || bare.Flows != want.Flows || bare.Ops != nil || bare.FlowRes != nil || bare.FlowOf != nil {
		return fmt.Errorf("without the timeline: makespan %d ps, %d events, %d flows, %d spans, %d flow paths; oracle %d ps, %d events, %d flows",
			bare.Makespan, bare.Events, bare.Flows, len(bare.Ops), len(bare.FlowRes), want.Makespan, want.Events, want.Flows)
	}
	for i := range want.Resources {
		if bare.Resources[i] != got.Resources[i] {
			return fmt.Errorf("without the timeline: resource %s: %+v, with it %+v", got.Resources[i].Name, bare.Resources[i], got.Resources[i])
		}
	}
	return nil
}

// randomDAG is a random schedule on a random topology: transfers within and
// across domains and local copies, each depending on a few earlier ops,
// with sizes from a few bytes to tens of MiB, so that flows come and go in
// bursts and share ports in tangled components.
func randomDAG(rng *rand.Rand) (*ir.Schedule, *topo.Topology, Options) {
	tp, _ := topo.Preset("gb200-nvl72")
	tp.Domains = 1 + rng.IntN(3)
	tp.GPUsPerDomain = 1 + rng.IntN(8)
	tp.NICsPerGPU = 1 + rng.IntN(2)
	if rng.IntN(3) == 0 {
		tp.Oversubscription = 1 + 3*rng.Float64()
	}
	var opt Options
	switch rng.IntN(6) {
	case 0:
		opt.Ideal = true
	case 1:
		opt.FlowCap = [3]units.Bandwidth{units.Bandwidth(1e9 * (1 + rng.IntN(500))), units.Bandwidth(1e9 * (1 + rng.IntN(100))), units.Bandwidth(1e9 * (1 + rng.IntN(50)))}
	case 2:
		opt.Loopback = true
	}
	s := &ir.Schedule{Route: "random", ChunkBytes: 1 << 20}
	nranks := 1 + rng.IntN(tp.Domains*tp.GPUsPerDomain*2)
	for r := range nranks {
		g := rng.IntN(tp.GPUs())
		s.World = append(s.World, ir.Rank{Rank: r, GPU: g, Domain: g / tp.GPUsPerDomain})
	}
	sizes := []int64{1, 1000, 1 << 20, 4 << 20, 32 << 20}
	nops := 1 + rng.IntN(1000)
	for len(s.Ops) < nops {
		var deps []int32
		for range rng.IntN(3) {
			if n := len(s.Ops); n > 0 {
				d := int32(n - 1 - rng.IntN(min(n, 40)))
				if s.Ops[d].Kind != ir.Recv || rng.IntN(2) == 0 {
					deps = append(deps, d)
				}
			}
		}
		bytes := sizes[rng.IntN(len(sizes))] + int64(rng.IntN(4096))
		a := int32(rng.IntN(nranks))
		if rng.IntN(4) == 0 {
			s.AddOp(ir.Op{Kind: ir.Copy, Rank: a, Peer: -1, Match: -1, Src: ir.Region{Bytes: bytes}, Dst: ir.Region{Bytes: bytes}}, deps...)
			continue
		}
		b := int32(rng.IntN(nranks))
		id := int32(len(s.Ops))
		s.AddOp(ir.Op{Kind: ir.Send, Rank: a, Peer: b, Match: id + 1, Src: ir.Region{Bytes: bytes}}, deps...)
		var rdeps []int32
		if rng.IntN(3) == 0 && id > 0 {
			rdeps = []int32{int32(rng.IntN(int(id)))}
		}
		s.AddOp(ir.Op{Kind: ir.Recv, Rank: b, Peer: a, Match: id, Dst: ir.Region{Bytes: bytes}}, rdeps...)
	}
	return s, tp, opt
}

// TestSolverMatchesOracleRandom compares the solvers on random DAGs, with
// local re-solves at their default threshold and from the first flow.
func TestSolverMatchesOracleRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	cases := 400
	if testing.Short() {
		cases = 80
	}
	flows := 0
	for i := range cases {
		s, tp, opt := randomDAG(rng)
		for _, localMin := range []int{0, 1, 8} {
			if err := sameAsOracle(s, tp, opt, localMin); err != nil {
				t.Fatalf("case %d (%d ops, local re-solves from %d flows, %+v): %v", i, len(s.Ops), localMin, opt, err)
			}
		}
		flows += len(s.Ops)
	}
	if flows < cases*50 {
		t.Fatalf("only %d ops in %d cases: the generator makes trivial DAGs", flows, cases)
	}
}

// FuzzSolverMatchesOracle compares the solvers on random DAGs drawn from
// the fuzzer's seeds.
func FuzzSolverMatchesOracle(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(0))
	f.Add(uint64(3), uint64(4), uint8(1))
	f.Add(uint64(5), uint64(6), uint8(16))
	f.Fuzz(func(t *testing.T, a, b uint64, localMin uint8) {
		s, tp, opt := randomDAG(rand.New(rand.NewPCG(a, b)))
		if err := sameAsOracle(s, tp, opt, int(localMin)); err != nil {
			t.Fatalf("%d ops, local re-solves from %d flows, %+v: %v", len(s.Ops), localMin, opt, err)
		}
	})
}

// TestSolverMatchesOracleScenarios compares the solvers on every shipped
// scenario, every point and every route it could run (flat included),
// and again in ideal conditions. Whole-model scenarios are scaled down
// (dim 0 of every tensor), a whole-model sweep is tried at its first two
// points, and schedules of more than maxOps ops are left out, so that the
// test stays fast.
func TestSolverMatchesOracleScenarios(t *testing.T) {
	const maxOps = 150_000
	var checked atomic.Int64
	t.Cleanup(func() { t.Logf("%d simulations compared", checked.Load()) })
	for _, name := range scenarios.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, _ := scenarios.Lookup(name)
			sc, err := scenario.ParseWith(name+".toml", data, func(m string) (string, []byte, error) {
				if cfg, ok := scenarios.Model(m); ok {
					return m + ".json", cfg, nil
				}
				return "", nil, errors.New("no such model")
			})
			if err != nil {
				t.Fatal(err)
			}
			ps, err := sc.Points()
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range ps {
				if len(p.Tensors) > 50 {
					if i >= 2 {
						break // a whole-model sweep: its first two points
					}
					if err := p.Scale(1.0 / 64); err != nil {
						t.Fatal(err)
					}
				}
				ts := make([]ir.Tensor, len(p.Tensors))
				for i, x := range p.Tensors {
					ts[i] = ir.Tensor{Name: x.Name, Src: x.Src, Dst: x.Dst}
				}
				chunk := int64(plan.DefaultChunkBytes)
				if p.Chunk != nil {
					chunk = int64(*p.Chunk)
				}
				for _, route := range plan.Routes {
					s, err := plan.Build(ts, p.Topology, plan.Options{Route: route, ChunkBytes: chunk, MaxOps: maxOps})
					if err != nil {
						continue // a route this point cannot take, or too long a test
					}
					for _, ideal := range []bool{false, true} {
						if ideal && len(s.Ops) > maxOps/8 {
							break
						}
						if err := sameAsOracle(s, p.Topology, Options{Ideal: ideal}, 0); err != nil {
							t.Errorf("point %s, route %s, ideal %v: %v", p.Label(), route, ideal, err)
						}
						checked.Add(1)
					}
				}
			}
		})
	}
}

// The solvers alone, flows coming and going at random, give the same
// rates bit for bit after every solve, with integer coefficients (the
// engine's) and with fractional ones (which turn off the kept sums), rate
// caps, and local re-solves from the first flow or at the default.
func TestFluidMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for i := range 300 {
		nr := 1 + rng.IntN(30)
		capacity := make([]float64, nr)
		for r := range capacity {
			capacity[r] = float64(1+rng.IntN(20)) * (1 + rng.Float64())
		}
		frac := i%2 == 0
		localMin := []int{0, 1, 4}[i%3]
		mkOld, mkCur := oracleSolvers(localMin)
		old, cur := mkOld(capacity), mkCur(capacity)
		type pair struct{ old, cur int32 }
		var live []pair
		rate := map[int32]float64{} // cur id -> rate, from the changes
		for step := range 120 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(live))
				old.remove(live[k].old)
				cur.remove(live[k].cur)
				delete(rate, live[k].cur)
				live = append(live[:k], live[k+1:]...)
			} else {
				n := 1 + rng.IntN(min(maxPath, nr))
				var res []int32
				var coef []float64
				for _, r := range rng.Perm(nr)[:n] {
					res = append(res, int32(r))
					c := float64(1 + rng.IntN(2))
					if frac && rng.IntN(2) == 0 {
						c = 0.5 + rng.Float64()
					}
					coef = append(coef, c)
				}
				limit := 0.0
				if rng.IntN(6) == 0 {
					limit = 0.5 + 4*rng.Float64()
				}
				p := pair{old.add(res, coef, limit), cur.add(res, coef, limit)}
				live = append(live, p)
				rate[p.cur] = 0
			}
			co, cc := old.solve(), cur.solve()
			if len(co) != len(cc) {
				t.Fatalf("case %d step %d: %d rates changed, oracle %d", i, step, len(cc), len(co))
			}
			for k := range co {
				if co[k] != cc[k] {
					t.Fatalf("case %d step %d: change %d is %+v, oracle %+v", i, step, k, cc[k], co[k])
				}
				rate[cc[k].id] = cc[k].new
			}
			for _, p := range live {
				if o := old.(*oracleFluid).flows[p.old].rate; rate[p.cur] != o {
					t.Fatalf("case %d step %d: flow %d at %v, oracle %v", i, step, p.cur, rate[p.cur], o)
				}
			}
		}
	}
}

package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/m2n-project/m2n/internal/scentest"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/topo"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/scenarios"
)

// The solver is held to two oracles:
//   - fullFill, progressive filling of every flow from scratch at every
//     solve in the same fixed-point arithmetic: equal bit for bit, every
//     op's ready, start and end time, every resource's bytes and busy time,
//     the makespan and the event count;
//   - the legacy engine and solver (legacy_test.go), floating point: every
//     op's times within 1e-6 of the legacy ones, the makespan within 1e-7.

// fullFill is the oracle solver: every solve fills every active flow from
// scratch, one step per level, by the definition in fluid's comment.
type fullFill struct {
	capacity []u128
	flows    []oflow // by id; dead ones have n = 0
	free     []int32
	wsum     []int64
	level    []int64 // resources, then cap groups
	capGroup map[int64]int32
	levelCh  []levelChange
	moves    []move
}

type oflow struct {
	res   []int32
	coef  []int64
	capG  int32
	rate  int64
	group int32
	live  bool
}

func newFullFill(capacity []u128) solver {
	o := &fullFill{capacity: capacity, wsum: make([]int64, len(capacity)), level: make([]int64, len(capacity)), capGroup: map[int64]int32{}}
	for r := range o.level {
		o.level[r] = noLevel
	}
	return o
}

func (o *fullFill) add(res []int32, coef []int64, limit int64) int32 {
	fl := oflow{res: slices.Clone(res), coef: slices.Clone(coef), capG: -1, group: -1, live: true}
	if limit > 0 {
		g, ok := o.capGroup[limit]
		if !ok {
			g = int32(len(o.level))
			o.capGroup[limit] = g
			o.level = append(o.level, limit)
		}
		fl.capG = g
	}
	for k, r := range res {
		o.wsum[r] += coef[k]
	}
	if k := len(o.free); k > 0 {
		id := o.free[k-1]
		o.free = o.free[:k-1]
		o.flows[id] = fl
		return id
	}
	o.flows = append(o.flows, fl)
	return int32(len(o.flows) - 1)
}

func (o *fullFill) remove(id int32) {
	fl := &o.flows[id]
	for k, r := range fl.res {
		o.wsum[r] -= fl.coef[k]
	}
	*fl = oflow{}
	o.free = append(o.free, id)
}

func (o *fullFill) changes() ([]levelChange, []move) { return o.levelCh, o.moves }
func (o *fullFill) groups() int                      { return len(o.level) }
func (o *fullFill) levelOf(g int32) int64            { return o.level[g] }
func (o *fullFill) weight(r int32) int64             { return o.wsum[r] }

func (o *fullFill) solve() {
	o.levelCh, o.moves = o.levelCh[:0], o.moves[:0]
	nres := len(o.capacity)
	load := make([]u128, nres)
	w := slices.Clone(o.wsum)
	n := make([]int, nres)
	var unfrozen []int32
	for id := range o.flows {
		if fl := &o.flows[id]; fl.live {
			unfrozen = append(unfrozen, int32(id))
			for _, r := range fl.res {
				n[r]++
			}
		}
	}
	newLevel := make([]int64, nres)
	for r := range newLevel {
		newLevel[r] = noLevel
	}
	cand := make([]int64, nres)
	for len(unfrozen) > 0 {
		level := int64(noLevel)
		for r := range nres {
			cand[r] = noLevel
			if n[r] > 0 {
				if load[r].less(o.capacity[r]) {
					cand[r] = o.capacity[r].sub(load[r]).floorDiv(uint64(w[r]))
				} else {
					cand[r] = 0
				}
				level = min(level, cand[r])
			}
		}
		for _, id := range unfrozen {
			if g := o.flows[id].capG; g >= 0 {
				level = min(level, o.level[g])
			}
		}
		if level == noLevel {
			panic("oracle: no level")
		}
		for r := range nres {
			if n[r] > 0 && cand[r] == level {
				newLevel[r] = level
			}
		}
		keep := unfrozen[:0]
		var frozen []int32
		for _, id := range unfrozen {
			fl := &o.flows[id]
			hit := fl.capG >= 0 && o.level[fl.capG] == level
			for _, r := range fl.res {
				hit = hit || n[r] > 0 && cand[r] == level
			}
			if hit {
				frozen = append(frozen, id)
			} else {
				keep = append(keep, id)
			}
		}
		for _, id := range frozen {
			fl := &o.flows[id]
			fl.rate = level
			for k, r := range fl.res {
				load[r] = load[r].add(mul128(uint64(fl.coef[k]), uint64(level)))
				w[r] -= fl.coef[k]
				n[r]--
			}
		}
		unfrozen = keep
	}
	for r := range nres {
		if newLevel[r] != o.level[r] {
			o.levelCh = append(o.levelCh, levelChange{int32(r), o.level[r], newLevel[r]})
			o.level[r] = newLevel[r]
		}
	}
	for id := range o.flows {
		fl := &o.flows[id]
		if !fl.live {
			continue
		}
		g, best := int32(-1), int64(noLevel)
		for _, r := range fl.res {
			if o.level[r] < best || o.level[r] == best && (g < 0 || r < g) {
				g, best = r, o.level[r]
			}
		}
		if fl.capG >= 0 && o.level[fl.capG] <= best {
			g = fl.capG
		}
		if o.level[g] != fl.rate {
			panic(fmt.Sprintf("oracle: flow %d at %d, its group %d at %d", id, fl.rate, g, o.level[g]))
		}
		if g != fl.group {
			o.moves = append(o.moves, move{int32(id), fl.group, g})
			fl.group = g
		}
	}
}

// fluidWith makes fluids with a given fullFrac (< 0: the default).
func fluidWith(fullFrac float64) func([]u128) solver {
	return func(c []u128) solver {
		f := newFluid(c)
		if fullFrac >= 0 {
			f.fullFrac = fullFrac
		}
		return f
	}
}

// checkedFluid is the solver checking the max-min definition after every
// solve (checkMaxMin); err keeps the first failure.
type checkedFluid struct {
	*fluid
	err *error
}

func (c checkedFluid) solve() {
	c.fluid.solve()
	if *c.err == nil {
		*c.err = checkMaxMin(c.fluid)
	}
}

// sameResult reports the first difference between two results.
func sameResult(got, want *Result) error {
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
	return nil
}

// sameAsFullFill simulates s with the solver (local re-solves as usual,
// always, and never giving way to full ones) and with the full-fill
// oracle, and reports the first difference.
func sameAsFullFill(s *ir.Schedule, tp *topo.Topology, opt Options) error {
	opt.Timeline = true
	want, errW := run(s, tp, opt, engineWith(newFullFill))
	for _, frac := range []float64{-1, 0, 2} {
		got, errG := run(s, tp, opt, engineWith(fluidWith(frac)))
		if (errW == nil) != (errG == nil) {
			return fmt.Errorf("full fraction %g: error %v, oracle's %v", frac, errG, errW)
		}
		if errW != nil {
			return nil
		}
		if err := sameResult(got, want); err != nil {
			return fmt.Errorf("full fraction %g: %v", frac, err)
		}
	}
	// At every event, every flow has a bottleneck (the definition).
	var defErr error
	if _, err := run(s, tp, opt, engineWith(func(c []u128) solver { return checkedFluid{newFluid(c), &defErr} })); err == nil && defErr != nil {
		return fmt.Errorf("max-min definition: %v", defErr)
	}
	// Without the timeline and the flows, nothing else changes.
	opt.Timeline, opt.Flows = false, false
	bare, err := run(s, tp, opt, nil)
	if err != nil {
		return fmt.Errorf("without the timeline: %v", err)
	}
	if bare.Makespan != want.Makespan || bare.Events != want.Events || bare.Flows != want.Flows || bare.Ops != nil || bare.FlowRes != nil || bare.FlowOf != nil {
		return fmt.Errorf("without the timeline: makespan %d ps, %d events, %d flows, %d spans, %d flow paths; oracle %d ps, %d events, %d flows",
			bare.Makespan, bare.Events, bare.Flows, len(bare.Ops), len(bare.FlowRes), want.Makespan, want.Events, want.Flows)
	}
	for i := range want.Resources {
		if b, w := bare.Resources[i], want.Resources[i]; b.Bytes != w.Bytes || b.Busy != w.Busy {
			return fmt.Errorf("without the timeline: resource %s: %+v, with it %+v", w.Name, b, w)
		}
	}
	return nil
}

// Tolerances against the legacy solver: an op's times relative to the
// legacy one's, and the makespan's.
const (
	opTolerance       = 1e-6
	makespanTolerance = 1e-7
	// clockSlack is the clock's resolution: completions round up to the
	// next picosecond, and the legacy solver's floating-point remainder
	// rounds across that boundary where the exact one does not.
	clockSlack = units.Time(2)
)

// worst is the largest relative differences of a result from a legacy
// one, over every op's times and the makespan.
type worst struct{ op, makespan float64 }

func (w worst) within(v worst) bool { return w.op <= v.op && w.makespan <= v.makespan }

var tolerance = worst{opTolerance, makespanTolerance}

// nearLegacy simulates s with the exact engine and the legacy one and
// returns the largest relative differences and whether the schedule is
// sensitive, or an error. The result must be within the tolerances of
// the legacy one, or of the legacy one with completions on a picosecond
// boundary rounded up (the exact solver's floored rates end such flows a
// picosecond later); or, for a schedule whose own times move past the
// tolerances under that rounding alone (sensitive), no farther from the
// legacy result than that.
func nearLegacy(s *ir.Schedule, tp *topo.Topology, opt Options) (worst, bool, error) {
	opt.Timeline = true
	got, errG := run(s, tp, opt, nil)
	want, errW := run(s, tp, opt, legacyEngineRun(false))
	if (errW == nil) != (errG == nil) {
		return worst{}, false, fmt.Errorf("error %v, legacy %v", errG, errW)
	}
	if errW != nil {
		return worst{}, false, nil
	}
	w, err := compare(got, want)
	if err != nil {
		return w, false, err
	}
	if w.within(tolerance) {
		return w, false, nil
	}
	perturbed, err := run(s, tp, opt, legacyEngineRun(true))
	if err != nil {
		return w, false, fmt.Errorf("legacy, perturbed: %v", err)
	}
	if wp, err := compare(got, perturbed); err == nil && wp.within(tolerance) {
		return wp, true, nil
	}
	sens, err := compare(perturbed, want)
	if err != nil {
		return w, false, fmt.Errorf("legacy, perturbed: %v", err)
	}
	if w.within(worst{max(tolerance.op, sens.op), max(tolerance.makespan, sens.makespan)}) {
		return w, true, nil
	}
	return w, true, fmt.Errorf("largest differences from the legacy solver: op %.3g, makespan %.3g; past the tolerances and the legacy solver's own sensitivity (op %.3g, makespan %.3g)",
		w.op, w.makespan, sens.op, sens.makespan)
}

// compare returns the largest relative differences of a result from
// another, or an error where they differ in events or flows.
func compare(got, want *Result) (worst, error) {
	rel := func(g, w units.Time) float64 {
		if d := g - w; d >= -clockSlack && d <= clockSlack {
			return 0
		}
		return math.Abs(float64(g-w)) / math.Max(1, float64(w))
	}
	var wst worst
	wst.makespan = rel(got.Makespan, want.Makespan)
	if got.Events != want.Events || got.Flows != want.Flows {
		return wst, fmt.Errorf("%d events, %d flows; legacy %d, %d", got.Events, got.Flows, want.Events, want.Flows)
	}
	for i := range want.Ops {
		g, w := got.Ops[i], want.Ops[i]
		for _, p := range [][2]units.Time{{g.Ready, w.Ready}, {g.Start, w.Start}, {g.End, w.End}} {
			wst.op = max(wst.op, rel(p[0], p[1]))
		}
	}
	return wst, nil
}

// randomMachine is a random topology of 1 to 3 domains of minGPUs to
// minGPUs+7 GPUs, and random options: ideal, flow caps, loopback or none.
func randomMachine(rng *rand.Rand, minGPUs int) (*topo.Topology, Options) {
	tp, _ := topo.Preset("gb200-nvl72")
	tp.Domains = 1 + rng.IntN(3)
	tp.GPUsPerDomain = minGPUs + rng.IntN(8)
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
	return tp, opt
}

// randomDAG is a random schedule on a random topology: transfers within and
// across domains and local copies, each depending on a few earlier ops,
// with sizes from a few bytes to tens of MiB, so that flows come and go in
// bursts and share ports in tangled components.
func randomDAG(rng *rand.Rand) (*ir.Schedule, *topo.Topology, Options) {
	tp, opt := randomMachine(rng, 1)
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

// On random DAGs the solver equals the full fill bit for bit and the
// legacy solver within the tolerances.
func TestSolverMatchesOraclesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	cases := 300
	if testing.Short() {
		cases = 60
	}
	ops, nsens := 0, 0
	var wst worst
	for i := range cases {
		s, tp, opt := randomDAG(rng)
		if err := sameAsFullFill(s, tp, opt); err != nil {
			t.Fatalf("case %d (%d ops, %+v): %v", i, len(s.Ops), opt, err)
		}
		w, sensitive, err := nearLegacy(s, tp, opt)
		if err != nil {
			t.Fatalf("case %d (%d ops, %+v): against the legacy solver: %v", i, len(s.Ops), opt, err)
		}
		if sensitive {
			nsens++
		} else {
			wst.op, wst.makespan = max(wst.op, w.op), max(wst.makespan, w.makespan)
		}
		ops += len(s.Ops)
	}
	if ops < cases*50 {
		t.Fatalf("only %d ops in %d cases: the generator makes trivial DAGs", ops, cases)
	}
	t.Logf("largest relative differences from the legacy solver: op %.3g, makespan %.3g; %d of %d cases sensitive to the clock's rounding", wst.op, wst.makespan, nsens, cases)
}

// FuzzSolverMatchesOracle compares the solver with the full fill on random
// DAGs drawn from the fuzzer's seeds.
func FuzzSolverMatchesOracle(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(3), uint64(4))
	f.Add(uint64(5), uint64(6))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		s, tp, opt := randomDAG(rand.New(rand.NewPCG(a, b)))
		if err := sameAsFullFill(s, tp, opt); err != nil {
			t.Fatalf("%d ops, %+v: %v", len(s.Ops), opt, err)
		}
	})
}

// TestSolverMatchesOraclesScenarios compares the solver with both oracles
// on every shipped scenario, every point and every route it could run
// (flat included), and again in ideal conditions. Whole-model scenarios
// are scaled down (dim 0 of every tensor) and a whole-model sweep is
// tried at its first two points; schedules of more than maxOps ops are
// left out, and the full fill (which refills every flow at every event)
// sees those of up to maxFullOps, so that the test stays fast.
func TestSolverMatchesOraclesScenarios(t *testing.T) {
	const maxOps, maxFullOps = 150_000, 20_000
	var checked, full, sens atomic.Int64
	var worstOp, worstSpan atomic.Uint64
	t.Cleanup(func() {
		t.Logf("%d simulations against the legacy solver (largest differences: op %.3g, makespan %.3g; %d more sensitive to the clock's rounding), %d against the full fill",
			checked.Load()-sens.Load(), math.Float64frombits(worstOp.Load()), math.Float64frombits(worstSpan.Load()), sens.Load(), full.Load())
	})
	bump := func(a *atomic.Uint64, v float64) {
		for {
			old := a.Load()
			if v <= math.Float64frombits(old) || a.CompareAndSwap(old, math.Float64bits(v)) {
				return
			}
		}
	}
	for _, name := range scenarios.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ps := scentest.Points(t, name)
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
						opt := Options{Ideal: ideal}
						w, sensitive, err := nearLegacy(s, p.Topology, opt)
						if err != nil {
							t.Errorf("point %s, route %s, ideal %v: against the legacy solver: %v", p.Label(), route, ideal, err)
						}
						if sensitive {
							t.Logf("point %s, route %s, ideal %v: sensitive to the clock's rounding; differences op %.3g, makespan %.3g", p.Label(), route, ideal, w.op, w.makespan)
							sens.Add(1)
						} else {
							bump(&worstOp, w.op)
							bump(&worstSpan, w.makespan)
						}
						checked.Add(1)
						if len(s.Ops) <= maxFullOps {
							if err := sameAsFullFill(s, p.Topology, opt); err != nil {
								t.Errorf("point %s, route %s, ideal %v: %v", p.Label(), route, ideal, err)
							}
							full.Add(1)
						}
					}
				}
			}
		})
	}
}

func (o *fullFill) setCapacity(r int32, c u128) { o.capacity[r] = c }

// With kernels that slow NCCL beside them (opCosts.beside: a GPU's ports
// at a share of their capacity while such a local op runs there), the
// solver still equals the full fill bit for bit, and every flow has a
// bottleneck at every event, on random DAGs with random shares.
func TestBesideMatchesFullFill(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	cases, slowed := 120, 0
	if testing.Short() {
		cases = 30
	}
	for i := range cases {
		s, tp, opt := randomDAG(rng)
		opt.Timeline = true
		x := &opCosts{beside: make([]float64, len(s.Ops))}
		for o := range s.Ops {
			if s.Ops[o].Kind == ir.Copy && rng.IntN(2) == 0 {
				x.beside[o] = []float64{0.3, 0.7, 1}[rng.IntN(3)]
			}
		}
		want, errW := engineWith(newFullFill)(s, tp, opt, x)
		for _, frac := range []float64{-1, 0, 2} {
			got, errG := engineWith(fluidWith(frac))(s, tp, opt, x)
			if (errW == nil) != (errG == nil) {
				t.Fatalf("case %d, full fraction %g: error %v, oracle's %v", i, frac, errG, errW)
			}
			if errW != nil {
				break
			}
			if err := sameResult(got, want); err != nil {
				t.Fatalf("case %d (%d ops), full fraction %g: %v", i, len(s.Ops), frac, err)
			}
		}
		var defErr error
		if _, err := engineWith(func(c []u128) solver { return checkedFluid{newFluid(c), &defErr} })(s, tp, opt, x); err == nil && defErr != nil {
			t.Fatalf("case %d: max-min definition: %v", i, defErr)
		}
		if errW == nil {
			plain, err := engineWith(nil)(s, tp, opt, nil)
			if err == nil && plain.Makespan != want.Makespan {
				slowed++
			}
		}
	}
	if slowed < cases/10 {
		t.Errorf("only %d of %d cases slowed by the kernels beside NCCL: the test does not exercise it", slowed, cases)
	}
}

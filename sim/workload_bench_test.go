package sim

import (
	"flag"
	"strings"
	"testing"

	"github.com/m2n-project/m2n/internal/scentest"
	"github.com/m2n-project/m2n/ir"
	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/plan"
)

// workloadPoint loads a shipped whole-model scenario.
func workloadPoint(b testing.TB, name string) (*scenario.Point, []ir.Tensor) {
	b.Helper()
	p := scentest.Points(b, name)[0]
	ts := make([]ir.Tensor, len(p.Tensors))
	for i, t := range p.Tensors {
		ts[i] = ir.Tensor{Name: t.Name, Src: t.Src, Dst: t.Dst}
	}
	return p, ts
}

// BenchmarkWorkload plans, verifies, bounds and simulates each shipped
// whole-model refit, every route its scenario lists, as `m2n sim` does:
// docs/performance.md has the figures (target: dsv3-256 under 30 s).
func BenchmarkWorkload(b *testing.B) {
	for _, name := range []string{"dsv3-256", "qwen3-235b-128"} {
		b.Run(name, func(b *testing.B) {
			p, ts := workloadPoint(b, name)
			chunk := int64(plan.DefaultChunkBytes)
			if p.Chunk != nil {
				chunk = int64(*p.Chunk)
			}
			var ops, flows int
			for b.Loop() {
				ops, flows = 0, 0
				for _, route := range p.Routes {
					s, err := plan.Build(ts, p.Topology, plan.Options{Route: route, ChunkBytes: chunk})
					if err != nil {
						b.Fatal(err)
					}
					if _, err := plan.Bound(route, ts, p.Topology); err != nil {
						b.Fatal(err)
					}
					res, err := Run(s, p.Topology, Options{})
					if err != nil {
						b.Fatal(err)
					}
					ops += len(s.Ops)
					flows += res.Flows
				}
			}
			b.ReportMetric(float64(ops), "ops")
			b.ReportMetric(float64(flows), "flows")
		})
	}
}

// BenchmarkWorkloadSim simulates one route of a shipped whole-model
// scenario, the schedule built once outside the timing: the simulator alone.
func BenchmarkWorkloadSim(b *testing.B) {
	for _, c := range []struct{ name, route string }{
		{"dsv3-256", "hierarchical"}, {"dsv3-256", "agbcast"}, {"dsv3-256", "nemo-legacy"},
		{"qwen3-235b-128", "hierarchical"}, {"dsv3-256", "flat"},
	} {
		b.Run(c.name+"/"+c.route, func(b *testing.B) {
			p, s := workloadSchedule(b, c.name, c.route)
			var events int64
			for b.Loop() {
				res, err := Run(s, p.Topology, Options{})
				if err != nil {
					b.Fatal(err)
				}
				events = res.Events
			}
			b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkWorkloadPlan builds and verifies one route of a shipped
// whole-model scenario: the planner alone, its time and allocations
// (docs/performance.md, "Planner memory").
func BenchmarkWorkloadPlan(b *testing.B) {
	for _, route := range []string{"agbcast", "nemo-legacy", "hierarchical"} {
		b.Run("dsv3-256/"+route, func(b *testing.B) {
			p, ts := workloadPoint(b, "dsv3-256")
			chunk := int64(plan.DefaultChunkBytes)
			if p.Chunk != nil {
				chunk = int64(*p.Chunk)
			}
			b.ReportAllocs()
			var ops int
			for b.Loop() {
				s, err := plan.Build(ts, p.Topology, plan.Options{Route: route, ChunkBytes: chunk})
				if err != nil {
					b.Fatal(err)
				}
				ops = len(s.Ops)
			}
			b.ReportMetric(float64(ops), "ops")
		})
	}
}

// workloadSchedule builds one route of a shipped whole-model scenario at
// its first point.
func workloadSchedule(b testing.TB, name, route string) (*scenario.Point, *ir.Schedule) {
	b.Helper()
	p, _ := workloadPoint(b, name)
	return p, pointSchedule(b, p, route)
}

// pointSchedule builds one route of a scenario point, at its chunk.
func pointSchedule(b testing.TB, p *scenario.Point, route string) *ir.Schedule {
	b.Helper()
	ts := make([]ir.Tensor, len(p.Tensors))
	for i, t := range p.Tensors {
		ts[i] = ir.Tensor{Name: t.Name, Src: t.Src, Dst: t.Dst}
	}
	chunk := int64(plan.DefaultChunkBytes)
	if p.Chunk != nil {
		chunk = int64(*p.Chunk)
	}
	s, err := plan.Build(ts, p.Topology, plan.Options{Route: route, ChunkBytes: chunk})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkSymmetrySearch looks for the symmetry of one route of
// dsv3-256 (sim/symmetry.go), as the engine does before simulating: what
// it costs, and what it finds (classes of flows and of resources; 0 where
// it gives up).
func BenchmarkSymmetrySearch(b *testing.B) {
	for _, route := range []string{"hierarchical", "agbcast", "nemo-legacy", "flat"} {
		b.Run("dsv3-256/"+route, func(b *testing.B) {
			p, s := workloadSchedule(b, "dsv3-256", route)
			e, err := newEngine(s, p.Topology, Options{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			var sym *symmetry
			for b.Loop() {
				sym = e.findSymmetry()
			}
			var flows, res int
			if sym != nil {
				flows, res = len(sym.urep), len(sym.rrep)
			}
			b.ReportMetric(float64(flows), "flow-classes")
			b.ReportMetric(float64(res), "resource-classes")
		})
	}
}

// solvePoint is the point BenchmarkSolveSizes simulates: scenario/point/route.
var solvePoint = flag.String("solvepoint", "scaling-qwen3-235b/gpus=128/hierarchical", "BenchmarkSolveSizes: the scenario, point label and route to count the solves of")

// solveWindow is how many solves BenchmarkSolveSizes averages over to
// find its busiest stretch.
const solveWindow = 2000

// countingFluid is the solver counting, after every solve, the resources
// it refilled (A), the flows it took one by one (X) and the levels it
// changed, over the run and per window of solveWindow solves.
type countingFluid struct {
	*fluid
	c *solveCounts
}

type solveCounts struct {
	solves, a, x, levels int64 // summed over the run
	wa, wx, wl, wn       int64 // summed over the window under way
	maxA, maxX, maxL     float64
}

func (c countingFluid) solve() {
	c.fluid.solve()
	n := c.c
	a, x, l := int64(len(c.fluid.A)), int64(len(c.fluid.X)), int64(len(c.fluid.levelCh))
	n.solves, n.a, n.x, n.levels = n.solves+1, n.a+a, n.x+x, n.levels+l
	n.wa, n.wx, n.wl, n.wn = n.wa+a, n.wx+x, n.wl+l, n.wn+1
	if n.wn == solveWindow {
		w := float64(solveWindow)
		n.maxA, n.maxX, n.maxL = max(n.maxA, float64(n.wa)/w), max(n.maxX, float64(n.wx)/w), max(n.maxL, float64(n.wl)/w)
		n.wa, n.wx, n.wl, n.wn = 0, 0, 0, 0
	}
}

// BenchmarkSolveSizes counts how large the solves of one simulation are
// (-solvepoint; docs/performance.md, "Memory touched once; entries found
// once"): per solve on average, and in the busiest window of solveWindow
// solves, the resources refilled, the flows taken one by one and the
// levels changed. A window whose levels changed come near its resources
// refilled is a coupled phase: one event there moves every port's level.
func BenchmarkSolveSizes(b *testing.B) {
	parts := strings.Split(*solvePoint, "/")
	if len(parts) != 3 {
		b.Fatalf("-solvepoint %q: want scenario/point/route", *solvePoint)
	}
	var p *scenario.Point
	for _, q := range scentest.Points(b, parts[0]) {
		if q.Label() == parts[1] {
			p = q
		}
	}
	if p == nil {
		b.Fatalf("-solvepoint %q: no point %s", *solvePoint, parts[1])
	}
	s := pointSchedule(b, p, parts[2])
	var c solveCounts
	for b.Loop() {
		c = solveCounts{}
		if _, err := run(s, p.Topology, Options{NoSymmetry: true}, engineWith(func(capa []u128) solver { return countingFluid{newFluid(capa), &c} })); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(max(c.solves, 1))
	b.ReportMetric(float64(c.solves), "solves")
	b.ReportMetric(float64(c.a)/n, "resources/solve")
	b.ReportMetric(float64(c.x)/n, "flows/solve")
	b.ReportMetric(float64(c.levels)/n, "levels/solve")
	b.ReportMetric(c.maxA, "busiest-resources/solve")
	b.ReportMetric(c.maxX, "busiest-flows/solve")
	b.ReportMetric(c.maxL, "busiest-levels/solve")
}

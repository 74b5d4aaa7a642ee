package evaluate

import (
	"strings"
	"testing"

	"github.com/m2n-project/m2n/model/scenario"
	"github.com/m2n-project/m2n/model/units"
	"github.com/m2n-project/m2n/plan"
	"github.com/m2n-project/m2n/sim"
)

const twoGPUs = `
name = "two"
[topology]
preset = "hgx-h200"
gpus_per_domain = 1
[[tensors]]
name = "w"
shape = [64, 32]
dtype = "bf16"
src = { shape = [2], ranks = "0-1", placements = ["S(0)"] }
dst = { shape = [2], ranks = "2-3", placements = ["R"] }
[[reference]]
route = "flat"
time_ms = 1.0
source = "first"
[[reference]]
route = "flat"
time_ms = 2.0
source = "second"
note = "the last match counts"
`

func point(t *testing.T) *scenario.Point {
	t.Helper()
	sc, err := scenario.Parse("two.toml", []byte(twoGPUs))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := sc.Points()
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

// A record holds the bound and the simulation of the same schedule, and the
// last reference that matches the route and point.
func TestPoint(t *testing.T) {
	p := point(t)
	sc, _ := scenario.Parse("two.toml", []byte(twoGPUs))
	rec, s, res, err := Point(p, plan.Options{Route: plan.Flat}, Options{References: sc.References})
	if err != nil {
		t.Fatal(err)
	}
	sol, err := plan.Bound(plan.Flat, s.Tensors, p.Topology)
	if err != nil {
		t.Fatal(err)
	}
	if rec.SOL != sol.Time || rec.SOLTerm != sol.Term || rec.UniqueBytes != 64*32*2 {
		t.Errorf("bound %v %q %d, want %v %q %d", rec.SOL, rec.SOLTerm, rec.UniqueBytes, sol.Time, sol.Term, 64*32*2)
	}
	if rec.Modeled != res.Makespan || rec.Modeled <= 0 || rec.Ops != len(s.Ops) || rec.Bottleneck.Name != res.Bottleneck.Name {
		t.Errorf("modeled %v ops %d bottleneck %q; simulation %v, %d ops, %q", rec.Modeled, rec.Ops, rec.Bottleneck.Name, res.Makespan, len(s.Ops), res.Bottleneck.Name)
	}
	if rec.Measured != 2*units.Millisecond || rec.MeasuredSource != "second" || rec.MeasuredNote != "the last match counts" {
		t.Errorf("reference %v %q %q, want the last match", rec.Measured, rec.MeasuredSource, rec.MeasuredNote)
	}
	if got, want := rec.MeasuredError(), rec.Modeled.Seconds()/0.002-1; got != want {
		t.Errorf("error %v, want %v", got, want)
	}
	if rec.Label() != p.Label() || rec.ModeledOn != "hgx-h200" {
		t.Errorf("label %q, modeled on %q", rec.Label(), rec.ModeledOn)
	}
	// No references for another route.
	rec, _, _, err = Point(p, plan.Options{Route: plan.Hierarchical}, Options{References: sc.References})
	if err != nil || rec.HasMeasured() {
		t.Errorf("hierarchical: %v, measured %v", err, rec.Measured)
	}
}

// A schedule whose route has no bound is an error, not a zero SOL.
func TestScheduleNoBound(t *testing.T) {
	p := point(t)
	_, s, _, err := Point(p, plan.Options{Route: plan.Flat}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Route = "teleport"
	if _, _, err := Schedule(s, p.Topology, Options{}); err == nil || !strings.Contains(err.Error(), "SOL bound") {
		t.Errorf("unknown route: %v, want a SOL bound error", err)
	}
}

// The loopback model runs every rank on one GPU at the measured copy rate;
// the bound stays the cluster's.
func TestLoopback(t *testing.T) {
	p := point(t)
	cluster, s, _, err := Point(p, plan.Options{Route: plan.Flat}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	loop, res, err := Schedule(s, p.Topology, Options{LoopbackMemory: units.GBps(1000)})
	if err != nil {
		t.Fatal(err)
	}
	if loop.SOL != cluster.SOL || loop.ModeledOn != "one GPU at 1000 GB/s" || loop.Modeled == cluster.Modeled {
		t.Errorf("loopback SOL %v modeled %v on %q; cluster SOL %v modeled %v", loop.SOL, loop.Modeled, loop.ModeledOn, cluster.SOL, cluster.Modeled)
	}
	for _, r := range res.Resources {
		if r.Class != sim.Memory && r.Bytes > 0 {
			t.Errorf("loopback: %s carried %d bytes, want memory only", r.Name, r.Bytes)
		}
	}
	if p.Topology.Memory == units.GBps(1000) {
		t.Error("the loopback model changed the point's topology")
	}
}
